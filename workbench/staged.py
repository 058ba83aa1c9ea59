"""The bench session's side of staging.py: `StagedCases` owns the case owner (a long-lived child
that uploads one family's reference cases to the device and hands out CUDA IPC handles to them)
and the bookkeeping of what it holds: each staged case's buffers, the bundles' handles, the
owner's pid (its memory dies with it) and the one (family, precision) staged at a time. It stages
(`share`), frees (`release`) and, after each version, checks the cases were left as they were
(`verify`)."""

from __future__ import annotations

import time
from pathlib import Path

from .family import Family
from .isolate import Server
from .ledger import Ledger
from .options import Options, Progress
from .results import Row


class StagedCases:
    """What the case owner holds on the device, as this process knows it."""

    def __init__(self, root: Path, options: Options, ledger: Ledger, progress: Progress):
        self.root, self.options, self.ledger, self.progress = root, options, ledger, progress
        self._owner: Server | None = None        # the case owner: a long-lived child (staging.py)
        self._staged: dict[str, dict] = {}       # case path -> its buffers' (bundle, offset, nbytes)
        self._bundles: dict[str, str] = {}       # bundle id -> its IPC handle
        self._owner_pid: int | None = None       # the owner's pid: its memory dies with it
        self._group: tuple[str, str] | None = None  # one (family, precision) staged at a time
        self.misses: list[str] = []              # versions whose child could not open the staged cases

    def server(self) -> Server:
        """The case owner, started on first use (bench starts it early: its start overlaps)."""
        if self._owner is None:
            self._owner = Server().start()
        return self._owner

    def holds(self, path: str) -> bool:
        """Whether this case is staged now."""
        return path in self._staged

    def release(self, paths: list[str] | None = None) -> None:
        """Free these staged cases on the device (every one when None) and forget them here."""
        t0 = time.perf_counter()
        self._job({"action": "release", "cases": paths})
        for p in list(self._staged) if paths is None else paths:
            self._staged.pop(p, None)
        if not self._staged:
            self._bundles.clear()
        self.ledger.spent("releasing staged cases", t0)

    def _job(self, job: dict) -> dict:
        res = self.server().run({"job": "stage", "root": str(self.root), **job}, self.options.timeout)
        if res.get("status") != "passed" or res.get("pid") != self._owner_pid:
            self._staged.clear()  # failed, or a new child: whatever was staged died with the old one
            self._bundles.clear()
            self._owner_pid = res.get("pid") if res.get("status") == "passed" else None
        return res

    def share(self, family: Family, precision: str, paths: list[str]) -> dict | None:
        """What a child needs to open these cases, staged on the device by the case owner (uploaded
        there on first use, one family at a time): {"bundles": {id: IPC handle}, "cases": {path:
        buffers}}; None when staging is off or failed: the children upload the cases themselves."""
        if not self.options.stage:
            return None
        if self._staged and self._group != (family.name, precision):
            self.release()  # another family's: device memory holds one at a time
        self._group = (family.name, precision)
        for _ in range(2):  # twice: if the owner had restarted, what it held is gone and is staged anew
            missing = [p for p in paths if p not in self._staged]
            if missing:
                t0 = time.perf_counter()
                res = self._job({"action": "stage", "family": family.name, "precision": precision,
                                 "cases": missing})
                self.ledger.spent("staging cases", t0)
                if res.get("status") != "passed":
                    self.progress(f"{family.name}: cases not staged ({res.get('reason', res.get('status'))}): "
                                  "each version uploads them")
                    return None
                self._staged.update(res["staged"]["cases"])
                self._bundles.update(res["staged"]["bundles"])
            if all(p in self._staged for p in paths):
                cases = {p: self._staged[p] for p in paths}
                used = {str(b) for entry in cases.values() for bufs in entry.values() for b, _, _ in bufs.values()}
                return {"bundles": {b: self._bundles[b] for b in used}, "cases": cases}
        return None

    def verify(self, paths: list[str], row: Row) -> None:
        """After a version: were the staged cases it opened left as they were? A version that
        wrote into them (out of bounds) fails; the owner has uploaded them again."""
        res = self._job({"action": "verify", "cases": paths})
        changed = res.get("changed") or []
        if changed and row.status == "passed":
            row.status = "failed"
        if changed:
            row.reason = ((row.reason + "; ") if row.reason else "") + \
                "wrote outside its own buffers: it changed the shared reference case (" + ", ".join(changed[:3]) + ")"

    def after_version(self, label: str, paths: list[str], res: dict, row: Row) -> None:
        """After a version given these staged cases: note (and say) it when its child did not open
        them but uploaded its own (`misses`), then verify it left them as they were."""
        if not str(res.get("staging", "")).startswith("used"):  # it uploaded its own
            self.misses.append(f"{label}: staged cases {res.get('staging', 'not opened')}")
            self.progress(self.misses[-1])
        t0 = time.perf_counter()
        self.verify(paths, row)
        self.ledger.spent("staging cases", t0)

    def close(self) -> None:
        """Close the case owner: what it staged is freed with its process."""
        if self._owner is not None:
            self._owner.close()
