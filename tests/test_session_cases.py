"""The bench session's reference cases on the CPU: a finished family's case files are deleted
(in the background, so the next family is not kept waiting) and gone once the session closes."""

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
