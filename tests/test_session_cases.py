"""The bench session's reference cases on the CPU: a finished family's case files are deleted
(in the background, so the next family is not kept waiting) and gone once the session closes."""

import os
from pathlib import Path

from workbench.bench import Options, Session
from workbench.family import Project

from conftest import FIXTURES


def test_a_dropped_familys_case_files_are_deleted_by_the_time_the_session_closes():
    project = Project(FIXTURES / "project")
    family = project.family("scale")
    with Session(project, Options(seeds=1, time=False, stage=False)) as session:
        tmp = session.store.folder
        mine = [tmp / "scale-a", tmp / "scale-b"]
        other = tmp / "other-a"
        for folder in (*mine, other):
            folder.mkdir()
            (folder / "x.npy").write_bytes(b"\0" * 4096)
        session.store._cases[("scale", "fp32", (), (), 1, True)] = [str(p) for p in mine]
        session.store._cases[("other", "fp32", (), (), 1, True)] = [str(other)]
        session.store.drop(family)
        assert not any(k[0] == "scale" for k in session.store._cases)  # forgotten at once
        assert ("other", "fp32", (), (), 1, True) in session.store._cases
        session.store._deleter.shutdown(wait=True)
        assert not any(p.exists() for p in mine)
        assert other.exists()  # another family's cases are left alone
    assert not Path(tmp).exists()


def test_the_references_computed_in_the_background_pool_equal_the_same_cases_made_here():
    import numpy as np
    from workbench.check import load_case, make_case
    project = Project(FIXTURES / "project")
    family = project.family("scale")
    with Session(project, Options(seeds=2, time=False, stage=False)) as session:
        session.store.prepare([(family, "fp32")])
        paths = session.store.cases(family, session.sizes_for(family))
        # its workers come from a fork server: no copy of this process's threads or pipes
        assert session.store._pool._mp_context.get_start_method() == "forkserver"
        assert len(paths) >= 3
        for path in (paths[0], paths[-1]):
            got = load_case(path)
            want = make_case(family, got.sizes, got.seed)
            assert set(got.expected) == set(want.expected)
            for name in want.expected:
                np.testing.assert_allclose(got.expected[name], want.expected[name].astype(np.float32))


def test_closing_a_session_kills_the_reference_work_under_way_instead_of_waiting_for_it():
    import time
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from workbench.pools import POOL_START
    project = Project(FIXTURES / "project")
    session = Session(project, Options(seeds=1, time=False, stage=False))
    session.store._pool = ProcessPoolExecutor(max_workers=2, mp_context=POOL_START)
    running = [session.store._pool.submit(time.sleep, 60) for _ in range(2)]
    queued = session.store._pool.submit(time.sleep, 60)
    while not all(f.running() for f in running):
        time.sleep(0.05)
    pids = list(session.store._pool._processes)
    t0 = time.perf_counter()
    session.close()
    assert time.perf_counter() - t0 < 15  # the sleeps had a minute left
    # not run: cancelled, or (handed to the pool's call queue already) failed with the pool
    assert queued.cancelled() or isinstance(queued.exception(timeout=5), BrokenProcessPool)
    for pid in pids:  # the workers are gone, not left running
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{pid}/stat") as f:  # a zombie not yet reaped counts as gone
            assert f.read().split(") ")[1][0] == "Z", pid


def _project_of_scales(root: Path, names: list[str]) -> Project:
    """A project whose families are copies of the fixture's scale family (correct version only)."""
    import shutil
    shutil.copytree(FIXTURES / "project" / "references", root / "references")
    for name in names:
        folder = root / "kernels" / name
        folder.mkdir(parents=True)
        text = (FIXTURES / "project" / "kernels" / "scale" / "family.toml").read_text()
        (folder / "family.toml").write_text(f'reference = "scale"\n{text}')
        shutil.copy(FIXTURES / "project" / "kernels" / "scale" / "1_correct.cu", folder)
    return Project(root)


