"""isolate.Server on the CPU: children started ahead, one job each, in a process of its own. (The
jobs fail without a GPU, which is all this needs: each is answered by the child that ran it.)"""


import pytest

from workbench.isolate import Server


def test_each_job_gets_a_fresh_child_and_two_wait_started_ahead():
    server = Server(jobs_per_child=1, standby=2)
    try:
        pids = []
        for _ in range(4):
            res = server.run({"job": "probe", "root": "."}, timeout=120)
            assert res.get("pid"), res
            pids.append(res["pid"])
            assert len(server._ahead) == 2, "two children wait, started, for the next jobs"
        assert len(set(pids)) == 4, "no child runs two jobs"
        # the children started ahead are the ones that take the next jobs
        waiting = {p.pid for p in server._ahead}
        assert server.run({"job": "probe", "root": "."}, timeout=120)["pid"] in waiting
    finally:
        server.close()
    assert server._ahead == [] and server.proc is None


def test_started_ahead_means_before_the_first_job():
    server = Server(jobs_per_child=1, standby=2).start()
    try:
        assert server.proc is not None and len(server._ahead) == 2
    finally:
        server.close()


def test_a_long_lived_child_answers_every_job_itself():
    server = Server()
    try:
        pids = {server.run({"job": "probe", "root": "."}, timeout=120)["pid"] for _ in range(3)}
        assert len(pids) == 1
    finally:
        server.close()


def test_a_jobs_hand_offs_are_timed_on_both_sides():
    import time
    from workbench.ledger import hand_offs
    from workbench.results import Row
    server = Server(jobs_per_child=1)  # none started ahead: this job waits for its child's start
    try:
        res = server.run({"job": "probe", "root": "."}, timeout=120)
    finally:
        server.close()
    clock = res["clock"]
    assert clock["sent"] <= res["began"] <= res["ended"] <= clock["answered"] <= clock["exited"] <= time.monotonic()
    row = Row("version", "f", 1)
    row.phases = {"check": (res["ended"] - res["began"]) / 2}
    parts = hand_offs(res, [row])
    assert set(parts) == {"child start", "job set-up", "child exit"}
    assert parts["child start"] > 0.01, "an interpreter's start is not free"
    assert abs(parts["job set-up"] - row.phases["check"]) < 1e-6
    assert hand_offs({**res, "clock": None}, [row]) == {}


def test_finished_children_linger_idle_until_released_together():
    server = Server(jobs_per_child=1, standby=1, linger=3)
    try:
        pids = []
        for n in (1, 2):
            pids.append(server.run({"job": "probe", "root": "."}, timeout=120)["pid"])
            assert len(server._lingering) == n
        kept = list(server._lingering)
        assert all(p.poll() is None for p in kept), "a lingering child is alive, its job answered"
        server.run({"job": "probe", "root": "."}, timeout=120)
        assert server._lingering == [], "the third let all three go"
        assert all(p.poll() is not None for p in kept)
        server.run({"job": "probe", "root": "."}, timeout=120)
        kept = list(server._lingering)
        server.release()
        assert server._lingering == [] and all(p.poll() is not None for p in kept)
    finally:
        server.close()


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # the fork is the point
def test_a_child_is_let_go_though_a_process_forked_later_holds_its_stdin():
    """The bench's pools fork after its version children start: each fork holds a copy of the
    write end of their stdin pipes, so closing ours alone never reaches them (the H100 bench hung
    in release). The 'exit' line does."""
    import multiprocessing
    import threading
    import time
    server = Server(jobs_per_child=1, standby=1, linger=5)
    holder = None
    try:
        server.run({"job": "probe", "root": "."}, timeout=120)
        holder = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
        holder.start()
        kept = list(server._lingering)
        released = threading.Thread(target=server.release, daemon=True)
        released.start()
        released.join(timeout=30)
        assert not released.is_alive(), "release hung"
        assert all(p.poll() is not None for p in kept)
        ahead = list(server._ahead)
        t0 = time.monotonic()
        server.close()  # the child started ahead, never given a job, ends too (no 10 s wait, no kill)
        assert time.monotonic() - t0 < 8 and all(p.returncode == 0 for p in ahead)
    finally:
        if holder is not None:
            holder.kill()
        server.close()


def test_children_let_go_without_waiting_have_ended_before_the_next_job_starts():
    server = Server(jobs_per_child=1, linger=5)
    try:
        server.run({"job": "probe", "root": "."}, timeout=120)
        kept = list(server._lingering)
        server.release(wait=False)
        assert server._lingering == [] and server._leaving == kept
        res = server.run({"job": "probe", "root": "."}, timeout=120)
        assert server._leaving == [] and all(p.poll() is not None for p in kept)
        assert res["clock"]["sent"] >= 0
    finally:
        server.close()


def test_a_long_lived_child_says_it_is_ready_and_that_line_is_no_jobs_answer():
    """worker.serve writes "ready" once its preloads are done; heard() reads it without waiting
    (False until then, and before any child is started), and a job's answer is still its own."""
    import time
    server = Server()
    assert server.heard("ready") is False, "no child yet"
    server.start()
    try:
        deadline = time.monotonic() + 120
        while not server.heard("ready"):
            assert time.monotonic() < deadline, "never said ready"
            time.sleep(0.05)
        res = server.run({"job": "probe", "root": "."}, timeout=120)
        assert res.get("pid") == server.proc.pid and res.get("status") not in (None, "started"), res
        assert server.heard("ready") and not server.heard("done")
    finally:
        server.close()


def test_closing_without_waiting_survives_a_folder_a_child_still_writes_into(monkeypatch):
    """close(wait=False) does not wait for the children's exits: one may still be writing into its
    job folder when the server removes its temporary folder. That must not end the session (a
    `workbench run` whose work was done) with a traceback; seen on an H200 as 'Directory not empty'."""
    import errno
    import os
    from pathlib import Path
    server = Server()
    busy = Path(server._tmp.name) / "2"
    busy.mkdir()
    (busy / "result").write_text("late")
    real_rmdir = os.rmdir

    def rmdir(path, *args, **kwargs):
        if str(path) == "2":  # shutil removes entries relative to their parent's descriptor
            raise OSError(errno.ENOTEMPTY, "Directory not empty", "2")
        return real_rmdir(path, *args, **kwargs)
    monkeypatch.setattr(os, "rmdir", rmdir)
    server.close(wait=False)  # raised OSError before
