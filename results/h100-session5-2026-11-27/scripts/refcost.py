"""Seconds of each (family, precision) group's reference cases, per case: draw, reference, save."""
import sys, time, json, tempfile, shutil
from pathlib import Path
from workbench.family import Project, PROJECT_ROOT
from workbench.options import Options
from workbench.check import make_inputs, run_reference, save_case, Case
from workbench.cases import CaseStore

opts = Options()
proj = Project(PROJECT_ROOT)
only = sys.argv[1:]
out = {}
tmp = Path(tempfile.mkdtemp())
class S(CaseStore):
    def __init__(self): self.options = opts
store = S()
for fam in proj.families():
    if only and fam.name not in only: continue
    for p in fam.precision_names():
        if not any(v.precision == p for v in fam.versions): continue
        key, plan = store.plan(fam, opts.sizes_for(fam), p)
        rows = []
        for i, (sizes, seed) in enumerate(plan):
            t0 = time.perf_counter(); inp = make_inputs(fam, sizes, seed, p)
            t1 = time.perf_counter(); exp = run_reference(fam, sizes, inp, p)
            t2 = time.perf_counter(); save_case(Case(dict(sizes), seed, inp, exp, p), tmp / "c")
            t3 = time.perf_counter(); shutil.rmtree(tmp / "c")
            rows.append((round(t1-t0,3), round(t2-t1,3), round(t3-t2,3)))
        tot = sum(sum(r) for r in rows)
        out[f"{fam.name}/{p}"] = {"total": round(tot,2), "cases": rows}
        print(f"{fam.name:32s} {p:5s} {tot:7.2f}  timed: {rows[0]} {rows[1] if len(rows)>1 else ''} rest {sum(sum(r) for r in rows[2:]):.2f}", flush=True)
json.dump(out, open(sys.stdout.name if False else "scratch/refcost.json", "w"), indent=1)