def test_the_references_run_ahead_only_as_far_as_the_case_budget_and_every_group_still_comes(tmp_path):
    from workbench.cases import estimated_case_bytes
    project = _project_of_scales(tmp_path, ["sa", "sb", "sc"])
    families = [project.family(n) for n in ("sa", "sb", "sc")]
    with Session(project, Options(seeds=1, time=False, stage=False)) as session:
        one = estimated_case_bytes(families[0], "fp32", session.store.plan(families[0], session.sizes_for(families[0]), "fp32")[1])
        session.store.budget = one + one // 2  # room for one group's cases, not two
        session.store.prepare([(f, "fp32") for f in families])
        assert [k[0] for k in session.store._pending] == ["sa"]  # the first always starts
        assert [q[0][0] for q in session.store._queued] == ["sb", "sc"]
        seen = []
        for family, precision in session.store.ready_first([(f, "fp32") for f in families]):
            paths = session.store.cases(family, session.sizes_for(family))
            assert paths and all(Path(p).exists() for p in paths)
            assert session.store.held_bytes() <= session.store.budget  # never two groups on disk at once
            seen.append(family.name)
            session.store.drop(family)
        assert seen == ["sa", "sb", "sc"] and not session.store._queued


def test_a_group_asked_for_before_its_turn_starts_at_once(tmp_path):
    project = _project_of_scales(tmp_path, ["sa", "sb"])
    sa, sb = project.family("sa"), project.family("sb")
    with Session(project, Options(seeds=1, time=False, stage=False)) as session:
        session.store.budget = 1  # nothing fits beside a started group
        session.store.prepare([(sa, "fp32"), (sb, "fp32")])
        assert [q[0][0] for q in session.store._queued] == ["sb"]
        paths = session.store.cases(sb, session.sizes_for(sb))  # sa's cases still held
        assert paths and not session.store._queued
        assert Path(paths[0], "meta.json").exists()


def test_the_case_estimate_is_what_build_cases_writes(tmp_path):
    import numpy as np
    from workbench.cases import build_cases, estimated_case_bytes
    project = Project(FIXTURES / "project")
    family = project.family("scale")
    plan = [({"N": 1000}, 0), ({"N": 33}, 1)]
    paths = build_cases(str(project.root), "scale", "fp32", plan, str(tmp_path / "c"))
    written = sum(np.load(p).nbytes for path in paths for p in Path(path).glob("*.npy"))
    assert estimated_case_bytes(family, "fp32", plan) == written == 2 * 4 * 1033


def test_a_smaller_group_starts_past_a_larger_one_waiting_for_room_in_the_budget(tmp_path):
    project = _project_of_scales(tmp_path, ["sa", "sb", "sc"])
    groups = [(project.family(n), "fp32") for n in ("sa", "sb", "sc")]
    with Session(project, Options(seeds=1, time=False, stage=False)) as session:
        session.store.budget = 1  # only the first starts
        session.store.prepare(groups)
        assert [q[0][0] for q in session.store._queued] == ["sb", "sc"]
        keys = {q[0][0]: q[0] for q in session.store._queued}
        held = session.store.held_bytes()
        session.store._case_bytes[keys["sb"]] = 10 * held  # sb would not fit beside sa; sc would
        session.store._case_bytes[keys["sc"]] = held
        session.store.budget = 2 * held
        session.store._top_up()
        assert [q[0][0] for q in session.store._queued] == ["sb"]
        assert sorted(k[0] for k in session.store._pending) == ["sa", "sc"]
        seen = []
        for family, precision in session.store.ready_first(groups):  # sb still comes, after the room is freed
            session.store.cases(family, session.sizes_for(family))
            seen.append(family.name)
            session.store.drop(family)
        assert sorted(seen) == ["sa", "sb", "sc"] and not session.store._queued
        started, ready = (session.store.timeline[k] for k in ("references started at", "references ready at"))
        benched = session.store.timeline["benched at"]
        assert set(started) == set(ready) == set(benched) == {"sa/fp32", "sb/fp32", "sc/fp32"}
        assert all(started[g] <= ready[g] for g in started)


def test_the_reference_cost_follows_the_cases_drawn_not_the_bytes_a_kernel_moves():
    # crossentropy_forward's kernel reads one logit a row, but its cases draw B*T*V logits: rated
    # by bytes_moved it was benched first, and the GPU waited for its references.
    from workbench.family import PROJECT_ROOT
    project = Project(PROJECT_ROOT)
    with Session(project, Options(time=False, stage=False)) as session:
        cost = {n: session.store.reference_cost((project.family(n), "fp32"))
                for n in ("crossentropy_forward", "layernorm_forward", "adamw", "gelu_forward")}
    assert cost["layernorm_forward"] < cost["gelu_forward"] < cost["crossentropy_forward"] < cost["adamw"]


