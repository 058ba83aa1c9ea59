"""The child processes a bench session runs its rows in (isolate.Server): `Children` owns the
versions' children (a fresh one per version, Options.ahead started ahead, finished ones kept idle up to
LINGER and let go together: release, then settle before the next version runs) and the
baselines' one long-lived child (torch imported as it starts)."""

from __future__ import annotations

import importlib.util
import time

from .isolate import Server
from .ledger import Ledger
from .options import Options
from .worker import torch_warm_item

# Version children done with their job, kept idle and let go together after the family's versions
# (their CUDA teardowns side by side, while nothing is timed) rather than waited for one by one.
LINGER = 12


class Children:
    """The versions' server and the baselines' server, each started on first use."""

    def __init__(self, options: Options, ledger: Ledger):
        self.options, self.ledger = options, ledger
        self._baselines: Server | None = None  # the baselines' long-lived child
        self._versions: Server | None = None   # a fresh child per version, Options.ahead of them started ahead

    def versions(self, ops=()) -> Server:
        """Children for the versions, a fresh one per version, Options.ahead of them started ahead.
        `ops`, on first use: the library calls the session's versions make (Version.library_ops);
        each child imports their libraries and creates their handles while it waits for its job."""
        if self._versions is None:
            self._versions = Server(jobs_per_child=1, standby=self.options.ahead, linger=LINGER,
                                    preload=tuple(sorted(set(ops)))).start()
        return self._versions

    def expect(self, versions: list) -> list:
        """The versions coming next (returned): children started from now on load the libraries
        they call while they wait (loading them in every child made each start ~1 s slower than
        the versions it waited for)."""
        if self._versions is not None:
            self._versions.preload = tuple(sorted({op for v in versions for op in v.library_ops}))
        return versions

    def baselines(self, warm=()) -> Server:
        """The baselines' long-lived child, started on first use; torch is imported as it starts
        (when the session times against torch), and the torch expressions of `warm`, the (Family,
        precision) groups to come, run once each (providers.warm_torch): those costs overlap the
        caller's next work."""
        if self._baselines is None:
            torch = self.options.time and self.options.torch and importlib.util.find_spec("torch") is not None
            preload = ("torch",) if torch else ()
            groups = [(f.name, p) for f, p in warm if f.torch_expression(p)]
            if torch and groups:
                preload += (torch_warm_item(str(warm[0][0].project.root), groups),)
            self._baselines = Server(preload=preload).start()
        return self._baselines

    def baselines_ready(self) -> bool:
        """Whether the baselines' child has said it is ready (torch imported, the warm-ups done):
        a job sent now is answered at once, not after an import. False before it is started."""
        return self._baselines is not None and self._baselines.heard("ready")

    def release(self) -> None:
        """Let the finished version children go, all at once (see LINGER); their exits are waited
        for before the next version runs (settle), so whatever comes first overlaps them."""
        if self._versions is not None:
            self._versions.release(wait=False)

    def settle(self) -> None:
        """Wait for the version children let go to have ended (none may tear down beside a job)."""
        if self._versions is not None:
            t0 = time.perf_counter()
            self._versions.settle()
            self.ledger.spent("releasing finished children", t0)

    def close(self, wait: bool = True) -> None:
        """Close the baselines' child, then the versions' (each lets its children go; wait=False:
        their exits are not waited for, see Server.close)."""
        for server in (self._baselines, self._versions):
            if server is not None:
                server.close(wait)
