"""Racecheck of matmul_backward_dgelu 8 with its raw output kept: the whole version (as `workbench
sanitize` runs it), then only our kernels (--kernel-name), then version 7 at the same test sizes
(its cuBLASLt GEMMs, tuned), to tell whether the sanitizer's internal error is ours."""
import sys

import workbench.sanitize as S
from workbench.bench import Options, Session
from workbench.family import Project

out_dir = sys.argv[1]
project = Project(".")
fam = project.family("matmul_backward_dgelu")
probes = [(p.split(":")[0], int(p.split(":")[1]), []) for p in sys.argv[2:]]
with Session(project, Options(seeds=1, time=False)) as session:
    for name, number, extra in probes:
        real = S.run_job

        def run_job(req, timeout, prefix, extra=extra, name=name, real=real):
            res = real(req, timeout, prefix=[*prefix, *extra])
            out = (res.get("_stdout") or "") + "\n" + (res.get("stderr") or "")
            open(f"{out_dir}/racecheck-{name}.log", "w").write(out)
            return res
        S.run_job = run_job
        [f] = S.sanitize(session, [fam.version(number)], tools=("racecheck",), parallel=1, timeout=300)
        S.run_job = real
        print(name, f.status, f.errors, "; ".join(f.lines[:3]), f.reason, flush=True)
