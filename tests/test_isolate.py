"""isolate.Server on the CPU: children started ahead, one job each, in a process of its own. (The
jobs fail without a GPU, which is all this needs: each is answered by the child that ran it.)"""


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
