"""Doctor: what this machine has for the workbench and the trainer, and what it tops out at.

Each dependency is a line: its version, or "missing" with how to get it. With a GPU, the
ceilings every table is measured against are measured (once per device, then cached): the copy
bandwidth, and the FP32, TF32 and bf16 matmul rates through cuBLASLt.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import shutil
import subprocess
from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str          # the version, or what is wrong
    fix: str = ""        # how to get it, when missing
    needed_for: str = ""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _module(name: str, dist: str, needed_for: str, fix: str, probe=None) -> Check:
    """A Python package: importable, and its version (plus what `probe(module)` adds)."""
    try:
        mod = importlib.import_module(name)
    except Exception as e:  # ImportError, or a shared library that will not load
        why = "not installed" if isinstance(e, ModuleNotFoundError) else f"does not import ({type(e).__name__}: {e})"
        return Check(name, False, why, fix, needed_for)
    detail = _version(dist) or getattr(mod, "__version__", "") or "installed"
    if probe is not None:
        try:
            extra = probe(mod)
            if extra:
                detail += f" ({extra})"
        except Exception as e:
            return Check(name, False, f"{detail}, but {type(e).__name__}: {e}", fix, needed_for)
    return Check(name, True, detail, "", needed_for)


def _command(name: str, args: list[str], needed_for: str, fix: str, pick=lambda out: out.strip().splitlines()[-1]) -> Check:
    path = shutil.which(name)
    if path is None:
        return Check(name, False, "not on PATH", fix, needed_for)
    try:
        out = subprocess.run([path, *args], capture_output=True, text=True, timeout=30)
        return Check(name, True, f"{pick(out.stdout + out.stderr)} ({path})", "", needed_for)
    except (OSError, subprocess.SubprocessError, IndexError) as e:
        return Check(name, False, f"{path} does not run ({e})", fix, needed_for)


def bytecode(dont_write: bool | None = None, packages=("pycuda", "workbench")) -> Check:
    """Whether imports come compiled: where Python writes no .pyc (PYTHONDONTWRITEBYTECODE) and
    the packages have none (pip's --no-compile), every child the workbench starts compiles each
    module it imports from source, ~0.7 s a child on the H100's host (184 s of a bench --all
    against 171 s with them)."""
    import importlib.util
    import sys
    from pathlib import Path
    writes = not (sys.flags.dont_write_bytecode if dont_write is None else dont_write)
    bare = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py") and \
                not Path(importlib.util.cache_from_source(spec.origin)).exists():
            bare.append((name, str(Path(spec.origin).parent.parent)))
    needed_for = "each version's child starting quickly"
    if writes or not bare:
        return Check("compiled imports", True, "Python writes .pyc" if writes else "every .pyc there", "", needed_for)
    return Check("compiled imports", False,
                 f"PYTHONDONTWRITEBYTECODE is set and {', '.join(n for n, _ in bare)} have no .pyc: every child "
                 f"compiles its imports from source", f"python -m compileall -q -j 0 {' '.join(sorted({d for _, d in bare}))}",
                 needed_for)


def software() -> list[Check]:
    """Everything checked without touching the GPU."""
    gpu_extra = "pip install -e '.[gpu]' (needs the CUDA toolkit's headers to build PyCUDA)"
    return [
        _command("nvidia-smi", ["--query-gpu=name,driver_version", "--format=csv,noheader"], "the GPU and its driver",
                 "install the NVIDIA driver (no GPU here? use Modal: modal run modal_app.py)"),
        _command("nvcc", ["--version"], "compiling kernels (also without a GPU)",
                 "install the CUDA toolkit and put its bin/ on PATH"),
        _command("compute-sanitizer", ["--version"], "workbench sanitize",
                 "ships with the CUDA toolkit: add /usr/local/cuda/bin to PATH",
                 pick=lambda out: next((line for line in out.splitlines() if "Version" in line), out.strip())),
        _module("pycuda", "pycuda", "run, bench, check, train", gpu_extra),
        _module("nvmath", "nvmath-python", "cuBLAS/cuBLASLt versions and the trainer's matmuls",
                "pip install nvmath-python"),
        _module("cudnn", "nvidia-cudnn-frontend", "cuDNN attention (library versions, train --attention cudnn)",
                "pip install nvidia-cudnn-frontend", probe=lambda m: f"cuDNN backend {m.backend_version()}"),
        _module("nccl", "nccl4py", "multi-GPU training (mpirun -np N workbench train)", "pip install nccl4py"),
        _module("mpi4py", "mpi4py", "multi-GPU training (mpirun)", "install Open MPI, then pip install mpi4py",
                probe=lambda m: importlib.import_module("mpi4py.MPI").Get_library_version().splitlines()[0].strip()),
        _command("mpirun", ["--version"], "multi-GPU training", "install Open MPI (or another MPI)",
                 pick=lambda out: out.strip().splitlines()[0]),
        _module("torch", "torch", "PyTorch baselines beside every table", "pip install torch",
                probe=lambda m: f"CUDA {m.version.cuda}, {'sees a GPU' if m.cuda.is_available() else 'no GPU'}"),
        _module("tiktoken", "tiktoken", "prepro (GPT-2 tokens) and decoding samples", "pip install tiktoken"),
        _module("matplotlib", "matplotlib", "workbench plot, run --sweep", "pip install matplotlib"),
        bytecode(),
    ]


def measure(session, refresh: bool = False) -> dict:
    """The device, its copy ceiling and its matmul peaks, measured in a child (then cached)."""
    from .errors import NoGPU
    from .isolate import run_job
    device = session.device(refresh=refresh)
    res = run_job({"job": "peaks", "root": str(session.project.root), "refresh": refresh}, 300)
    if res.get("status") != "passed":
        raise NoGPU(f"measuring the matmul peaks failed: {res.get('reason', res.get('status'))}")
    return {**device, "peaks": res["peaks"]}
