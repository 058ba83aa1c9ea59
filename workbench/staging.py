"""Staging: a family's reference cases uploaded to the device once, shared by every version.

Each version is checked in a fresh child process (isolate.py), and each child used to upload the
cases itself: AdamW's two default-size cases are 7 GB, so the uploads cost more than the checks.
Now the baselines' long-lived child uploads every case of a family once (the pristine inputs and
the expected outputs) and hands out CUDA IPC handles to that memory. A version's child opens them
(no copy), restores its own working buffers from them by device-to-device copies, exactly as it
did from its private copies, and compares its outputs against them on the device.

That memory is mapped into every version's process, so a version writing out of bounds could
change it. The owner keeps a checksum of every staged buffer (one pass at copy speed) and, after
each version, checks them again: a changed buffer is uploaded again from the case file, and the
version that changed it is reported (bench.py).

Not for sanitize: initcheck cannot see that another process wrote the memory it reads.

This module runs in the worker processes: `Stage` in the owner (the baselines' child),
`open_staged` in a version's child.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CHECKSUM_KERNEL = r"""
// Sum over the buffer's 32-bit words of (word + 1) * (index | 1), wrapping at 2^64: any changed,
// zeroed or moved word changes it (with overwhelming odds). Integer sums: the order is irrelevant.
extern "C" __global__ void checksum_words(const unsigned int* words, long long n, unsigned long long* out) {
    unsigned long long sum = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        sum += ((unsigned long long)words[i] + 1ull) * (unsigned long long)(i | 1);
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffff, sum, o);
    if (threadIdx.x % 32 == 0) atomicAdd(out, sum);
}
"""


def _words(nbytes: int) -> int:
    return nbytes // 4


class Stage:
    """The owner's side: the staged cases of the current family, by case path."""

    def __init__(self):
        import pycuda.driver as drv
        from .compile import harness_module
        self.drv = drv
        self.kernel = harness_module(CHECKSUM_KERNEL).get_function("checksum_words")
        self.kernel.prepare("PqP")
        self.out = drv.mem_alloc(8)
        sms = drv.Context.get_device().get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
        self.grid = (sms * 4, 1, 1)
        # path -> {"in"/"exp": {name: (allocation, nbytes)}}, and path -> {(kind, name): checksum}
        self.cases: dict[str, dict[str, dict[str, tuple[Any, int]]]] = {}
        self.sums: dict[str, dict[tuple[str, str], int]] = {}
        self.families: dict[str, tuple] = {}  # path -> (family, precision): what to re-upload from

    def checksum(self, ptr: int, nbytes: int) -> int:
        self.drv.memset_d32(self.out, 0, 2)
        self.kernel.prepared_call(self.grid, (256, 1, 1), np.uintp(ptr), np.int64(_words(nbytes)), np.uintp(int(self.out)))
        host = np.zeros(1, dtype=np.uint64)
        self.drv.memcpy_dtoh(host, self.out)
        return int(host[0])

    def _upload(self, path: str, family, precision: str) -> None:
        """Allocate and fill one case's staged buffers (the same bytes a CaseBuffers would hold)."""
        from .check import load_case
        from .providers import _nbytes, shapes_for
        drv = self.drv
        case = load_case(path)
        args = family.args_for(precision)
        shapes = shapes_for(args, family.env)(case)
        staged: dict[str, dict[str, tuple[Any, int]]] = {"in": {}, "exp": {}}
        try:
            for arg in args:
                if arg.is_input:
                    nbytes = _nbytes(arg, shapes[arg.name])
                    host = np.ascontiguousarray(case.inputs[arg.name])
                    mem = drv.mem_alloc(nbytes)
                    staged["in"][arg.name] = (mem, nbytes)
                    if host.nbytes < nbytes:  # an odd bf16 count leaves half a word: zeroed, never unwritten
                        drv.memset_d32(mem, 0, nbytes // 4)
                    drv.memcpy_htod(mem, host)
                if arg.is_output:
                    nbytes = max(4, 4 * int(np.prod(shapes[arg.name])))
                    mem = drv.mem_alloc(nbytes)
                    staged["exp"][arg.name] = (mem, nbytes)
                    drv.memcpy_htod(mem, np.ascontiguousarray(case.expected[arg.name], dtype=np.float32))
        except BaseException:
            for mem, _ in [*staged["in"].values(), *staged["exp"].values()]:
                mem.free()
            raise
        self.cases[path] = staged
        self.families[path] = (family, precision)
        self.sums[path] = {(kind, name): self.checksum(int(mem), nbytes)
                           for kind, bufs in staged.items() for name, (mem, nbytes) in bufs.items()}

    def stage(self, paths: list[str], family, precision: str) -> dict[str, dict]:
        """Upload the cases not staged yet; their IPC handles, by path, for the versions' children:
        {"in"/"exp": {name: [handle hex, nbytes]}}."""
        handles = {}
        for path in paths:
            if path not in self.cases:
                self._upload(path, family, precision)
            handles[path] = {kind: {name: [self.drv.mem_get_ipc_handle(int(mem)).hex(), nbytes]
                                    for name, (mem, nbytes) in bufs.items()}
                             for kind, bufs in self.cases[path].items()}
        return handles

    def pointers(self, path: str) -> dict[str, dict[str, tuple[int, int]]] | None:
        """In the owner's own process (the torch baseline): the staged buffers' addresses."""
        staged = self.cases.get(path)
        if staged is None:
            return None
        return {kind: {name: (int(mem), nbytes) for name, (mem, nbytes) in bufs.items()}
                for kind, bufs in staged.items()}

    def verify(self, paths: list[str]) -> list[str]:
        """Checksum every staged buffer of these cases again; upload a changed case anew. Returns
        "path: kind name" for each buffer that had changed."""
        changed = []
        for path in paths:
            if path not in self.cases:
                continue
            bad = [f"{path}: {kind} {name}" for kind, bufs in self.cases[path].items()
                   for name, (mem, nbytes) in bufs.items()
                   if self.checksum(int(mem), nbytes) != self.sums[path][(kind, name)]]
            if bad:
                changed += bad
                family, precision = self.families[path]
                self.release([path])
                self._upload(path, family, precision)
        return changed

    def release(self, paths: list[str] | None = None) -> None:
        """Free these cases' staged buffers (all of them when paths is None)."""
        for path in list(self.cases) if paths is None else paths:
            for bufs in self.cases.pop(path, {}).values():
                for mem, _ in bufs.values():
                    mem.free()
            self.sums.pop(path, None)
            self.families.pop(path, None)


class Opened:
    """A version child's view of staged cases: the IPC handles opened, by path; close() unmaps."""

    def __init__(self, staged: dict[str, dict]):
        import pycuda.driver as drv
        self._handles: list[Any] = []
        self.pointers: dict[str, dict[str, dict[str, tuple[int, int]]]] = {}
        try:
            for path, kinds in staged.items():
                self.pointers[path] = {}
                for kind, bufs in kinds.items():
                    self.pointers[path][kind] = {}
                    for name, (handle, nbytes) in bufs.items():
                        h = drv.IPCMemoryHandle(bytearray.fromhex(handle))
                        self._handles.append(h)
                        self.pointers[path][kind][name] = (int(h), int(nbytes))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for h in self._handles:
            try:
                h.close()
            except Exception:
                pass
        self._handles.clear()
