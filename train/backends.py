"""The trainer's backends: what runs a `Program`'s calls, the promoted kernels or the references.

`PromotedSet` reads train/kernels/manifest.json (workbench/promote.py writes and reads it) and the
frozen version files beside it, each checked against the hash promote recorded. `KernelBackend`
allocates the program's buffers, compiles each promoted version once and builds one launch plan
per call through workbench/launch.py, the same launch description the workbench checks and times:
there is no second copy of launch logic. `ReferenceBackend` runs the same calls with the families'
NumPy references on host arrays, so the program's wiring is testable without a GPU.

The program's collectives (model.py: Reduce, Join, AllReduce, AllGather) go to the `comm` a
KernelBackend is given (train/distributed.py's NCCL communicator); without one, in a single
process, they are nothing to do, and a program for several ranks is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import WorkbenchError
from workbench.family import Family, Project, Version, load_version
from workbench.promote import DETERMINISTIC, FALLBACK, MANIFEST, PromoteError, entry_key, read_manifest, sha256

from .errors import TrainError
from .model import (ITEMSIZE, RECOMPUTED, AllGather, AllReduce, Call, Join, Program, Reduce, Slice, Zero, memory_groups,
                    promotion_sizes)

KERNELS_DIR = Path(__file__).resolve().parent / "kernels"
COLLECTIVES = (Reduce, Join, AllReduce, AllGather)

# Families whose versions promoted before the manifest recorded "deterministic" add floats with
# atomicAdd (their bits vary from run to run): an entry of these without the field counts as not
# deterministic; any other family's counts as deterministic.
ATOMIC_FAMILIES = ("attention_backward", "encoder_backward", "global_norm", "matmul_backward_bias",
                   "relu_attention_backward")


def is_deterministic(entry: dict) -> bool:
    return bool(entry.get("deterministic", entry["family"] not in ATOMIC_FAMILIES))


class PromotedSet:
    """The trainer's kernel set: one frozen version (and block size) per family. With
    deterministic=True a family whose promoted version uses float atomics is served by its
    promoted deterministic stand-in (the "family@deterministic" entry) instead."""

    def __init__(self, project: Project | None = None, directory: Path | None = None, deterministic: bool = False):
        self.project = project or Project()
        self.dir = Path(directory or KERNELS_DIR)
        self.deterministic = deterministic
        path = self.dir / MANIFEST
        if not path.exists():
            raise TrainError(f"{path} is missing: promote kernels first (workbench promote --best RESULTS.json)")
        try:
            self.manifest: dict[str, dict] = read_manifest(self.dir)["kernels"]
        except PromoteError as e:
            raise TrainError(str(e)) from None
        self._versions: dict[str, Version] = {}

    def entry(self, family: str, precision: str = "fp32", variant: str | None = None) -> dict:
        """The manifest entry serving `family` at `precision`: the variant asked for (the run's
        choice of attention), or the family's own; with deterministic=True, its deterministic
        stand-in where that entry adds floats with atomics."""
        key = entry_key(family, precision, variant)
        if key not in self.manifest:
            how = (f"workbench promote {family} VERSION" + (" (a bf16 version)" if precision != "fp32" else "")
                   if not variant else f"workbench promote --best RESULTS.json, after a bench with the {variant} version")
            raise TrainError(f"the trainer needs {key}, but no version of it is promoted ({how})")
        main = self.manifest[key]
        if not self.deterministic or is_deterministic(main):
            return main
        stand_in = self.manifest.get(entry_key(family, precision, DETERMINISTIC))
        if stand_in is None:
            raise TrainError(f"--deterministic: the promoted {key} (version {main['version']}) adds floats with "
                             f"atomics in any order and no deterministic stand-in is promoted: run `workbench promote "
                             f"{family} {self._deterministic_candidate(family, precision)} --deterministic`")
        return stand_in

    def _deterministic_candidate(self, family: str, precision: str = "fp32") -> str:
        """The highest version at `precision` that can serve the trainer's shapes and whose header
        does not say its float atomics make it nondeterministic (once any header says so)."""
        try:
            fam = self.project.family(family)
            versions = [v for v in fam.versions if v.precision == precision]
            sizes = promotion_sizes(family, fam.sizes)
        except WorkbenchError:
            return "VERSION"
        good = [v.number for v in versions if v.deterministic and not any(v.unmet(s) for s in sizes)]
        return str(good[-1]) if good and any(not v.deterministic for v in versions) else "VERSION"

    def serves(self, family: str, precision: str = "fp32", variant: str | None = None) -> bool:
        """Whether a version of `family` (or its `variant`) is promoted at `precision` and can serve
        this set, i.e. entry() finds one: with deterministic=True an entry adding floats with atomics
        serves only where its deterministic stand-in is promoted (the fused families and the
        variants are optional)."""
        main = self.manifest.get(entry_key(family, precision, variant))
        return main is not None and (not self.deterministic or is_deterministic(main)
                                     or entry_key(family, precision, DETERMINISTIC) in self.manifest)

    def stand_ins(self, families, precision: str = "fp32") -> dict[str, dict]:
        """family -> the @deterministic entry that serves it in place of its promoted version."""
        return {f: self.entry(f, precision) for f in families
                if self.entry(f, precision) is not self.manifest.get(entry_key(f, precision))}

    def version(self, family: str, precision: str = "fp32", variant: str | None = None) -> Version:
        return self.version_of(self.entry(family, precision, variant))

    def version_of(self, e: dict) -> Version:
        """The version a manifest entry (or an entry's fallback) froze, its copy checked against its hash."""
        if e["file"] not in self._versions:
            family, path = e["family"], self.dir / e["file"]
            if not path.exists():
                raise TrainError(f"{path} is missing (the manifest lists it for {family}); promote it again")
            if sha256(path) != e["sha256"]:
                raise TrainError(f"{path} was edited after it was promoted (its hash no longer matches "
                                 f"{self.dir / MANIFEST}); promote {family} again instead of editing the frozen copy")
            self._versions[e["file"]] = load_version(self.project.family(family), e["version"], path)
        return self._versions[e["file"]]

    def serving(self, family: str, precision: str, variant: str | None, sizes: dict[str, int],
                arch: str) -> tuple[dict, str | None]:
        """The entry that runs `family` at `sizes` on a GPU whose code is `arch` (e.g. "sm_90a"): the
        promoted one (entry()), or its fallback where the promoted version cannot run (another arch
        than its header's, or preconditions these sizes violate); and why the fallback, or None.
        An entry that cannot run and has no fallback is returned as it is: _prepare says why."""
        e = self.entry(family, precision, variant)
        v = self.version_of(e)
        unmet = v.unmet(sizes)
        why = v.arch_refusal(arch) or (f"requires {' and '.join(unmet)}" if unmet else None)
        if why is None or FALLBACK not in e:
            return e, None
        return e[FALLBACK], f"version {e['version']} {why}"


def _family_sizes(family: Family, call: Call) -> dict[str, int]:
    """The call's sizes restricted to the family's own, with any derived ones cross-checked."""
    sizes = {k: v for k, v in call.sizes.items() if k in family.sizes}
    family.check_sizes(sizes)
    env = family.env(sizes)
    for k, v in call.sizes.items():
        if k not in family.sizes and (k not in family.derived or env[k] != v):
            raise TrainError(f"{call.label}: {family.name} has no size {k}={v} (its sizes: {', '.join(family.sizes)})")
    return sizes


def _call_params(family: Family, call: Call) -> dict[str, Any]:
    return {k: v for k, v in call.params.items() if k in family.params or k in family.derived}


def check_wiring(family: Family, call: Call, sizes: dict[str, int], dtypes: dict[str, str]) -> None:
    """Every contract argument (at the call's precision) is bound to a slice of exactly its size and dtype."""
    args = family.args_for(call.precision)
    for arg in args:
        if arg.name not in call.args:
            raise TrainError(f"{call.label}: {family.name} needs {arg.name!r}, the program binds "
                             f"{', '.join(call.args)}")
        ref = call.args[arg.name]
        want = int(np.prod(family.shape(arg, sizes)))
        if ref.elems != want or dtypes[ref.buffer] != arg.dtype:
            raise TrainError(f"{call.label}: {family.name}.{arg.name} is {arg.dtype}[{want}], the program binds "
                             f"{dtypes[ref.buffer]}[{ref.elems}] of {ref.buffer}")
    extra = set(call.args) - {a.name for a in args}
    if extra:
        raise TrainError(f"{call.label}: {family.name} has no argument(s) {', '.join(sorted(extra))}")


class ReferenceBackend:
    """The program on the host, in float64, through the families' NumPy references."""

    def __init__(self, program: Program, project: Project | None = None):
        from workbench.check import run_reference
        self._run_reference = run_reference
        self.program = program
        self.project = project or Project()
        self.host = {name: np.zeros(spec.elems, dtype=np.int64 if spec.dtype == "i32" else np.float64)
                     for name, spec in program.buffers.items()}
        self.dtypes = {name: spec.dtype for name, spec in program.buffers.items()}
        self.fallbacks: dict[str, tuple[dict, str]] = {}  # the references run every size on any host

    def view(self, ref: Slice) -> np.ndarray:
        return self.host[ref.buffer][ref.offset:ref.offset + ref.elems]

    @staticmethod
    def _as_stored(values: np.ndarray, dtype: str) -> np.ndarray:
        from workbench.check import to_storage
        return to_storage(values.astype(np.float32), "bf16") if dtype == "bf16" else values

    def run(self, calls) -> None:
        for call in calls:
            if isinstance(call, Zero):
                self.view(call.ref)[:] = 0
                continue
            if isinstance(call, COLLECTIVES):
                single_process(self.program, call)
                continue
            family = self.project.family(call.family)
            sizes = _family_sizes(family, call)
            check_wiring(family, call, sizes, self.dtypes)
            # A bf16 argument is read as bf16 holds it (rounded); outputs stay float64.
            inputs = {a.name: self._as_stored(self.view(call.args[a.name]).reshape(family.shape(a, sizes)), a.dtype)
                      for a in family.args_for(call.precision) if a.is_input}
            env_params = _call_params(family, call)
            fam = family if not env_params else _with_params(family, env_params)
            outputs = self._run_reference(fam, sizes, inputs, call.precision)
            for name, value in outputs.items():
                self.view(call.args[name])[:] = value.ravel()


def _with_params(family: Family, params: dict[str, Any]) -> Family:
    """The family with some params or derived names overridden (e.g. the classifier's dloss)."""
    import copy
    f = copy.copy(family)
    f.params = {**family.params, **{k: v for k, v in params.items() if k in family.params}}
    f.derived = {k: (repr(params[k]) if k in params else v) for k, v in family.derived.items()}
    return f


def single_process(program: Program, collective) -> None:
    """A collective without a communicator: over one rank it changes nothing."""
    if program.world > 1:
        raise TrainError(f"{collective.label}: the program spans {program.world} ranks but no communicator was given")


# Kept free beyond the program's buffers and scratch: what is allocated after them (cuBLAS's and
# cuDNN's workspaces, the CUDA graphs, NCCL's buffers) must fit too.
HEADROOM = 1 << 30
GiB = float(1 << 30)


def check_fits(program: Program, scratch_bytes: int, free: int, total: int) -> None:
    """Refuse, before anything is allocated, a program whose buffers, scratch and HEADROOM exceed
    the GPU's free memory: one line with what it needs, what there is, and what would fit."""
    need = sum(program.memory().values()) + scratch_bytes + HEADROOM
    if need <= free:
        return
    groups = memory_groups(program.memory())
    weights = groups["parameters"] + groups["gradients"] + groups["optimizer state"]
    levels = {r: program.memory_with(r) + scratch_bytes + HEADROOM for r in RECOMPUTED if r > program.recompute}
    fits = [r for r, n in levels.items() if n <= free]
    smaller = "a smaller -b (with --total-batch to keep the tokens per step)"
    if fits:
        hint = f"pass --recompute {fits[0]} (it needs {levels[fits[0]] / GiB:.1f} GiB) or {smaller}"
    else:
        hint = f"give {smaller}" + (f"; --recompute {max(levels)} alone needs {levels[max(levels)] / GiB:.1f} GiB"
                                    if levels else "")
    raise TrainError(f"B={program.B}, T={program.T} at {program.precision} with --recompute {program.recompute} needs "
                     f"{need / GiB:.1f} GiB of GPU memory (activations {groups['activations'] / GiB:.1f}, parameters, "
                     f"gradients and optimizer state {weights / GiB:.1f}, kernel scratch {scratch_bytes / GiB:.1f}, "
                     f"{HEADROOM / GiB:.0f} kept free for the libraries' workspaces and the graphs), but "
                     f"{free / GiB:.1f} GiB of the GPU's {total / GiB:.1f} are free: {hint}")


@dataclass
class PlannedCall:
    label: str
    family: str | None
    run: Any  # callable(stream)


class KernelBackend:
    """The program's buffers on the device and a launch plan per call, from the promoted set."""

    def __init__(self, program: Program, promoted: PromotedSet, comm=None, side_stream: bool = False):
        import pycuda.driver as drv
        self.drv = drv
        self.program = program
        self.promoted = promoted
        self.comm = comm
        self.side = None  # side_stream: the weight and bias gradients on a second stream (train/streams.py)
        self._outputs: dict[tuple[str, str], frozenset[str]] = {}
        self._collectives: dict[int, PlannedCall] = {}
        self.dtypes = {name: spec.dtype for name, spec in program.buffers.items()}
        self.fallbacks: dict[str, tuple[dict, str]] = {}  # entry key -> (the fallback run, why)
        prepared, scratch_need = self._prepare()
        self.scratch_bytes = sum(n for n, _ in scratch_need.values())
        check_fits(program, self.scratch_bytes, *drv.mem_get_info())  # before anything is allocated
        self.allocs = {}
        for name, spec in program.buffers.items():
            nbytes = -(-spec.elems * ITEMSIZE[spec.dtype] // 4) * 4
            self.allocs[name] = drv.mem_alloc(max(4, nbytes))
            drv.memset_d32(self.allocs[name], 0, max(1, nbytes // 4))
        self.scratch = {key: drv.mem_alloc(nbytes) for key, (nbytes, _) in scratch_need.items()}
        self.modules: dict[str, tuple] = {}
        self.plans: dict[int, PlannedCall] = {}
        self._plan(prepared, scratch_need)
        if side_stream:
            from workbench import library_calls

            from .streams import SideStream
            self.side = SideStream(drv.Stream, lambda: drv.Event(drv.event_flags.DISABLE_TIMING),
                                   library_calls.own_workspace, library_calls.STREAM_SAFE)

    def _prepare(self) -> tuple[list, dict[tuple[str, str], tuple[int, str]]]:
        """Each call's family, promoted version (or its fallback: see PromotedSet.serving), sizes and
        block size, its wiring checked; and the scratch each family needs, shared by its calls (they
        run one after another on one stream)."""
        from workbench.compile import device_arch
        from workbench.launch import scratch_sizes
        promoted, arch = self.promoted, device_arch()
        scratch_need: dict[tuple[str, str], tuple[int, str]] = {}
        prepared = []
        for call in self.program.calls:
            family = promoted.project.family(call.family)
            sizes = _family_sizes(family, call)
            entry, why = promoted.serving(call.family, call.precision, call.variant, sizes, arch)
            version = promoted.version_of(entry)
            if why:
                self.fallbacks[entry_key(call.family, call.precision, call.variant)] = (entry, why)
            check_wiring(family, call, sizes, self.dtypes)
            refusal = version.arch_refusal(arch)
            if refusal:
                raise TrainError(f"{call.label}: the promoted {version.label} {refusal}, and no fallback is promoted "
                                 f"with it; promote a version for any GPU first")
            unmet = version.unmet(sizes)
            if unmet:
                raise TrainError(f"{call.label}: the promoted {version.label} requires {' and '.join(unmet)}, "
                                 f"which {family.format_sizes(sizes)} violates; promote another version")
            bs = entry.get("block_size")
            for name, (nbytes, dtype) in scratch_sizes(version, sizes, bs, _call_params(family, call)).items():
                key = (call.family, name)
                scratch_need[key] = (max(nbytes, scratch_need.get(key, (0, dtype))[0]), dtype)
            prepared.append((call, family, version, sizes, bs))
        return prepared, scratch_need

    def _plan(self, prepared: list, scratch_need: dict[tuple[str, str], tuple[int, str]]) -> None:
        """Compile each promoted version once and build each call's launch plan on the buffers."""
        from workbench import compile as wb_compile
        from workbench.launch import DeviceBuffer, build_plan
        for call, family, version, sizes, bs in prepared:
            if version.path not in self.modules:
                module, resources, _ = wb_compile.load_module(version.path)
                self.modules[version.path] = (module, resources)
            module, resources = self.modules[version.path]
            buffers = {name: DeviceBuffer(self.ptr(ref), ITEMSIZE[self.dtypes[ref.buffer]] * ref.elems,
                                          self.dtypes[ref.buffer]) for name, ref in call.args.items()}
            for (fam_name, sname), (nbytes, dtype) in scratch_need.items():
                if fam_name == call.family:
                    buffers[sname] = DeviceBuffer(int(self.scratch[(fam_name, sname)]), nbytes, dtype)
            plan = build_plan(version, module, sizes, bs, buffers, _call_params(family, call), resources)
            self.plans[id(call)] = PlannedCall(call.label, call.family, plan)

    def ptr(self, ref: Slice) -> int:
        return int(self.allocs[ref.buffer]) + ITEMSIZE[self.dtypes[ref.buffer]] * ref.offset

    def steps(self, calls) -> list[PlannedCall]:
        out = []
        for call in calls:
            if isinstance(call, Zero):
                ptr, n = self.ptr(call.ref), call.ref.elems
                memset = self.drv.memset_d16_async if self.dtypes[call.ref.buffer] == "bf16" else self.drv.memset_d32_async
                out.append(PlannedCall(call.label, None, lambda s, ptr=ptr, n=n, memset=memset: memset(ptr, 0, n, s)))
            elif isinstance(call, COLLECTIVES):
                out.append(self._collective(call))
            else:
                out.append(self.plans[id(call)])
        return out

    def _collective(self, item) -> PlannedCall:
        """Planned once per item (the communicator's events are made then), replayed after."""
        if id(item) not in self._collectives:
            if self.comm is None:
                single_process(self.program, item)
                run = lambda s: None  # noqa: E731
            else:
                run = self.comm.plan(item, self.ptr, self.dtypes)
            self._collectives[id(item)] = PlannedCall(item.label, None, run)
        return self._collectives[id(item)]

    def outputs(self, call: Call) -> frozenset[str]:
        """The contract arguments `call` writes (out and inout) at its precision."""
        key = (call.family, call.precision)
        if key not in self._outputs:
            family = self.promoted.project.family(call.family)
            self._outputs[key] = frozenset(a.name for a in family.args_for(call.precision) if a.is_output)
        return self._outputs[key]

    def run(self, calls, stream) -> None:
        calls = list(calls)
        if self.side is not None:
            self.side.run(calls, self.steps(calls), self.outputs, stream)
            return
        for step in self.steps(calls):
            step.run(stream)

    def upload(self, name: str, host: np.ndarray, offset: int = 0) -> None:
        """Values into a buffer (a bf16 one gets them rounded to bf16)."""
        from workbench.check import to_storage
        dtype = self.dtypes[name]
        data = (to_storage(np.asarray(host, dtype=np.float32), "bf16") if dtype == "bf16"
                else np.asarray(host, dtype=np.int32 if dtype == "i32" else np.float32))
        self.drv.memcpy_htod(self.ptr(Slice(name, offset, 0)), np.ascontiguousarray(data))

    def download(self, name: str, dtype=np.float32, elems: int | None = None, offset: int = 0) -> np.ndarray:
        """A buffer's values (a bf16 one widened to float32)."""
        from workbench.check import from_storage
        n = self.program.buffers[name].elems if elems is None else elems
        stored = self.dtypes[name]
        out = np.empty(n, dtype=np.uint16 if stored == "bf16" else dtype)
        self.drv.memcpy_dtoh(out, self.ptr(Slice(name, offset, 0)))
        return from_storage(out, "bf16") if stored == "bf16" else out

    def memory(self) -> dict[str, int]:
        return {**self.program.memory(), "scratch (shared per family)": self.scratch_bytes}


class Graph:
    """A CUDA graph captured from work enqueued on a PyCUDA stream (through cuda-bindings)."""

    def __init__(self, stream, enqueue):
        from cuda.bindings import driver as cu
        self.cu = cu
        s = cu.CUstream(stream.handle)
        _check(cu.cuStreamBeginCapture(s, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "begin capture")
        try:
            enqueue(stream)
        finally:
            err, graph = cu.cuStreamEndCapture(s)
        _check((err,), "end capture")
        err, self.exec = cu.cuGraphInstantiate(graph, 0)
        _check((err,), "instantiate")
        self.graph = graph
        err, _, self.nodes = cu.cuGraphGetNodes(graph, 0)
        _check((err,), "count nodes")

    def launch(self, stream) -> None:
        _check(self.cu.cuGraphLaunch(self.exec, self.cu.CUstream(stream.handle)), "launch")

    def destroy(self) -> None:
        """Free the graph now (cuda-bindings never does): until then it holds what it captured,
        NCCL's communicator included."""
        if self.exec is not None:
            _check(self.cu.cuGraphExecDestroy(self.exec), "destroy")
            _check(self.cu.cuGraphDestroy(self.graph), "destroy")
            self.exec = self.graph = None


def _check(result, what: str) -> None:
    from cuda.bindings import driver as cu
    err = result[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorString(err)
        raise TrainError(f"CUDA graph {what} failed: {name.decode() if name else err}")


def default_attention(precision: str, tf32: bool, promoted=None) -> str:
    """The fastest attention as exact as the run's matmuls: at fp32 the TF32 flash kernel when the
    matmuls run on TF32 too (--tf32, the default), the exact CUDA-core one without; at bf16
    cuDNN's fused attention where both its entries are promoted and the cuDNN frontend is
    installed (on the H100 it beats our flash kernels by 1.3x forward and backward), else our flash
    attention. `promoted`: a PromotedSet (read from train/kernels/ when None)."""
    if precision != "bf16":
        return "flash" if tf32 else "softmax"
    import importlib.util
    try:
        promoted = promoted or PromotedSet()
    except TrainError:
        return "flash"  # nothing promoted: the run's own check says so in its words
    has = all(promoted.serves(f, precision, "cudnn") for f in ("attention_forward", "attention_backward"))
    return "cudnn" if has and importlib.util.find_spec("cudnn") is not None else "flash"
