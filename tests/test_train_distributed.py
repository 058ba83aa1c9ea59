"""train/distributed.py without MPI, NCCL or a GPU: the launcher's environment, the NCCL calls each
collective of the program becomes (on fakes that record them), and the watchdog."""

from __future__ import annotations

import sys
import types

import pytest

from train.config import preset
from train.distributed import Launch, Local, MPIWorld, NcclComm, connect, launch_from_env
from train.errors import TrainError
from train.model import AllGather, AllReduce, Join, Program, Reduce


def test_no_mpi_variables_is_one_local_process():
    assert launch_from_env({}) == Launch() and isinstance(connect(Launch(), 60), Local)


@pytest.mark.parametrize("env, want", [
    ({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "2"}, (4, 2, 2)),
    ({"PMI_SIZE": "2", "PMI_RANK": "1"}, (2, 1, 1)),
    ({"MV2_COMM_WORLD_SIZE": "8", "MV2_COMM_WORLD_RANK": "5", "MV2_COMM_WORLD_LOCAL_RANK": "1"}, (8, 5, 1)),
    ({"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}, (1, 0, 0)),
])
def test_the_launchers_variables_give_world_rank_and_local_rank(env, want):
    launch = launch_from_env(env)
    assert (launch.world, launch.rank, launch.local_rank) == want and launch.launcher is not None


def test_impossible_mpi_variables_are_one_line():
    with pytest.raises(TrainError, match="rank 3 of 2"):
        launch_from_env({"PMI_SIZE": "2", "PMI_RANK": "3"})
    with pytest.raises(TrainError, match="not integers"):
        launch_from_env({"OMPI_COMM_WORLD_SIZE": "two"})


def test_local_collectives_are_the_identity():
    local = Local()
    assert local.total([1.5, 2.0], "x") == [1.5, 2.0] and local.gpu_comm() is None and local.is_root


# -- the NCCL calls, on fakes ---------------------------------------------------------------------------
class Log(list):
    def fn(self, name):
        def call(*args):
            self.append((name, *args))
        call.__name__ = name
        return call


@pytest.fixture
def fakes(monkeypatch):
    log = Log()

    class Stream:
        count = 0

        def __init__(self):
            Stream.count += 1
            self.handle = 0x1000 * Stream.count

        def wait_for_event(self, event):
            log.append(("wait", self.handle, event))

    class Event:
        def __init__(self, flags=0):
            pass

        def record(self, stream):
            log.append(("record", stream.handle, self))

    drv = types.SimpleNamespace(Stream=Stream, Event=Event, event_flags=types.SimpleNamespace(DISABLE_TIMING=2))
    pycuda = types.ModuleType("pycuda")
    pycuda.driver = drv
    monkeypatch.setitem(sys.modules, "pycuda", pycuda)
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)
    nccl = types.SimpleNamespace(
        DataType=types.SimpleNamespace(Float32=7, Bfloat16=9, Int32=2), RedOp=types.SimpleNamespace(Sum=0),
        **{name: log.fn(name) for name in ("group_start", "group_end", "all_reduce", "reduce", "all_gather")})
    return log, nccl, Stream


def planned(program, comm):
    base = {name: 0x10_0000 * (i + 1) for i, name in enumerate(program.buffers)}
    ptr = lambda s: base[s.buffer] + 4 * s.offset  # noqa: E731
    dtypes = {name: spec.dtype for name, spec in program.buffers.items()}
    return ptr, {id(i): comm.plan(i, ptr, dtypes) for i in program.reduced_backward + program.update
                 if isinstance(i, (Reduce, Join, AllReduce, AllGather))}


def test_a_reduce_forks_to_the_comm_stream_and_groups_its_all_reduces(fakes):
    log, nccl, Stream = fakes
    program = Program(preset("tiny"), 2, 8, world=2, rank=0, bucket_elems=5_000)
    comm = NcclComm(nccl, "COMM", 0, 2)
    ptr, plans = planned(program, comm)
    compute = Stream()
    reduce = next(i for i in program.reduced_backward if isinstance(i, Reduce))
    plans[id(reduce)](compute)
    (_, on, event), (_, waiter, same), start, *calls, end = log
    assert (on, waiter, same) == (compute.handle, comm.stream.handle, event)
    assert start == ("group_start",) and end == ("group_end",)
    assert calls == [("all_reduce", ptr(s), ptr(s), s.elems, 7, 0, "COMM", comm.stream.handle) for s, _ in reduce.pieces]
    log.clear()
    plans[id(program.reduced_backward[-1])](compute)  # the Join: compute waits for the comm stream
    (_, on, event), (_, waiter, same) = log
    assert (on, waiter, same) == (comm.stream.handle, compute.handle, event)


def test_zero_1_reduces_each_piece_to_its_owner_and_gathers_in_place(fakes):
    log, nccl, Stream = fakes
    program = Program(preset("tiny"), 2, 8, world=2, rank=1, zero=1, bucket_elems=5_000)
    comm = NcclComm(nccl, "COMM", 1, 2)
    ptr, plans = planned(program, comm)
    compute = Stream()
    for item in program.reduced_backward:
        if isinstance(item, Reduce):
            plans[id(item)](compute)
    reduces = [c for c in log if c[0] == "reduce"]
    assert {c[6] for c in reduces} == {0, 1} and all(c[7] == "COMM" for c in reduces)
    log.clear()
    for item in program.update:
        if id(item) in plans:
            plans[id(item)](compute)
    norm, gather = log
    assert norm[0] == "all_reduce" and norm[3] == 1 and norm[-1] == compute.handle
    S, base = program.shard_elems, ptr(program.at("params"))
    assert gather == ("all_gather", base + 4 * S, base, S, 7, "COMM", compute.handle)


# -- the watchdog ---------------------------------------------------------------------------------------
class Failed(Exception):
    pass


def a_rank(nccl=None, comm=None) -> MPIWorld:
    world = MPIWorld.__new__(MPIWorld)  # no MPI here: the attributes _poll reads
    world.rank, world.timeout, world.nccl, world.nccl_comm = 1, 0.05, nccl, comm
    world._stop_at = None

    def fail(message):
        raise Failed(message)
    world.fail = fail
    return world


def test_a_wait_past_the_timeout_stops_the_run_with_one_line():
    with pytest.raises(Failed, match="waited 0.05 s for step 3: another rank has died or hangs"):
        a_rank()._poll(lambda: False, "step 3", 0.05)


def test_an_nccl_error_stops_the_run_at_once():
    nccl = types.SimpleNamespace(Result=types.SimpleNamespace(Success=0, InProgress=7),
                                 comm_get_async_error=lambda comm: 6, get_error_string=lambda e: "remote process exited")
    with pytest.raises(Failed, match="NCCL failed during step 3: remote process exited"):
        a_rank(nccl, "COMM")._poll(lambda: False, "step 3", 100)


def test_a_wait_that_ends_in_time_returns():
    ticks = iter([False, False, True])
    a_rank()._poll(lambda: next(ticks), "step 1", 10)


def test_after_a_stop_request_a_step_that_does_not_end_gives_up_within_the_grace(monkeypatch):
    """mpirun sends SIGTERM to the others when a rank dies: a step waiting on the dead peer must
    not wait out the whole --comm-timeout."""
    import time
    import train.distributed as distributed
    monkeypatch.setattr(distributed, "STOP_GRACE_S", 0.05)
    rank = a_rank()
    rank.stop_requested()
    t0 = time.monotonic()
    with pytest.raises(Failed, match="asked to stop, and step 9 has waited"):
        rank._poll(lambda: False, "step 9", 100, stoppable=True)
    assert time.monotonic() - t0 < 5
    ticks = iter([False, True])  # a wait that is not stoppable (a barrier) keeps its own timeout
    rank._poll(lambda: next(ticks), "a checkpoint's barrier", 100)


class FakeMPI:
    def Ibarrier(self):
        return types.SimpleNamespace(Test=lambda: True)


def test_close_finalizes_and_frees_the_communicator_after_a_barrier():
    calls = []
    nccl = types.SimpleNamespace(comm_finalize=lambda c: calls.append(("finalize", c)),
                                 comm_destroy=lambda c: calls.append(("destroy", c)))
    rank = a_rank(nccl, "COMM")
    rank.comm, rank.timeout = FakeMPI(), 5
    assert rank.close() is True and calls == [("finalize", "COMM"), ("destroy", "COMM")] and rank.nccl_comm is None
    assert rank.close() is True  # twice: nothing more


def test_a_finalize_that_never_returns_is_left_behind_with_a_warning(monkeypatch, capsys):
    import threading
    import train.distributed as distributed
    monkeypatch.setattr(distributed, "CLOSE_S", 0.1)
    stuck = threading.Event()
    nccl = types.SimpleNamespace(comm_finalize=lambda c: stuck.wait(30), comm_destroy=lambda c: None)
    rank = a_rank(nccl, "COMM")
    rank.comm, rank.timeout = FakeMPI(), 5
    assert rank.close() is False
    stuck.set()
    assert "did not close within 0.1 s" in capsys.readouterr().err


def test_the_processes_per_host_come_from_the_launcher_where_it_says():
    env = {"OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
    assert launch_from_env(env).local_size == 4
    assert launch_from_env({"PMI_SIZE": "2", "PMI_RANK": "1"}).local_size is None


def test_detached_output_never_blocks_and_keeps_the_order():
    """mpirun stops reading a rank's output while it ends the job: print() must still return."""
    import threading
    from train.distributed import DetachedOutput

    class Stuck:
        def __init__(self):
            self.go, self.text = threading.Event(), []

        def write(self, text):
            self.go.wait(30)
            self.text.append(text)

        def flush(self):
            pass

    real = Stuck()
    out = DetachedOutput(real)
    for i in range(1000):
        print(f"step {i}", file=out)  # returns at once although the stream blocks
    out.flush()
    assert out.drain(0.05) is False
    real.go.set()
    assert out.drain(10) is True
    assert "".join(real.text) == "".join(f"step {i}\n" for i in range(1000))
