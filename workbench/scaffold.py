"""`workbench new FAMILY`: a new kernel family that passes its own check, to edit from there.

`scaffold(root, name)` writes four files under a project root (a folder with kernels/ and
references/; the repository by default in the CLI):

* kernels/<name>/family.toml: a complete, commented contract for a simple elementwise op,
  out = alpha * inp + beta over N floats (sizes, odd test sizes, tolerance, bytes, the PyTorch
  equivalent, the reference);
* kernels/<name>/1_naive.cu: version 1, one thread per element, with its header (title, what
  changed, why, block sizes, one launch step) and a bounds-checked extern "C" kernel;
* references/<name>.py: the float64 reference, a plain function;
* tests/test_<name>.py: CPU tests (the contract loads and makes cases, the reference matches a
  hand computation, version 1 compiles with nvcc for sm_90) and one GPU test (version 1 passes
  the workbench's check), which skip themselves where nvcc or a GPU is missing.

A name must be a lower-case identifier (it names a folder, a Python module and a CUDA kernel)
that no file of the project uses yet; `force=True` overwrites the four files of a family that
`new` made before (to start it again), never a family that has more versions than the scaffold's,
a contract `new` did not write, or files git tracks: a family the project ships is refused. Each
file is written atomically (a temporary name in its folder, then renamed).
"""

from __future__ import annotations

import keyword
import re
import subprocess
from pathlib import Path
from string import Template

from .errors import UsageError
from .family import VERSION_FILE, Project
from .files import write_text_atomic

NAME = re.compile(r"[a-z][a-z0-9_]*")
# kernels/common/ holds headers the versions share; it is not a family.
RESERVED = {"common"}

FAMILY_TOML = Template('''\
# The contract of the $name family, written by `workbench new $name`: kernels/README.md documents
# every key. The workbench checks each version against the reference below, element by element,
# at the default and the test sizes, then times it. Edit it to describe your op.
title = "$title"
summary = """
out = alpha * inp + beta, element by element over N floats: a starting point to edit. Two FLOPs
per 8 bytes moved: memory-bound, so the goal is the copy ceiling.
"""
sizes = ["N"]                                # the size parameters, in display order
# derived = { HALF = "N // 2" }              # names computed from the sizes (usable everywhere)
params = { alpha = 2.0, beta = 0.5 }         # scalars passed to the kernels and the reference
default_sizes = { N = 16777216 }             # 1 << 24: what `run` and `bench` time (64 MiB each way)
# Odd sizes on purpose, checked but not timed: one element, less than a warp, and a prime that
# leaves a partial last block at every block size.
test_sizes = [
  { N = 1 },
  { N = 31 },
  { N = 1000003 },
]
preconditions = ["N >= 1"]                   # sizes outside these are refused, with the reason
tolerance = { atol = 1e-6, rtol = 1e-6 }     # pass iff |ref - out| <= atol + rtol * |ref|, every element
bytes = "4 * 2 * N"                          # what must move: inp read once, out written once (float32)
# flops = "2 * N"                            # adds TFLOP/s to the tables: for compute-bound ops
reference = "$name"                          # references/$name.py, function $name()
torch = "alpha * inp + beta"                 # the PyTorch equivalent, checked and timed beside the versions
torch_outputs = ["out"]                      # what that expression returns
args = [                                     # the op's device buffers (role: in, out or inout)
  { name = "out", role = "out", shape = "N" },
  { name = "inp", role = "in",  shape = "N", init = "normal(0, 1)" },
]
''')

VERSION_1 = Template('''\
/*
title = "One thread per element"
changed = "The starting point: the formula, one thread per element."
why = """
Every element is independent and neighbouring threads read and write neighbouring floats, so
every load and store is coalesced from the start. N is rarely a multiple of the block size (see
the test sizes), so the last block runs past the end: the bounds check keeps it in.
"""
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "$kernel"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["out", "inp", "N", "f32:alpha", "f32:beta"]
*/

extern "C" __global__ void $kernel(float* out, const float* inp, int N, float alpha, float beta) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = alpha * inp[i] + beta;
}
''')

REFERENCE = Template('''\
"""$title: out = alpha * inp + beta, element by element. The workbench calls it in float64 with
the inputs and params it asks for by name, and compares every output element with each version's."""


def $name(inp, alpha, beta):
    return {"out": alpha * inp + beta}
''')

