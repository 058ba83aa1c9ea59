"""Staging: a family's reference cases uploaded to the device once, shared by every version.

Each version is checked in a fresh child process (isolate.py), and each child used to upload the
cases itself: AdamW's two default-size cases are 7 GB, so the uploads cost more than the checks.
Now one long-lived child, the case owner, uploads every case of a family once (the pristine
inputs and the expected outputs) into one device allocation, a bundle, and hands out a CUDA IPC
handle to it with each buffer's offset. A version's child (and the PyTorch baseline's) opens the
bundle (no copy), restores its own working buffers from it by device-to-device copies, exactly as
it did from private copies, and compares its outputs against it on the device.

The owner reads the case files with plain reads, several at a time, into pinned host memory, and
each chunk's copy to the device overlaps the next reads: uploading from memory-mapped files cost
a page fault per 4 KB and ran at ~1.5 GB/s on the H100 machine, a single reader at ~3 GB/s.

A bundle is mapped into every version's process, so a version writing out of bounds could change
it. The owner keeps a checksum of every staged buffer (one pass at copy speed) and, after each
version, checks them again: a changed buffer is uploaded again in place (the handles stay
valid), and the version that changed it is reported (bench.py).

Not for sanitize: initcheck cannot see that another process wrote the memory it reads.

This module runs in worker processes: `Stage` in the owner, `Opened` in the others.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
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
ALIGN = 256          # every staged buffer starts on a 256-byte boundary, as cudaMalloc's do
CHUNK = 32 << 20     # bytes per pinned read buffer
READERS = 4          # reads of the case files at a time, each into a pinned buffer of its own


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class Stage:
    """The owner's side: bundles of staged cases, by case path."""

    def __init__(self):
        import pycuda.driver as drv
        from .compile import harness_module
        self.drv = drv
        self.kernel = harness_module(CHECKSUM_KERNEL).get_function("checksum_words")
        self.kernel.prepare("PqP")
        self.out = drv.mem_alloc(8)
        sms = drv.Context.get_device().get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
        self.grid = (sms * 4, 1, 1)
        self.stream = drv.Stream()
        self.pinned = [drv.pagelocked_empty(CHUNK, np.uint8) for _ in range(READERS)]
        self.copied = [drv.Event() for _ in range(READERS)]   # the last copy out of each pinned buffer
        self.readers = ThreadPoolExecutor(max_workers=READERS)
        self.bundles: dict[int, Any] = {}           # bundle id -> its device allocation
        self.handles: dict[int, str] = {}           # bundle id -> its IPC handle, hex
        # path -> {"in"/"exp": {name: (bundle id, offset, nbytes, source array)}}
        self.cases: dict[str, dict[str, dict[str, tuple]]] = {}
        self.sums: dict[tuple[str, str, str], int] = {}   # (path, kind, name) -> checksum
        self._next = 0

    # -- bytes onto the device -------------------------------------------------------------------
    def checksum(self, ptr: int, nbytes: int) -> int:
        self.drv.memset_d32(self.out, 0, 2)
        self.kernel.prepared_call(self.grid, (256, 1, 1), np.uintp(ptr), np.int64(nbytes // 4), np.uintp(int(self.out)))
        host = np.zeros(1, dtype=np.uint64)
        self.drv.memcpy_dtoh(host, self.out)
        return int(host[0])

    def upload(self, dst: int, nbytes: int, array) -> None:
        """Fill `nbytes` at `dst` with the array's bytes, as CaseBuffers would (providers.upload);
        a case file's bytes are read straight from the file."""
        from .providers import upload
        if not (isinstance(array, np.memmap) and array.flags.c_contiguous and array.filename):
            upload(dst, nbytes, array)
            return
        if array.nbytes < nbytes:  # the tail zeroed as providers.upload does
            self.drv.memset_d32(dst, 0, nbytes // 4)
        self._upload_file(dst, array.filename, array.offset, array.nbytes)

    def _upload_file(self, dst: int, filename: str, offset: int, nbytes: int) -> None:
        """Read the file's bytes in chunks into the pinned buffers, READERS reads at a time in
        threads (a single reader ran at ~3 GB/s from the page cache on the H100 machine); each
        chunk's copy to the device is enqueued as soon as it is read. CUDA calls stay on this
        thread: a buffer is handed to a reader only once its previous copy has left it."""
        chunks = -(-nbytes // CHUNK)
        fd = os.open(filename, os.O_RDONLY)

        def read(i: int) -> int:
            n = min(CHUNK, nbytes - i * CHUNK)
            view = memoryview(self.pinned[i % READERS])[:n]
            got = 0
            while got < n:
                r = os.preadv(fd, [view[got:]], offset + i * CHUNK + got)
                if r <= 0:
                    raise OSError(f"{filename}: ended {n - got} bytes early")
                got += r
            return n

        pending = {}
        try:
            pending.update({i: self.readers.submit(read, i) for i in range(min(READERS, chunks))})
            for i in range(chunks):
                k = i % READERS
                n = pending.pop(i).result()
                self.drv.memcpy_htod_async(dst + i * CHUNK, self.pinned[k][:n], self.stream)
                self.copied[k].record(self.stream)
                if i + READERS < chunks:
                    self.copied[k].synchronize()  # the buffer is free again before it is refilled
                    pending[i + READERS] = self.readers.submit(read, i + READERS)
            self.stream.synchronize()
        finally:
            for f in pending.values():
                f.cancel()
            os.close(fd)

    # -- the cases ---------------------------------------------------------------------------------
    def stage(self, paths: list[str], family, precision: str) -> dict:
        """Upload the cases not staged yet, all of them into one new bundle. Returns what a
        child needs to open them: {"bundles": {id: handle}, "cases": {path: {"in"/"exp":
        {name: [bundle id, offset, nbytes]}}}}."""
        from .check import load_case
        from .providers import _nbytes, expected_nbytes, shapes_for
        missing = [p for p in paths if p not in self.cases]
        if missing:
            layout: dict[str, dict[str, dict[str, tuple]]] = {}
            offset = 0
            args = family.args_for(precision)
            for path in missing:
                case = load_case(path)
                shapes = shapes_for(args, family.env)(case)
                entry: dict[str, dict[str, tuple]] = {"in": {}, "exp": {}}
                for arg in args:
                    if arg.is_input:
                        nbytes = _nbytes(arg, shapes[arg.name])
                        entry["in"][arg.name] = (offset, nbytes, case.inputs[arg.name])
                        offset += _aligned(nbytes)
                    if arg.is_output:
                        nbytes = expected_nbytes(shapes[arg.name])
                        entry["exp"][arg.name] = (offset, nbytes, case.expected[arg.name])
                        offset += _aligned(nbytes)
                layout[path] = entry
            bundle = self._next
            self._next += 1
            mem = self.drv.mem_alloc(max(ALIGN, offset))
            self.bundles[bundle] = mem
            try:
                for path, entry in layout.items():
                    for kind, bufs in entry.items():
                        for name, (off, nbytes, source) in bufs.items():
                            self.upload(int(mem) + off, nbytes, source)
                            self.sums[(path, kind, name)] = self.checksum(int(mem) + off, nbytes)
            except BaseException:
                self._free(bundle)
                raise
            self.handles[bundle] = self.drv.mem_get_ipc_handle(int(mem)).hex()
            for path, entry in layout.items():
                self.cases[path] = {kind: {name: (bundle, off, nbytes, source)
                                           for name, (off, nbytes, source) in bufs.items()}
                                    for kind, bufs in entry.items()}
        cases = {p: {kind: {name: [b, off, nbytes] for name, (b, off, nbytes, _) in bufs.items()}
                     for kind, bufs in self.cases[p].items()} for p in paths}
        used = {b for entry in cases.values() for bufs in entry.values() for b, _, _ in bufs.values()}
        return {"bundles": {str(b): self.handles[b] for b in used}, "cases": cases}

    def verify(self, paths: list[str]) -> list[str]:
        """Checksum every staged buffer of these cases again; a changed one is uploaded again in
        place. Returns "path: kind name" for each buffer that had changed."""
        changed = []
        for path in paths:
            for kind, bufs in self.cases.get(path, {}).items():
                for name, (bundle, off, nbytes, source) in bufs.items():
                    ptr = int(self.bundles[bundle]) + off
                    if self.checksum(ptr, nbytes) != self.sums[(path, kind, name)]:
                        changed.append(f"{path}: {kind} {name}")
                        self.upload(ptr, nbytes, source)
        return changed

    def release(self, paths: list[str] | None = None) -> None:
        """Forget these cases (all when None); free each bundle none of whose cases is left."""
        for path in list(self.cases) if paths is None else paths:
            for kind, bufs in self.cases.pop(path, {}).items():
                for name in bufs:
                    self.sums.pop((path, kind, name), None)
        left = {b for entry in self.cases.values() for bufs in entry.values() for b, *_ in bufs.values()}
        for bundle in [b for b in self.bundles if b not in left]:
            self._free(bundle)

    def _free(self, bundle: int) -> None:
        self.bundles.pop(bundle).free()
        self.handles.pop(bundle, None)


class Opened:
    """A child's view of staged cases: each bundle's IPC handle opened once; `pointers` gives
    {path: {"in"/"exp": {name: (address, nbytes)}}}; close() unmaps."""

    def __init__(self, staged: dict):
        import pycuda.driver as drv
        self._handles: list[Any] = []
        try:
            base = {}
            for bundle, handle in staged["bundles"].items():
                h = drv.IPCMemoryHandle(bytearray.fromhex(handle))
                self._handles.append(h)
                base[int(bundle)] = int(h)
        except BaseException:
            self.close()
            raise
        self.pointers = {path: {kind: {name: (base[b] + off, nbytes) for name, (b, off, nbytes) in bufs.items()}
                                for kind, bufs in entry.items()}
                         for path, entry in staged["cases"].items()}

    def close(self) -> None:
        for h in self._handles:
            try:
                h.close()
            except Exception:
                pass
        self._handles.clear()
