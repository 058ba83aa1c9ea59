"""Compile: a version's .cu file to a loaded CUDA module, with its resource report.

On the GPU, versions are compiled the way PyCUDA's `SourceModule` does it, in its two halves:
`pycuda.compiler.compile` (nvcc to a cubin, cached, so a re-run is instant) at the device's own
arch, `-O3 --use_fast_math` by default, then `pycuda.driver.module_from_buffer`. Splitting them
lets a bench compile every version ahead, in a process pool and without a GPU context
(`compile_in_pool`).
The source is prefixed with a `#line` directive so nvcc's diagnostics name the version's own file
and line. ptxas runs with `-v`; its report (registers, spills, stack, shared memory per kernel)
is parsed and cached beside PyCUDA's cubin cache.

Without a GPU, `compile_only` runs the `nvcc` on PATH on the same file with the same options for
any arch (the CPU tests build every version for sm_80 and sm_90a this way).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from .errors import CompileError, NoGPU

DEFAULT_FLAGS = ("-O3", "--use_fast_math")
CACHE_DIR = Path(os.environ.get("WORKBENCH_CACHE", Path.home() / ".cache" / "workbench"))
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


@dataclass
class Resources:
    """ptxas's report for one kernel."""

    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack: int = 0
    shared: int = 0

    def line(self) -> str:
        spills = f"{self.spill_stores}/{self.spill_loads} B spilled" if (self.spill_stores or self.spill_loads) else "no spills"
        return f"{self.registers} regs, {spills}, {self.stack} B stack, {self.shared} B static smem"


def flags() -> list[str]:
    """The nvcc flags: the defaults, or WORKBENCH_NVCC_FLAGS when set (configurable per run)."""
    env = os.environ.get("WORKBENCH_NVCC_FLAGS")
    return shlex.split(env) if env is not None else list(DEFAULT_FLAGS)


def include_dirs(path: Path) -> list[str]:
    """Headers a version may include: its own folder and kernels/common."""
    path = Path(path).resolve()
    dirs = [path.parent]
    common = path.parent.parent / "common"
    if common.is_dir():
        dirs.append(common)
    return [str(d) for d in dirs]


def source_for(path: Path) -> str:
    """The text handed to nvcc: the file, with a #line so errors point at it, not a temp copy."""
    path = Path(path).resolve()
    return f'#line 1 "{path}"\n' + path.read_text()


def find_header(name: str, dirs: list[str]) -> Path | None:
    """Where a local `#include "name"` resolves: the first of `dirs` (include_dirs) holding it,
    as nvcc's -I order finds it; None for a header nvcc finds elsewhere (CUDA's own). Compile's
    cache key, flatten and the watch all resolve includes through this."""
    for d in dirs:
        cand = Path(d) / name
        if cand.exists():
            return cand
    return None


def flatten(path: Path) -> str:
    """The file with its local #include "..." headers inlined (for frozen, self-contained copies)."""
    path = Path(path).resolve()
    dirs = include_dirs(path)
    seen: set[Path] = set()

    def expand(p: Path) -> str:
        def repl(m: re.Match) -> str:
            cand = find_header(m.group(1), dirs)
            if cand is None:
                return m.group(0)
            if cand in seen:
                return f"// (already included: {m.group(1)})"
            seen.add(cand)
            return f"// ---- begin {m.group(1)} ----\n{expand(cand)}\n// ---- end {m.group(1)} ----"
        return INCLUDE.sub(repl, p.read_text())

    return expand(path)


PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
PTXAS_USED = re.compile(r"Used (\d+) registers")
PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(text: str) -> dict[str, Resources]:
    """Per-kernel resources from `ptxas -v` output."""
    out: dict[str, Resources] = {}
    current = None
    for line in text.splitlines():
        if m := PTXAS_ENTRY.search(line):
            current = out.setdefault(m.group(1), Resources())
        elif current is not None and (m := PTXAS_FRAME.search(line)):
            current.stack, current.spill_stores, current.spill_loads = map(int, m.groups())
        elif current is not None and (m := PTXAS_USED.search(line)):
            current.registers = int(m.group(1))
            if s := PTXAS_SMEM.search(line):
                current.shared = int(s.group(1))
    return out


