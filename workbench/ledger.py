"""Where a bench session's seconds went: `Ledger` keeps the seconds by activity ("versions",
"waiting for references", "staging cases", ...) and, for the activities that run rows, the rows'
phases summed (check, time, re-check) with the hand-offs around them (`hand_offs`: a child's
start, its job's set-up, its exit). Every part of a session writes to the session's one ledger;
a BenchRun carries a copy (its `seconds` and `phases`)."""

from __future__ import annotations

import time

from .results import Row


class Ledger:
    """seconds: activity -> seconds spent on it; phases: activity -> {phase: seconds}, summed
    over the rows it ran."""

    def __init__(self):
        self.seconds: dict[str, float] = {}           # where the time went, by activity
        self.phases: dict[str, dict[str, float]] = {}  # "versions"/"baselines" -> the rows' phases summed

    def spent(self, what: str, since: float, rows: list[Row] = (), res: dict | None = None) -> None:
        """Add the seconds from `since` (time.perf_counter) to now to `what`, and the rows'
        phases (and, from the job's result `res`, its hand-offs) to its phases."""
        self.seconds[what] = round(self.seconds.get(what, 0.0) + time.perf_counter() - since, 1)
        phases = self.phases.setdefault(what, {}) if rows else {}
        for row in rows:
            for phase, sec in row.phases.items():
                phases[phase] = round(phases.get(phase, 0.0) + sec, 2)
        for phase, sec in (hand_offs(res, rows) if res and rows else {}).items():
            phases[phase] = round(phases.get(phase, 0.0) + sec, 2)


def hand_offs(res: dict, rows: list[Row]) -> dict[str, float]:
    """A job's seconds outside its rows' phases, from the parent's and the child's clocks (one
    system clock): 'child start' from the request sent to the child beginning it (a child not
    yet ready: its imports and CUDA context), 'job set-up' the child's own work around the rows
    (opening the staged cases, reading the family), 'child exit' from its answer written to the
    parent done with it (a one-job child's exit and CUDA teardown). Empty when a clock is
    missing (a crashed child)."""
    clock, began, ended = res.get("clock") or {}, res.get("began"), res.get("ended")
    if not clock or began is None or ended is None:
        return {}
    in_rows = sum(sum(r.phases.values()) for r in rows)
    return {"child start": max(0.0, began - clock["sent"]),
            "job set-up": max(0.0, ended - began - in_rows),
            "child exit": max(0.0, clock["exited"] - ended)}
