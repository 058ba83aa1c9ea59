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
        tmp = session._tmp
        mine = [tmp / "scale-a", tmp / "scale-b"]
        other = tmp / "other-a"
        for folder in (*mine, other):
            folder.mkdir()
            (folder / "x.npy").write_bytes(b"\0" * 4096)
        session._cases[("scale", "fp32", (), (), 1, True)] = [str(p) for p in mine]
        session._cases[("other", "fp32", (), (), 1, True)] = [str(other)]
        session.drop_cases(family)
        assert not any(k[0] == "scale" for k in session._cases)  # forgotten at once
        assert ("other", "fp32", (), (), 1, True) in session._cases
        session._deleter.shutdown(wait=True)
        assert not any(p.exists() for p in mine)
        assert other.exists()  # another family's cases are left alone
    assert not Path(tmp).exists()


def test_the_references_computed_in_the_background_pool_equal_the_same_cases_made_here():
    import numpy as np
    from workbench.check import load_case, make_case
    project = Project(FIXTURES / "project")
    family = project.family("scale")
    with Session(project, Options(seeds=2, time=False, stage=False)) as session:
        session.prepare_cases([(family, "fp32")])
        paths = session.cases(family, session.sizes_for(family))
        # its workers come from a fork server: no copy of this process's threads or pipes
        assert session._pool._mp_context.get_start_method() == "forkserver"
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
    from workbench.bench import _POOL_START
    project = Project(FIXTURES / "project")
    session = Session(project, Options(seeds=1, time=False, stage=False))
    session._pool = ProcessPoolExecutor(max_workers=2, mp_context=_POOL_START)
    running = [session._pool.submit(time.sleep, 60) for _ in range(2)]
    queued = session._pool.submit(time.sleep, 60)
    while not all(f.running() for f in running):
        time.sleep(0.05)
    pids = list(session._pool._processes)
    t0 = time.perf_counter()
    session.close()
    assert time.perf_counter() - t0 < 15  # the sleeps had a minute left
    assert queued.cancelled()
    for pid in pids:  # the workers are gone, not left running
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{pid}/stat") as f:  # a zombie not yet reaped counts as gone
            assert f.read().split(") ")[1][0] == "Z", pid
