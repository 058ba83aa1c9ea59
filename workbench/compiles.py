"""A session's background compiles: `Compiles` owns the compile pool (niced, no GPU context:
compile.compile_in_pool writes each cubin into the compile cache) and a future per version and
per harness kernel not cached yet; a version's row waits only for its own compile (`wait_for`).
A bench starts them once it knows the device; a one-version command before it probes
(`start_ahead`)."""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ProcessPoolExecutor

from .family import Version
from .ledger import Ledger
from .options import Progress
from .pools import niced_pool, stop_pool


class Compiles:
    """The versions compiled in the background, in the order given, for one arch (start), and
    the wait for one of them (wait_for, its seconds in the ledger as "waiting for compiles")."""

    def __init__(self, ledger: Ledger, progress: Progress):
        self.ledger, self.progress = ledger, progress
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[str, Future] = {}    # version path (or "harness:" + source) -> its compile

    def start(self, versions: list[Version], arch: str | None, harness: bool = True) -> None:
        """Compile the versions (and the harness kernels every child loads) in the background,
        in the order given, for `arch` ("sm_90"; None: the pool asks the driver), into the cache.
        What is already started, or known to be cached, is not started again: a warm session
        starts no pool at all."""
        from .compile import compile_in_pool, is_cached
        todo = [(str(v.path), v.path, None) for v in versions]
        todo += [("harness:" + src, None, src) for src in (harness_sources() if harness else [])]
        todo = [t for t in todo if t[0] not in self._futures and not (arch and is_cached(t[1], arch, t[2]))]
        if not todo:
            return
        self.progress(f"compiling {len(todo)} kernels in the background" + (f" for {arch}" if arch else ""))
        if self._pool is None:  # niced more: the GPU's own processes, then the references, come first
            # 8 at most: 14 on the H100 host's 16 cores crowded out the references and the GPU's
            # processes at a bench's start (with 6, a bench --all took 148 s against 161, but ran
            # second on its machine, and waited 8 s for compiles)
            self._pool = niced_pool(max(1, min(8, (os.cpu_count() or 2) - 2)), 10)
        for name, path, source in todo:
            self._futures[name] = compile_in_pool(self._pool, path, arch, source)

    def start_ahead(self, versions: list[Version]) -> None:
        """A one-version command's compiles, started before the device is probed: for the arch
        of the probe kept for this machine, or (a fresh machine) the one the pool's process asks
        the driver for; so on a fresh machine nvcc runs beside the probe and the child's start,
        not after them. Nothing starts where everything is cached."""
        from .compile import arch_of
        from .device import cached_probe, host_identity
        kept = cached_probe(host_identity())
        self.start(versions, arch_of(kept) if kept else None)

    def wait_for(self, version: Version) -> None:
        """Wait for the version's background compile, if one was started."""
        future = self._futures.get(str(version.path))
        if future is not None and not future.done():
            t0 = time.perf_counter()
            self.progress(f"{version.label}: waiting for its compile")
            future.result()
            self.ledger.spent("waiting for compiles", t0)

    def close(self) -> None:
        """Stop the pool: queued compiles are cancelled, those under way killed (pools.stop_pool)."""
        if self._pool is not None:
            stop_pool(self._pool)


def harness_sources() -> list[str]:
    """The workbench's own kernels (compare, flush, busy-wait, copy, ramp, checksum) that the
    children compile on first use: compiled ahead with the versions on a machine that has not
    cached them yet."""
    from .check import COMPARE_KERNEL
    from .providers import RAMP_KERNEL
    from .staging import CHECKSUM_KERNEL
    from .timing import BUSY_KERNEL, COPY_KERNEL, READ_KERNEL
    return [COMPARE_KERNEL, READ_KERNEL, BUSY_KERNEL, COPY_KERNEL, RAMP_KERNEL, CHECKSUM_KERNEL]
