"""Where a bench --all's GPU waited: each group's references (started, ready) against when the
GPU began it, from the phases a bench JSON carries (caad0f7 on). Usage: timeline.py BENCH.json"""
import json
import sys

d = json.load(open(sys.argv[1]))
ph = d["phases"]
started, ready, benched = ph["references started at"], ph["references ready at"], ph["benched at"]
seconds = {f"{f['family']}/{f.get('precision') or 'fp32'}": f["seconds"] for f in d["families"]}
print(f"total {d['seconds']['total']} s; last references ready at {max(ready.values())} s; "
      f"families' own seconds {sum(seconds.values()):.1f}")
end = 0.0
for g in sorted(benched, key=benched.get):
    gap = benched[g] - end
    print(f"{g:36s} references {started[g]:6.1f} -> {ready[g]:6.1f}  benched at {benched[g]:6.1f}"
          f"  GPU idle before it {gap:5.1f}  family {seconds[g]:5.2f} s")
    end = benched[g] + seconds[g]
