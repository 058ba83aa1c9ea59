"""A bench session's reference cases on disk: `CaseStore` owns the session's case folder, the
cases computed (a list of case files per (family, precision, sizes, seeds) key), the background
pool computing more (build_cases), the queue of groups waiting for room in the disk budget (the
top-up), and the dropping of a finished family's cases (deleted by a background thread; their
copies on the device freed through the session's StagedCases, staged.py). It also yields the
groups in the order their cases become ready (`ready_first`)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from .check import make_case, save_case
from .family import Family, Project
from .ledger import Ledger
from .options import Options, Progress
from .pools import niced_pool, stop_pool
from .staged import StagedCases

# The reference cases may hold this share of the free disk at the session's start (at least the
# minimum), leaving a quarter to everything else. On the H100's host (69 GB free) 40% held the
# bench --all up by 39 s waiting for the large families' references (228 s against 191).
CASE_BUDGET_SHARE = 0.75
CASE_BUDGET_MIN = 4 * 1024**3
# A group whose references reference_cost guesses at this many seconds or more is dear: AdamW,
# softmax, the classifier's and cross-entropy's (823M logits) take 20-55 s of a core; the next,
# matmul_backward_dgelu, ~11.
DEAR_S = 15.0
# The reference workers' niceness, below the compiles' (10): with the references at 5, the host's
# 16 cores were saturated for a bench --all's first 40 s, the GPU waited 8 s for compiles and its
# own processes ran slower, while the references were all ready 60 s before the GPU needed the last.
REFERENCE_NICE = 15


class CaseStore:
    """The case files of one session, in `folder` (deleted by close), at most `budget` bytes of
    them started and not yet dropped (one group always may start, so the first is never held)."""

    def __init__(self, root: Path, options: Options, ledger: Ledger, progress: Progress, staged: StagedCases):
        self.root, self.options, self.ledger, self.progress, self.staged = root, options, ledger, progress, staged
        self.folder = Path(tempfile.mkdtemp(prefix="workbench-cases-"))
        self._cases: dict[tuple, list[str]] = {}
        self._pending: dict[tuple, Future] = {}   # cases being computed in the background
        self._queued: list[tuple] = []             # (key, family, precision, plan, folder) not yet started
        self._case_bytes: dict[tuple, int] = {}    # estimated disk bytes of each queued or started group's cases
        # How far the references may run ahead of the GPU, in bytes of case files on disk: every
        # family's cases at once would be ~90 GB (softmax alone 10), more than the H100 host's
        # disk, and a stalled version once let them fill it.
        self.budget = max(CASE_BUDGET_MIN, int(shutil.disk_usage(self.folder).free * CASE_BUDGET_SHARE))
        self._pool: ProcessPoolExecutor | None = None       # the references of most groups
        self._dear_pool: ProcessPoolExecutor | None = None  # those of the dear groups (self._dear)
        self._dear: set[tuple] = set()
        self._deleter: ThreadPoolExecutor | None = None  # deletes finished families' case files
        # When each group's references started and were ready, and when ready_first handed it to
        # the GPU, in seconds from the store's start ("family/precision" -> s): a bench's JSON
        # carries them (its phases), to see what the GPU waited for.
        self._clock = time.perf_counter()
        self.timeline: dict[str, dict[str, float]] = {}

    def plan(self, family: Family, sizes: dict[str, int], precision: str, extra_sizes=(), seeds=None):
        """(key, [(sizes, seed), ...]): the timed sizes first (their first seed is the one timed;
        two seeds, since they are the large ones), then any extra sizes (the trainer's, when
        promoting) and the family's test sizes, each at every seed."""
        seeds = self.options.seed_list()[:seeds] if seeds else self.options.seed_list()
        test_sizes = family.test_sizes if self.options.test_sizes else []
        key = (family.name, precision, tuple(sorted(sizes.items())),
               tuple(tuple(sorted(e.items())) for e in extra_sizes), tuple(seeds), bool(test_sizes))
        plan = [(sizes, seed) for seed in seeds[:2]]
        others: list[dict] = []
        for s in [*extra_sizes, *test_sizes]:
            if s != sizes and s not in others:
                others.append(s)
        plan += [(s, seed) for s in others for seed in seeds]
        return key, plan

    def cases(self, family: Family, sizes: dict[str, int], precision: str = "fp32", extra_sizes=(),
              seeds: int | None = None) -> list[str]:
        """Case files for the sizes (timed first), the extra sizes and the test sizes, at the
        session's seeds (or the first `seeds` of them)."""
        key, plan = self.plan(family, sizes, precision, extra_sizes, seeds)
        t0 = time.perf_counter()
        for i, queued in enumerate(self._queued):
            if queued[0] == key:  # asked for before its turn: it goes next, now
                self._queued.insert(0, self._queued.pop(i))
                self._top_up(force=True)
                break
        if key in self._pending:
            self.progress(f"{family.name}: waiting for its reference cases")
            self._cases[key] = self._pending.pop(key).result()
        if key not in self._cases:
            self.progress(f"{family.name}: computing the reference at {len(plan)} size sets x seeds")
            folder = self.folder / f"{family.name}-{precision}-{len(self._cases)}"
            self._cases[key] = build_cases(str(self.root), family.name, precision, plan, str(folder))
        self.ledger.spent("waiting for references", t0)
        return self._cases[key]

    def prepare(self, groups: list[tuple[Family, str]]) -> None:
        """Compute the reference cases of many (family, precision) groups in the background, in
        the order given (the GPU's): its work on the first overlaps the references of the rest.
        The dear groups (DEAR_S and more) go to a pool of their own: in one pool, run in any
        order, they ended up holding every worker at once for 30-50 s while the GPU, done with
        the first cheap groups, waited 11 s for the next (a bench --all on the H100); started
        last, the GPU waited for them at the end (37 s). Groups start while the cases started and
        not yet dropped fit the case budget (one always may, so that the first is never held
        back); the rest wait in a queue until drop frees room."""
        if self._pool is None:  # niced: the processes driving the GPU, then the compiles, come first.
            # Torch baselines launch several kernels from Python: with the references at full priority
            # on 8 cores, 1-2 of them a bench --all on the H100 timed 2-3x slow (p80/p20 2-3.4), all in its
            # first half, while the references were being computed
            workers = min(8, os.cpu_count() or 1)
            self._pool = niced_pool(max(1, workers - workers // 2), REFERENCE_NICE)
            self._dear_pool = niced_pool(max(1, workers // 2), REFERENCE_NICE)
        queued = {q[0] for q in self._queued}
        for i, (family, precision) in enumerate(groups):
            key, plan = self.plan(family, self.options.sizes_for(family), precision)
            if key not in self._cases and key not in self._pending and key not in queued:
                self._queued.append((key, family, precision, plan, str(self.folder / f"{family.name}-{precision}-p{i}")))
                self._case_bytes[key] = estimated_case_bytes(family, precision, plan)
                if self.reference_cost((family, precision)) >= DEAR_S:
                    self._dear.add(key)
                queued.add(key)
        self._top_up()

    def held_bytes(self) -> int:
        """The estimated disk bytes of the groups started and not yet dropped."""
        return sum(self._case_bytes.get(k, 0) for k in (*self._pending, *self._cases))

    def _top_up(self, force: bool = False) -> None:
        """Start queued groups, in queue order, whose cases fit the budget beside those started and
        not yet dropped: a smaller group may start past a larger one that must wait for room (the
        GPU goes on with it). With nothing under way (or force), the first regardless of its size."""
        i = 0
        while i < len(self._queued):
            key, family, precision, plan, folder = self._queued[i]
            if force or not self._pending or self.held_bytes() + self._case_bytes[key] <= self.budget:
                self._queued.pop(i)
                self.note("references started at", family, precision)
                pool = self._dear_pool if key in self._dear else self._pool
                self._pending[key] = pool.submit(build_cases, str(self.root), family.name, precision, plan, folder)
                self._pending[key].add_done_callback(
                    lambda _, f=family, p=precision: self.note("references ready at", f, p))
                force = False
            else:
                i += 1

    def note(self, what: str, family: Family, precision: str) -> None:
        """Stamp `what` for the group in the timeline."""
        self.timeline.setdefault(what, {})[f"{family.name}/{precision}"] = round(time.perf_counter() - self._clock, 2)

    def drop(self, family: Family) -> None:
        """Delete a family's case files (a bench of every family would otherwise fill the disk)
        and free its staged cases on the device."""
        keys = [k for k in self._cases if k[0] == family.name]
        paths = [path for key in keys for path in self._cases.pop(key)]
        for key in keys:
            self._case_bytes.pop(key, None)
        self._top_up()  # their room goes to the groups waiting
        staged = [p for p in paths if self.staged.holds(p)]
        if staged:
            self.staged.release(staged)
        # Deleting gigabytes of case files took ~0.4 s a family on the H100's host (22 s of a
        # bench --all): a background thread does it while the next family runs.
        if self._deleter is None:
            self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="case-deleter")
        for path in paths:
            self._deleter.submit(shutil.rmtree, path, True)

    def reference_cost(self, group: tuple[Family, str]) -> float:
        """A rough guess of the seconds one core takes over a group's cases: ~5 s a GB of case
        files written (drawing the inputs and the float64 passes over them dominate: AdamW's 7 GB
        took 35-55 s on the CPU machine) plus the FLOPs at ~20 GFLOP/s (float64 BLAS). The family's
        own bytes_moved said nothing of what its references cost: crossentropy_forward reads
        one logit a row (0 GB) but draws 823M of them, and it was benched first, the GPU waiting
        for it."""
        family, precision = group
        sizes = self.options.sizes_for(family)
        _, plan = self.plan(family, sizes, precision)
        return estimated_case_bytes(family, precision, plan) / 2e8 + (family.flops_done(sizes) or 0) / 2e10

    def ready_first(self, groups: list[tuple[Family, str]]):
        """The groups in the order their reference cases become ready (bench order among the
        ready ones): the GPU never waits on one family's references while another's are done.
        While a group waits for room in the case budget, the ready group holding the most bytes
        goes first instead (its drop frees the most): the dear groups' cases, ready by mid-bench
        but benched last, held the room AdamW's needed until 115 s into a 160 s bench --all on
        the H100, and the GPU waited for it at the end."""
        left = list(groups)
        while left:
            keys = {id(g): self.plan(g[0], self.options.sizes_for(g[0]), g[1])[0] for g in left}
            futures = {id(g): self._pending.get(keys[id(g)]) for g in left}
            queued = {q[0] for q in self._queued}
            ready = [g for g in left if keys[id(g)] not in queued and (futures[id(g)] is None or futures[id(g)].done())]
            if not ready:
                under_way = [f for f in futures.values() if f is not None]
                if not under_way:  # all that is left waits for room that only its own start can make
                    self._top_up(force=True)
                    continue
                t0 = time.perf_counter()
                self.progress("waiting for the reference cases")
                wait(under_way, return_when=FIRST_COMPLETED)
                self.ledger.spent("waiting for references", t0)
                continue
            pick = ready[0]
            if self._queued:
                pick = max(ready, key=lambda g: self._case_bytes.get(keys[id(g)], 0))
            left.remove(pick)
            self.note("benched at", *pick)  # the GPU begins it now
            yield pick

    def stop_pool(self) -> None:
        """Stop the reference pool: queued groups are cancelled, those under way killed."""
        for pool in (self._pool, self._dear_pool):
            if pool is not None:
                stop_pool(pool)

    def stop_deleting(self) -> None:
        """Wait for the deletions under way (before the folder they delete in goes)."""
        if self._deleter is not None:
            self._deleter.shutdown(wait=True)

    def remove_folder(self) -> None:
        """Delete the session's case folder and whatever is left in it."""
        shutil.rmtree(self.folder, ignore_errors=True)


def estimated_case_bytes(family: Family, precision: str, plan) -> int:
    """The disk bytes build_cases will write for this plan: each input at its width, each
    output's expected values as float32 (check.save_case)."""
    total = 0
    for sizes, _ in plan:
        for arg in family.args_for(precision):
            n = int(np.prod(family.shape(arg, sizes)))
            if arg.is_input:
                total += n * np.dtype(arg.np_dtype).itemsize
            if arg.is_output:
                total += n * 4
    return total


def build_cases(root: str, family_name: str, precision: str, plan, folder: str) -> list[str]:
    """Draw inputs and run the reference for each (sizes, seed); save them for the workers."""
    family = Project(root).family(family_name)
    paths = []
    for i, (sizes, seed) in enumerate(plan):
        path = f"{folder}/{i}"
        save_case(make_case(family, sizes, seed, precision), path)
        paths.append(path)
    return paths
