"""The worker's parts that need no GPU: the result file it writes as a job goes, the cases it
opens from disk, the libraries a child started ahead loads."""

import json
import time

import numpy as np

from workbench.check import Case, load_case, save_case
from workbench.family import Project
from workbench.worker import Reporter

from conftest import ROOT


def test_phases_close_together_are_written_once_and_the_last_one_still_reaches_the_file(tmp_path):
    path = tmp_path / "result.json"
    rep = Reporter(str(path))
    refreshed = []
    rep.refresh = lambda: refreshed.append(rep.result["phase"])
    rep.phase("check B=8 block size 32")
    assert json.loads(path.read_text())["phase"] == "check B=8 block size 32"
    rep.phase("check B=8 block size 64")
    rep.phase("check B=8 block size 128")
    assert json.loads(path.read_text())["phase"] == "check B=8 block size 32", "too soon: not written yet"
    time.sleep(3 * Reporter.EVERY)  # a launch that hangs here: the timer writes where it hung
    assert json.loads(path.read_text())["phase"] == "check B=8 block size 128"
    assert refreshed == ["check B=8 block size 32", "check B=8 block size 128"]
    rep.result["status"] = "passed"
    rep.flush()
    assert json.loads(path.read_text())["status"] == "passed"
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"], "no temporary file left behind"


def test_a_case_from_disk_opens_an_array_only_when_it_is_read(tmp_path):
    case = Case({"N": 3}, 7, {"inp": np.arange(3, dtype=np.float32)}, {"out": np.ones(3)})
    save_case(case, tmp_path)
    got = load_case(tmp_path)
    assert (got.sizes, got.seed, list(got.inputs), list(got.expected)) == ({"N": 3}, 7, ["inp"], ["out"])
    assert "out" in got.expected and "inp" not in got.expected
    assert got.inputs._open == {} and got.expected._open == {}, "nothing read yet"
    assert got.inputs["inp"].tolist() == [0, 1, 2] and got.expected["out"].dtype == np.float32
    assert list(got.inputs._open) == ["inp"]


def test_every_library_op_names_what_a_waiting_child_loads_and_versions_say_which_they_call():
    from workbench import library_calls
    assert set(library_calls._NEEDS) == set(library_calls.names())
    project = Project(ROOT)
    ops = {op for f in project.families() for v in f.versions for op in v.library_ops}
    assert ops and ops <= set(library_calls.names())
    assert project.family("layernorm_forward").version(4).library_ops == []


def test_a_cudnn_attention_step_runs_its_shapes_graph_on_its_own_pointers(monkeypatch):
    """The graph is built once per shape (cached); each step made from it carries its own
    pointers, and runs on the stream it is given."""
    import sys
    import types

    from workbench import library_calls
    calls = []
    fake = types.SimpleNamespace(set_stream=lambda handle, stream: calls.append(("stream", handle, stream)))
    monkeypatch.setitem(sys.modules, "cudnn", fake)
    monkeypatch.setattr(library_calls, "cudnn_handle", lambda: "handle")

    class Graph:
        def execute(self, pack, workspace, handle):
            calls.append(("execute", dict(pack), workspace, handle))
    built = {}

    def graph(*shape):
        if shape not in built:
            built[shape] = (Graph(), ("q", "k", "v", "o", "dO", "stats", "dq", "dk", "dv"), 4096)
        return built[shape]
    monkeypatch.setattr(library_calls, "_sdpa_backward_graph", graph)
    one = library_calls.sdpa_backward_cudnn(*range(1, 10), B=2, T=8, NH=2, HS=4)
    two = library_calls.sdpa_backward_cudnn(*range(11, 20), B=2, T=8, NH=2, HS=4)
    assert len(built) == 1
    one(types.SimpleNamespace(handle=7))
    two(None)
    assert calls[0] == ("stream", "handle", 7) and calls[2] == ("stream", "handle", 0)
    assert calls[1] == ("execute", dict(zip(built[(2, 8, 2, 4, 0.5, False)][1], range(1, 10))), 4096, "handle")
    assert calls[3][1] == dict(zip(built[(2, 8, 2, 4, 0.5, False)][1], range(11, 20)))


def test_doctor_says_when_every_child_would_compile_its_imports_from_source(tmp_path, monkeypatch):
    import sys

    from workbench.doctor import bytecode
    pkg = tmp_path / "barepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert bytecode(dont_write=False, packages=("barepkg",)).ok, "Python writes them on first import"
    bad = bytecode(dont_write=True, packages=("barepkg",))
    assert not bad.ok and "barepkg" in bad.detail and bad.fix == f"python -m compileall -q -j 0 {tmp_path}"
    import py_compile
    py_compile.compile(str(pkg / "__init__.py"))
    assert bytecode(dont_write=True, packages=("barepkg",)).ok
    assert bytecode(dont_write=True, packages=("no_such_package_here",)).ok
    sys.modules.pop("barepkg", None)


def test_a_waiting_job_goes_before_the_idle_work_and_the_rest_of_it_runs_between_jobs():
    """The baselines' child warms torch expressions only while no job waits (lines_between)."""
    import os

    from workbench.worker import lines_between
    r, w = os.pipe()
    events = []
    idle = [lambda: (events.append("warm 1"), os.write(w, b"job A\n")),
            lambda: (events.append("warm 2"), os.write(w, b"job B\n")),
            lambda: (events.append("warm 3"), os.close(w)),  # the end of stdin: the lines end
            lambda: events.append("warm 4")]
    for line in lines_between(idle, r):
        events.append(line)
    assert events == ["warm 1", "job A", "warm 2", "job B", "warm 3"]
    os.close(r)

    r, w = os.pipe()
    os.write(w, b"job A\njob B\nexit")  # waiting from the start: no warm-up before any of them
    os.close(w)
    idle, events = [lambda: events.append("warm")], []
    for line in lines_between(idle, r):
        events.append(line)
    assert events == ["job A", "job B", "exit"] and len(idle) == 1
    os.close(r)


def test_an_idle_step_that_fails_is_skipped_and_the_lines_still_come():
    import os

    from workbench.worker import lines_between
    r, w = os.pipe()

    def broken():
        os.write(w, b"job\n")
        raise RuntimeError("a torch expression that fails at the warm-up's size")
    got = list(lines_between([broken, lambda: os.close(w)], r))
    assert got == ["job"]
    os.close(r)


def test_the_torch_warm_item_names_every_group_and_holds_no_comma():
    from workbench.worker import TORCH_WARM, _torch_warm_steps, torch_warm_item
    project = Project(ROOT)
    groups = [(f.name, p) for f in project.families() for p in f.precision_names() if f.torch_expression(p)]
    item = torch_warm_item(str(ROOT), groups)
    assert item.startswith(TORCH_WARM) and "," not in item
    assert len(_torch_warm_steps(item)) == len(groups) > 40