def _threads_after_a_matmul() -> int:
    import numpy as np
    a = np.ones((300, 300))
    a @ a
    return len(os.listdir("/proc/self/task"))


def test_the_reference_workers_run_blas_on_one_thread_where_a_plain_worker_takes_every_core():
    # 8 workers each starting a BLAS thread per core crowded the H100 host's 16 cores (50-90
    # runnable threads) and slowed the processes driving the GPU.
    from concurrent.futures import ProcessPoolExecutor
    from workbench.pools import ONE_THREAD, POOL_START, niced_pool
    with niced_pool(1, 1) as pool:
        assert pool.submit(_threads_after_a_matmul).result(timeout=60) == 1
    if (os.cpu_count() or 1) > 1 and not any(os.environ.get(name) for name in ONE_THREAD):
        with ProcessPoolExecutor(1, mp_context=POOL_START) as pool:
            assert pool.submit(_threads_after_a_matmul).result(timeout=60) > 1


def test_the_dear_groups_references_go_to_a_pool_of_their_own(tmp_path):
    # In one pool the dear groups came to hold every worker at once while the GPU waited for the
    # cheap ones queued behind them.
    from concurrent.futures import ProcessPoolExecutor
    from workbench.cases import DEAR_S
    from workbench.pools import POOL_START

    class Recording(ProcessPoolExecutor):
        def __init__(self):
            super().__init__(max_workers=1, mp_context=POOL_START)
            self.names = []

        def submit(self, fn, *args, **kwargs):
            self.names.append(args[1])  # build_cases(root, family_name, ...)
            return super().submit(fn, *args, **kwargs)

    project = _project_of_scales(tmp_path, ["sa", "sb", "sc"])
    groups = [(project.family(n), "fp32") for n in ("sa", "sb", "sc")]
    with Session(project, Options(seeds=1, time=False, stage=False)) as session:
        store = session.store
        store.reference_cost = lambda g: DEAR_S if g[0].name == "sb" else DEAR_S / 10
        store._pool, store._dear_pool = Recording(), Recording()
        store.prepare(groups)
        for family, precision in store.ready_first(groups):
            assert store.cases(family, session.sizes_for(family))
            store.drop(family)
        assert store._pool.names == ["sa", "sc"] and store._dear_pool.names == ["sb"]


def test_while_a_group_waits_for_room_the_ready_group_holding_the_most_bytes_is_benched_first(tmp_path):
    from concurrent.futures import wait
    project = _project_of_scales(tmp_path, ["sa", "sb", "sc"])
    groups = [(project.family(n), "fp32") for n in ("sa", "sb", "sc")]
    with Session(project, Options(seeds=1, time=False, stage=False)) as session:
        store = session.store
        store.budget = 1  # only the first starts
        store.prepare(groups)
        keys = {q[0][0]: q[0] for q in store._queued}
        one = store.held_bytes()
        store._case_bytes[keys["sb"]] = 3 * one   # sb holds the most
        store._case_bytes[keys["sc"]] = 10 * one  # sc cannot start beside sa and sb
        store.budget = 5 * one
        store._top_up()
        assert [q[0][0] for q in store._queued] == ["sc"]
        wait(list(store._pending.values()), timeout=60)
        order = []
        for family, precision in store.ready_first(groups):
            order.append(family.name)
            store.cases(family, session.sizes_for(family))
            store.drop(family)
        assert order == ["sb", "sa", "sc"]  # in the GPU's order it would have been sa first