TEST = Template('''\
"""The $name family, written by `workbench new $name`: its contract, its reference and version 1.

CPU: the contract loads and makes cases, the reference matches a hand computation, version 1
compiles with nvcc. GPU (marked gpu): version 1 passes the workbench's check at every test size.
"""

import shutil
from pathlib import Path

import numpy as np
import pytest

from workbench.check import make_case
from workbench.family import Project

ROOT = Path(__file__).resolve().parent.parent
NAME = "$name"


def family():
    return Project(ROOT).family(NAME)


def test_the_contract_loads_and_makes_a_case_at_every_test_size():
    fam = family()
    assert fam.versions[0].number == 1
    for sizes in fam.test_sizes:
        case = make_case(fam, sizes, 0)
        assert case.expected["out"].shape == (sizes["N"],)


def test_the_reference_matches_a_hand_computation():
    out = family().reference(inp=np.array([0.0, 1.0, -2.0, 0.25]), alpha=2.0, beta=0.5)["out"]
    np.testing.assert_allclose(out, [0.5, 2.5, -3.5, 1.0])


def test_version_1_compiles_for_sm_90():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    from workbench.compile import compile_only
    resources, _ = compile_only(family().version(1).path, "sm_90")
    assert "$kernel" in resources


@pytest.mark.gpu
def test_version_1_passes_on_the_gpu():
    from workbench.bench import Options, Session
    from workbench.errors import NoGPU
    with Session(Project(ROOT), Options(time=False, torch=False)) as session:
        try:
            row = session.run_version(family().version(1))
        except NoGPU as e:
            pytest.skip(str(e))
    assert row.status == "passed", f"{row.status}: {row.reason}"
''')


def check_name(name: str) -> None:
    """A one-line WorkbenchError unless `name` can name a family (folder, module and kernel)."""
    if not NAME.fullmatch(name or ""):
        raise UsageError(f"bad family name {name!r}: use a lower-case identifier "
                             f"(letters, digits, underscores; a letter first), e.g. scale_shift")
    if keyword.iskeyword(name) or name in RESERVED:
        raise UsageError(f"bad family name {name!r}: it is reserved "
                             f"({'a Python keyword' if keyword.iskeyword(name) else 'kernels/' + name + '/ is not a family'})")


def planned_files(root: Path, name: str) -> dict[Path, str]:
    """The files a new family `name` consists of, and their text."""
    fields = {"name": name, "title": name.replace("_", " ").capitalize(), "kernel": f"{name}1"}
    return {root / "kernels" / name / "family.toml": FAMILY_TOML.substitute(fields),
            root / "kernels" / name / "1_naive.cu": VERSION_1.substitute(fields),
            root / "references" / f"{name}.py": REFERENCE.substitute(fields),
            root / "tests" / f"test_{name}.py": TEST.substitute(fields)}


def conflicts(root: Path, name: str, force: bool) -> list[Path]:
    """Files in the way: any of the four (unless force), or another file claiming version 1."""
    found = [] if force else [p for p in planned_files(root, name) if p.exists()]
    folder = root / "kernels" / name
    if folder.is_dir():
        found += [p for p in sorted(folder.glob("*.cu")) if p.name != "1_naive.cu"
                  and (m := VERSION_FILE.match(p.name)) and int(m.group(1)) == 1]
        if not force and not found and any(folder.iterdir()):
            found.append(folder)
    return found


def tracked_by_git(root: Path, paths: list[Path]) -> list[Path]:
    """Those of `paths` that git tracks in the repository holding `root` (none outside one)."""
    try:
        done = subprocess.run(["git", "ls-files", "-z", "--", *(str(p.relative_to(root)) for p in paths)],
                              cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    listed = set(filter(None, done.stdout.split("\0"))) if done.returncode == 0 else set()
    return [p for p in paths if p.relative_to(root).as_posix() in listed]


def not_a_scaffold(root: Path, name: str) -> str | None:
    """Why the existing files of `name` are not a family `new` made (so --force may not replace
    them), or None: more versions than the scaffold's, a contract `new` did not write, files git
    tracks."""
    folder = root / "kernels" / name
    versions = sorted(p.name for p in folder.glob("*.cu") if p.name != "1_naive.cu" and VERSION_FILE.match(p.name))
    if versions:
        return f"kernels/{name}/ holds versions `new` did not write ({', '.join(versions)})"
    existing = [p for p in planned_files(root, name) if p.exists()]
    if not existing:
        return None
    if tracked := tracked_by_git(root, existing):
        return f"git tracks {tracked[0].relative_to(root).as_posix()}"
    toml = folder / "family.toml"
    if not toml.exists():
        return f"{existing[0].relative_to(root).as_posix()} exists without a family `new` made"
    if f"written by `workbench new {name}`" not in toml.read_text(errors="replace"):
        return f"kernels/{name}/family.toml was not written by `workbench new`"
    return None


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def scaffold(root: Path, name: str, force: bool = False) -> list[Path]:
    """Write a new family `name` under the project `root`; returns the four paths written."""
    root = Path(root)
    check_name(name)
    in_the_way = conflicts(root, name, force)
    if in_the_way:
        shown = in_the_way[0].relative_to(root)
        why = "claims version 1 already" if in_the_way[0].suffix == ".cu" else "exists already"
        hint = "" if force or why != "exists already" or not_a_scaffold(root, name) \
            else " (--force overwrites the new family's files)"
        raise UsageError(f"cannot create family {name!r}: {shown} {why}{hint}")
    if force and (why := not_a_scaffold(root, name)):
        raise UsageError(f"cannot replace family {name!r}: {why}; --force only replaces the files of a "
                         f"family that `workbench new` made, never one that existed before")
    files = planned_files(root, name)
    for path, text in files.items():
        write_atomically(path, text)
    Project(root).family(name)  # the contract it just wrote loads (a ContractError otherwise)
    return list(files)
