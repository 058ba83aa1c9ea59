"""Session 25: train/kernels folders that differ from this tree's in one entry, for interleaved
trainer runs: `python3 alt_kernels.py OUT family version [family version ...]` copies train/kernels
to OUT and freezes each named version there (workbench.promote.record, the fields of the entry it
replaces kept: no check or timing here; the versions were checked when written)."""
import shutil
import sys
from pathlib import Path

from workbench.family import Project
from workbench.promote import entry_key, read_manifest, record

out = Path(sys.argv[1])
shutil.rmtree(out, ignore_errors=True)
shutil.copytree("train/kernels", out)
project = Project()
args = sys.argv[2:]
for fam_name, number in zip(args[::2], args[1::2]):
    v = project.family(fam_name).version(int(number))
    old = read_manifest(out)["kernels"][entry_key(fam_name, v.precision, v.variant)]
    fields = {k: old[k] for k in ("block_size", "timed_at", "checked_at", "median_us", "gbps", "gpu", "date", "commit")}
    record(out, v, v.variant, fields)
    print(out, fam_name, number, "frozen")