def test_families_benched_before_the_baselines_child_is_ready_get_their_baselines_once_it_is(monkeypatch, tmp_path):
    """A bench's first families go on without waiting for torch's import: their baselines run,
    in order and after the version children are settled, once the child says it is ready (or
    once HELD_BACK are held); each family's cases are dropped and its result saved only then."""
    from workbench import bench as bench_mod
    from workbench.results import BenchRun, FamilyResult, load
    project = Project(FIXTURES / "project")
    names = [f"f{i}" for i in range(7)]
    groups = [(type("F", (), {"name": n, "title": n})(), "fp32") for n in names]
    events = []
    monkeypatch.setattr(bench_mod, "HELD_BACK", 3)
    with Session(project, Options(stage=False)) as session:
        monkeypatch.setattr(session, "_start_ahead", lambda groups: None)
        monkeypatch.setattr(session, "start_compiles", lambda versions: None)
        monkeypatch.setattr(session, "new_run", lambda: BenchRun(device={"name": "x"}, ceiling={}))
        monkeypatch.setattr(session.store, "ready_first", lambda gs: iter(groups))
        monkeypatch.setattr(session.store, "drop", lambda f: events.append(("drop", f.name)))
        monkeypatch.setattr(session.children, "baselines_ready",  # once five families ran their versions
                            lambda: sum(e[0] == "versions" for e in events) >= 5)
        monkeypatch.setattr(session.children, "settle", lambda: events.append(("settle",)))

        def bench_family(f, precision, on_row=None, baselines=True):
            if f.name == "f1":  # f0 is held: in the file already, waiting for its baselines
                written = {r.family: r.baselines_pending for r in load(tmp_path / "b.json").families}
                assert written == {"f0": True}
            events.append(("versions", f.name, baselines))
            result = FamilyResult(f.name, f.title, {}, 0, None, precision)
            result.seconds = 0.5
            if baselines:
                session.finish_baselines(f, result)
            return result
        monkeypatch.setattr(session, "bench_family", bench_family)
        monkeypatch.setattr(session, "run_baselines", lambda f, sizes, precision: (events.append(("baselines", f.name)), None)[1:] * 2)
        run = session.bench([], json_path=str(tmp_path / "b.json"))
    # f0, f1, f2 held (not ready); three held make f3 finish them first (HELD_BACK), then f3 is
    # held too (still not ready), and f4; ready at f5: f3 and f4 finish before f5 runs
    assert [e for e in events if e[0] == "versions"] == [
        ("versions", "f0", False), ("versions", "f1", False), ("versions", "f2", False),
        ("versions", "f3", False), ("versions", "f4", False), ("versions", "f5", True), ("versions", "f6", True)]
    baselines = [e[1] for e in events if e[0] == "baselines"]
    assert baselines == ["f0", "f1", "f2", "f3", "f4", "f5", "f6"]
    assert events.index(("versions", "f2", False)) < events.index(("baselines", "f0")) < events.index(("versions", "f3", False))
    assert events.index(("versions", "f4", False)) < events.index(("baselines", "f3")) < events.index(("versions", "f5", True))
    for name in ("f0", "f3"):
        assert events[events.index(("baselines", name)) - 1] == ("settle",), "after the version children's exits"
    assert [e[1] for e in events if e[0] == "drop"] == baselines, "cases kept until the baselines ran"
    assert [f.family for f in run.families] == names
    assert [(f.family, f.baselines_pending) for f in load(tmp_path / "b.json").families] == [(n, False) for n in names]


def test_resume_runs_again_a_family_whose_baselines_were_pending(monkeypatch, tmp_path):
    from workbench.results import BenchRun, FamilyResult, save
    project = Project(FIXTURES / "project")
    done, pending = FamilyResult("done", "t", {}, 0), FamilyResult("pending", "t", {}, 0, baselines_pending=True)
    save(tmp_path / "b.json", BenchRun(device={"name": "x"}, ceiling={}, families=[done, pending]))

    class Fam:
        def __init__(self, name):
            self.name, self.versions = name, [type("V", (), {"precision": "fp32"})()]

        def precision_names(self):
            return ["fp32"]
    benched = []
    with Session(project, Options(stage=False)) as session:
        monkeypatch.setattr(session, "_start_ahead", lambda groups: benched.append([f.name for f, _ in groups]))
        monkeypatch.setattr(session.store, "reference_cost", lambda g: 0)
        monkeypatch.setattr(session, "start_compiles", lambda versions: None)
        monkeypatch.setattr(session, "new_run", lambda: BenchRun(device={"name": "x"}, ceiling={}))
        monkeypatch.setattr(session.store, "ready_first", lambda gs: iter([]))
        run = session.bench([Fam("done"), Fam("pending")], json_path=str(tmp_path / "b.json"), resume=True)
    assert benched == [["pending"]]
    assert [f.family for f in run.families] == ["done"]