# ptxas says some things worth a warning as "info": on sm_90a, C7515/C7510 "Potential Performance
# Loss: wgmma.mma_async instructions are serialized ..." means the asynchronous products wait for
# each other, which undoes what a wgmma kernel is written for.
PTXAS_ADVISORY = re.compile(r"Potential Performance Loss")


def diagnostics(text: str) -> str:
    """nvcc's output minus ptxas's resource chatter: the warnings a reader should see, ptxas's
    performance advisories included."""
    keep = [line for line in text.splitlines()
            if line.strip() and (not line.startswith("ptxas info") or PTXAS_ADVISORY.search(line))
            and not PTXAS_FRAME.search(line) and "The CUDA compiler succeeded" not in line]
    return "\n".join(keep)


def _display(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _shorten(text: str, path: Path) -> str:
    return text.replace(str(Path(path).resolve()), _display(path))


def require_nvcc() -> str:
    """The nvcc on PATH; a one-line CompileError if there is none."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CompileError("nvcc is not on PATH: install the CUDA toolkit to compile without a GPU")
    return nvcc


def compile_only(path: Path, arch: str, extra: list[str] | None = None) -> tuple[dict[str, Resources], str]:
    """Compile with the nvcc on PATH (no GPU needed). Returns (resources per kernel, warnings)."""
    nvcc = require_nvcc()
    path = Path(path).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, "-cubin", f"-arch={arch}", *flags(), *(extra or []), "-Xptxas", "-v",
               *(f"-I{d}" for d in include_dirs(path)), "-o", os.path.join(tmp, "out.cubin"), str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise CompileError(f"{_display(path)} does not compile for {arch}:\n{_shorten(diagnostics(text), path)}")
    return parse_ptxas(text), _shorten(diagnostics(text), path)


# Compute capabilities whose arch-specific features (the "a" targets) versions may use: 9.0's
# wgmma and setmaxnreg exist only in code built for sm_90a, which runs on 9.0 devices alone.
ARCH_SPECIFIC = {"9.0"}


def sm_arch(compute_capability: str) -> str:
    """nvcc's name for the code a device of this compute capability runs: "8.0" -> "sm_80";
    "9.0" -> "sm_90a" (the Hopper-only instructions included)."""
    return "sm_" + compute_capability.replace(".", "") + ("a" if compute_capability in ARCH_SPECIFIC else "")


def arch_of(probed: dict) -> str:
    """The arch of the device a session probed ({"device": {"compute_capability": "9.0"}, ...})."""
    return sm_arch(probed["device"]["compute_capability"])


def device_arch() -> str:
    import pycuda.driver as drv
    return sm_arch("%d.%d" % drv.Context.get_device().compute_capability())


@lru_cache(maxsize=None)
def _nvcc_identity() -> str:
    """Which nvcc compiled a cached cubin: its path, size and mtime (no subprocess)."""
    nvcc = shutil.which("nvcc") or "nvcc"
    try:
        st = os.stat(nvcc)
        return f"{nvcc}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        return nvcc


def _local_includes(text: str, dirs: list[str], seen: set[str] | None = None) -> str:
    """The contents of every local header `text` includes (recursively): part of the cache key,
    so editing kernels/common/*.cuh recompiles what uses it."""
    seen = set() if seen is None else seen
    out = []
    for name in INCLUDE.findall(text):
        cand = find_header(name, dirs)
        if cand is not None and str(cand) not in seen:
            seen.add(str(cand))
            body = cand.read_text()
            out.append(body + _local_includes(body, dirs, seen))
    return "\0".join(out)


def _cache_key(text: str, options: list[str], arch: str, dirs: list[str]) -> Path:
    key = hashlib.sha256("\0".join([text, _local_includes(text, dirs), arch, _nvcc_identity(), *options])
                         .encode()).hexdigest()[:40]
    return CACHE_DIR / "cubin" / key


def _keyed(path: Path | None, arch: str, source: str | None):
    """What a compile is keyed on: (path, text, include dirs, options, cache key)."""
    path = Path(path).resolve() if path is not None else None
    text = source if source is not None else source_for(path)
    dirs = include_dirs(path) if path is not None else []
    options = [*flags(), "-Xptxas", "-v"]
    return path, text, dirs, options, _cache_key(text, options, arch, dirs)


def is_cached(path: Path | None, arch: str, source: str | None = None) -> bool:
    """Whether compile_cubin would find this compile in the cache (no nvcc to run)."""
    key = _keyed(path, arch, source)[-1]
    return key.with_suffix(".cubin").exists() and key.with_suffix(".json").exists()


def compile_cubin(path: Path | None, arch: str, source: str | None = None):
    """nvcc through PyCUDA's compiler, behind a cache keyed on the text, its local headers, the
    options, the arch and the nvcc binary (so a cached load runs no subprocess at all).
    Returns (cubin, resources, warnings). `source` overrides the file's text (a frozen copy, or a
    harness kernel with no file); diagnostics still name `path`."""
    try:
        from pycuda.compiler import compile as pycuda_compile
        import pycuda.driver as drv
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise NoGPU(f"PyCUDA is not importable ({e}); install the gpu extra: pip install -e '.[gpu]'") from None
    path, text, dirs, options, key = _keyed(path, arch, source)
    cubin_file, report_file = key.with_suffix(".cubin"), key.with_suffix(".json")
    if cubin_file.exists() and report_file.exists():
        report = json.loads(report_file.read_text())
        return cubin_file.read_bytes(), {k: Resources(**v) for k, v in report["resources"].items()}, report["warnings"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            cubin = pycuda_compile(text, options=options, arch=arch, no_extern_c=True, include_dirs=dirs,
                                   cache_dir=False)
        except drv.CompileError as e:
            where = _display(path) if path is not None else "a harness kernel"
            text_err = diagnostics(e.stderr or str(e))
            raise CompileError(f"{where} does not compile for {arch}:\n"
                               f"{_shorten(text_err, path) if path is not None else text_err}") from None
    said = "\n".join(str(w.message) for w in caught if "CUDA compiler" in str(w.message))
    report = {"resources": {k: asdict(v) for k, v in parse_ptxas(said).items()},
              "warnings": _shorten(diagnostics(said), path) if path is not None else diagnostics(said)}
    key.parent.mkdir(parents=True, exist_ok=True)
    for target, data in ((cubin_file, cubin), (report_file, json.dumps(report).encode())):
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)  # atomic: parallel precompiles may race on the same key
    return cubin, {k: Resources(**v) for k, v in report["resources"].items()}, report["warnings"]


def load_module(path: Path | None, source: str | None = None):
    """Compile (cached) and load on the current context: (module, resources, warnings)."""
    import pycuda.driver as drv
    cubin, resources, warnings_text = compile_cubin(path, device_arch(), source)
    return drv.module_from_buffer(cubin), resources, warnings_text


def harness_module(source: str):
    """A workbench-internal kernel (flush, compare, copy, busy-wait), through the same cache."""
    return load_module(None, source)[0]


def arch_of_device() -> str:
    """The arch of the device this process would use, from the driver alone (cuInit, no context):
    what a pool process asks when the session does not know it yet."""
    import pycuda.driver as drv
    drv.init()
    return sm_arch("%d.%d" % drv.Device(0).compute_capability())


def _precompile_one(args) -> str | None:
    path, arch, source = args
    try:
        compile_cubin(Path(path) if path is not None else None, arch or arch_of_device(), source)
        return None
    except Exception as e:  # reported again, properly, when the version runs
        return f"{path or 'a harness kernel'}: {e}"


def compile_in_pool(pool, path: Path | None, arch: str | None, source: str | None = None):
    """Submit one compile (into the cache) to a process pool: a version's file, or a harness
    kernel's `source`; arch None: the pool process asks the driver. The future's result is None,
    or the error text (reported again, properly, when the version runs)."""
    return pool.submit(_precompile_one, (str(path) if path is not None else None, arch, source))
