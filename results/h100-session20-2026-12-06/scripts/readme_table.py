"""README's table of the fastest version per family and precision, from a bench --all JSON (argv[1])."""
import json
import sys

j = json.load(open(sys.argv[1]))


def us(x):
    return "" if x is None else (f"{x:,.0f}" if x >= 1000 else f"{x:.1f}")


def median(entry):  # a baseline's (copy, torch) median, if it ran and passed
    if not entry or entry.get("status") != "passed" or not entry.get("timing"):
        return None
    return entry["timing"]["median_us"]


print("| family | precision | versions | fastest | µs | copy µs | copy / fastest | PyTorch µs |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
rows = []
for f in j["families"]:
    done = [v for v in f["versions"] if v["status"] == "passed" and v.get("best")]
    best = min(done, key=lambda v: v["best"]["median_us"])
    copy, torch = median(f.get("copy")), median(f.get("torch"))
    ratio = f"{copy / best['best']['median_us']:.2f}x" if copy else ""
    rows.append((f["family"], f.get("precision") or "fp32", len(f["versions"]), best["version"],
                 us(best["best"]["median_us"]), us(copy), ratio, us(torch)))
for r in sorted(rows):
    print("| " + " | ".join(str(c) for c in r) + " |")
