"""A bench session's background compiles: `Compiles` owns the compile pool (niced, no GPU
context: compile.compile_in_pool writes each cubin into the compile cache) and a future per
version; a version's row waits only for its own compile (`wait_for`)."""

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
        self._futures: dict[str, Future] = {}    # version path -> its background compile

    def start(self, versions: list[Version], arch: str) -> None:
        """Compile the versions in the background, in the order given, for `arch` ("sm_90"),
        into the cache; a version already started is not started again."""
        from .compile import compile_in_pool
        self.progress(f"compiling {len(versions)} versions in the background for {arch}")
        if self._pool is None:  # niced more: the GPU's own processes, then the references, come first
            self._pool = niced_pool(max(1, (os.cpu_count() or 2) - 2), 10)
        for v in versions:
            if str(v.path) not in self._futures:
                self._futures[str(v.path)] = compile_in_pool(self._pool, v.path, arch)

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
