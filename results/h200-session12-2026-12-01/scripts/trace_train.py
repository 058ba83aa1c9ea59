"""One graph replay of `workbench train` as the GPU ran it (torch.profiler's CUPTI trace): the
kernels, memsets and copies between two adamw launches in order, their sum, the idle gaps, and
what sits beside each memset. Usage: python3 trace_train.py OUT.json [train options]."""
import json, sys, collections
import torch
from torch.profiler import ProfilerActivity, profile
out = sys.argv[1]
sys.argv = ["workbench", "train", "--precision", "bf16", "--steps", "6", "-v", "0", "-s", "0", *sys.argv[2:]]
from workbench.cli.app import main
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    try:
        main()
    except SystemExit:
        pass
prof.export_chrome_trace(out + ".trace.json")
ev = json.load(open(out + ".trace.json"))["traceEvents"]
gpu = sorted((e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")),
             key=lambda e: e["ts"])
ad = [i for i, e in enumerate(gpu) if e["name"].startswith("adamw")]
lo, hi = ad[-2] + 1, ad[-1] + 1
step = gpu[lo:hi]
t0 = gpu[lo - 1]["ts"] + gpu[lo - 1]["dur"]
t1 = step[-1]["ts"] + step[-1]["dur"]
busy, end = 0.0, t0
gaps = []
for prev, e in zip([gpu[lo - 1]] + step[:-1], step):
    s, d = e["ts"], e["dur"]
    gaps.append((max(0.0, s - end), prev["name"][:60], e["name"][:60], e.get("args", {}).get("stream")))
    busy += max(0.0, s + d - max(s, end))
    end = max(end, s + d)
res = {"span_us": t1 - t0, "busy_us": busy, "events": len(step),
       "memsets": [], "gap_by_next": collections.Counter(), "streams": collections.Counter()}
for g, p, n, st in gaps:
    res["gap_by_next"][n] += g
for e in step:
    res["streams"][str(e.get("args", {}).get("stream"))] += 1
for i, e in enumerate(step):
    if e["cat"] == "gpu_memset":
        res["memsets"].append({"dur": e["dur"], "bytes": e.get("args", {}).get("bytes"),
                               "stream": e.get("args", {}).get("stream"),
                               "before": step[i - 1]["name"][:50] if i else "", "after": step[i + 1]["name"][:50] if i + 1 < len(step) else ""})
res["gap_by_next"] = dict(res["gap_by_next"].most_common(25))
res["total_gap_us"] = sum(g for g, *_ in gaps)
res["order"] = [(e["name"][:50], round(e["dur"], 1), round(g[0], 1)) for e, g in zip(step, gaps)]
json.dump(res, open(out, "w"), indent=1, default=str)
ms = collections.Counter((m["before"], m["after"], m["bytes"]) for m in res["memsets"])
print(f"span {res['span_us']:.0f} us, busy {busy:.0f} us, gaps {res['total_gap_us']:.0f} us, {len(step)} events, streams {dict(res['streams'])}")
print(f"memsets: {len(res['memsets'])}, {sum(m['dur'] for m in res['memsets']):.0f} us")
for (b, a, n), c in ms.most_common(12):
    print(f"  {c:4d}x bytes={n} after [{b}] before [{a}]")
print("largest gaps by next kernel:")
for n, g in list(res["gap_by_next"].items())[:12]:
    print(f"  {g:8.1f} us  {n}")
