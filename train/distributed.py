"""Many GPUs: `mpirun -np N workbench train ...`, MPI for set-up, NCCL for the gradients.

One process per GPU. Whether we run under MPI is read from the environment the launcher sets
(`launch_from_env`), so a single GPU never imports mpi4py. Under MPI (`MPIWorld`):

* rank r takes GPU (local rank) % (GPUs on the node), through CUDA_DEVICE, which PyCUDA's
  autoprimaryctx reads when the trainer first imports it: the device is chosen before any context
  exists, and cuBLAS and NCCL share that primary context;
* rank 0 makes an NCCL unique id, mpi4py broadcasts it, every rank joins the communicator
  (nccl4py's low-level bindings, on raw device pointers and PyCUDA stream handles);
* the program's collectives (model.py) run through `NcclComm.plan`: a Reduce records an event on
  the compute stream, the communication stream waits for it and sums that bucket of gradient
  slices (grouped between ncclGroupStart/End) while the backward goes on; the Join makes the
  compute stream wait for the communication stream before the update. Events and the second
  stream are legal inside stream capture (the waiting stream joins the capture), and so are NCCL
  calls, so the whole step, collectives included, is one CUDA graph;
* every wait is a watchdog: the host polls an event (or an MPI request) instead of blocking, checks
  NCCL's asynchronous error, and past --comm-timeout prints one line, aborts the communicator and
  calls MPI_Abort, which ends every rank. Blocking calls that cannot be polled (the NCCL set-up)
  run under a timer thread that does the same;
* stopping: SIGINT or SIGTERM while training (Ctrl-C; mpirun, interrupted, sends SIGTERM to every
  rank) asks the ranks to stop after the step they agree on, checkpoint and exit non-zero; a wait
  that then lasts over STOP_GRACE_S (a peer is gone: mpirun also sends SIGTERM when a rank dies)
  ends the rank with one line. During set-up SIGTERM ends the rank at once, with one line;
* output: a rank's stdout and stderr are pipes that mpirun drains, and mpirun stops draining while
  it ends a job (it sleeps between its SIGCONT, SIGTERM and SIGKILL): a rank that printed then
  would block in print() and could neither finish its step nor checkpoint. Under MPI both streams
  are `DetachedOutput`: writes go to a queue that a thread copies out, and never block;
* the end: the trainer first destroys its CUDA graphs (a graph that captured NCCL calls keeps the
  communicator alive, and ncclCommFinalize would wait for it forever), then every rank meets at a
  barrier and finalizes the communicator under a deadline (CLOSE_S).

`Local` is the single-process stand-in with the same interface: every collective is the identity.
"""

from __future__ import annotations

import atexit
import io
import os
import queue
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .errors import TrainError
from .model import AllGather, AllReduce, Join, Reduce, Slice

# (size, rank, local rank, processes on this host) as each launcher family sets them in its
# processes' environment.
LAUNCHERS = (
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),                 # MPICH, Intel MPI (Hydra)
    ("MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"),
)
POLL_S = 1e-4          # host polling interval while waiting for the GPU or MPI
CHECK_S = 0.05         # how often NCCL's asynchronous error is read while waiting
PHASES = 30            # rank 0's host-only phases (validation, sampling, saving) may take this many comm timeouts
SETUP_S = 1800.0       # compiling kernels and joining NCCL (first run: nvcc) may take this long
STOP_GRACE_S = 10.0    # after a stop was asked for, a step's wait may take this long before the rank gives up
CLOSE_S = 10.0         # finalizing the NCCL communicator at the end may take this long
DRAIN_S = 5.0          # at exit, what a rank printed may take this long to reach mpirun


@dataclass(frozen=True)
class Launch:
    """Where this process sits: world size, rank, rank on its node, and the variable that said so
    (None: not launched by MPI)."""
    world: int = 1
    rank: int = 0
    local_rank: int = 0
    launcher: str | None = None
    local_size: int | None = None  # processes on this host, where the launcher says


def launch_from_env(env=None, launchers=LAUNCHERS) -> Launch:
    """Where this process sits, from the first of `launchers` whose variables are set (the MPI
    families by default; the PyTorch baseline adds torchrun's)."""
    env = os.environ if env is None else env
    for size_var, rank_var, local_var, local_size_var in launchers:
        if size_var not in env:
            continue
        try:
            world, rank = int(env[size_var]), int(env.get(rank_var, "0"))
            local = int(env.get(local_var, rank))
            local_size = int(env[local_size_var]) if local_size_var in env else None
        except ValueError:
            raise TrainError(f"launcher environment: {size_var}={env[size_var]!r} {rank_var}={env.get(rank_var)!r} "
                             f"{local_var}={env.get(local_var)!r} are not integers") from None
        if world < 1 or not 0 <= rank < world or local < 0:
            raise TrainError(f"launcher environment: rank {rank} of {world}, local rank {local} ({rank_var}, "
                             f"{size_var}, {local_var}) is impossible")
        return Launch(world, rank, local, size_var, local_size)
    return Launch()


def connect(launch: Launch, comm_timeout: float):
    """The process group this run belongs to: Local without MPI, else MPIWorld."""
    return Local() if launch.launcher is None else MPIWorld(launch, comm_timeout)


class Local:
    """One process, one GPU: no MPI, no NCCL; every collective is the identity."""

    world, rank, is_root, under_mpi = 1, 0, True, False

    def select_device(self) -> None:
        """PyCUDA's default choice (CUDA_DEVICE, else the first usable GPU)."""

    def gpu_comm(self):
        return None

    def wait(self, stream, what: str) -> None:
        stream.synchronize()

    def wait_event(self, event, what: str) -> None:
        """Until the GPU has passed `event` (work enqueued after it may still run)."""
        event.synchronize()

    def total(self, values: list[float], what: str) -> list[float]:
        """The sum over the ranks of a few host numbers."""
        return [float(x) for x in values]

    def barrier(self, what: str) -> None:
        pass

    def stop_requested(self) -> None:
        """A signal asked the run to stop (the trainer stops after this step)."""

    def close(self) -> bool:
        return True


class DetachedOutput(io.TextIOBase):
    """A text stream whose writes never block the caller: a daemon thread copies them, in order,
    to the stream it replaces (see the module docstring). drain() waits, a bounded time, for what
    is queued to be written (at exit, and before a rank ends itself)."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.pending = 0  # writes queued and not yet written out, under lock
        self.idle = threading.Event()
        self.idle.set()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", "utf-8")

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def write(self, text: str) -> int:
        with self.lock:
            self.pending += 1
            self.idle.clear()
        self.queue.put(text)
        return len(text)

    def flush(self) -> None:
        """Never waits (rich flushes after every print); drain() does."""

    def drain(self, timeout: float) -> bool:
        return self.idle.wait(timeout)

    def _pump(self) -> None:
        while True:
            text = self.queue.get()
            try:
                self.stream.write(text)
                if self.queue.empty():
                    self.stream.flush()
            except (OSError, ValueError):  # the reader is gone: nothing more can be shown
                pass
            with self.lock:
                self.pending -= 1
                if self.pending == 0:
                    self.idle.set()


def detach_output() -> None:
    """Make sys.stdout and sys.stderr DetachedOutput (once), drained for up to DRAIN_S at exit."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, DetachedOutput):
            detached = DetachedOutput(stream)
            setattr(sys, name, detached)
            atexit.register(detached.drain, DRAIN_S)


def drain_output(timeout: float = 1.0) -> None:
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, DetachedOutput):
            stream.drain(timeout)


class MPIWorld:
    """This process as rank `rank` of `world` under mpirun (see the module docstring)."""

    under_mpi = True

    def __init__(self, launch: Launch, comm_timeout: float):
        try:
            from mpi4py import MPI
        except ImportError:
            raise TrainError(f"launched by MPI ({launch.launcher}={launch.world}) but mpi4py is not installed: "
                             "pip install mpi4py (against the MPI that runs mpirun)") from None
        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.world, self.rank = self.comm.Get_size(), self.comm.Get_rank()
        if (self.world, self.rank) != (launch.world, launch.rank):
            raise TrainError(f"MPI says rank {self.rank} of {self.world}, the environment ({launch.launcher}) "
                             f"rank {launch.rank} of {launch.world}: mpi4py is built against another MPI than mpirun's")
        self.is_root = self.rank == 0
        self.local_rank, self.local_size = launch.local_rank, launch.local_size
        self.timeout = comm_timeout
        self.nccl = self.nccl_comm = None
        self._event = None
        self._stop_at: float | None = None
        detach_output()
        signal.signal(signal.SIGTERM, self._on_sigterm)

    # -- the GPU -------------------------------------------------------------------------------
    def select_device(self) -> None:
        """GPU (local rank) % (GPUs on the node), set before PyCUDA creates its context."""
        import pycuda.driver as drv
        if "pycuda.autoprimaryctx" in sys.modules:
            raise TrainError("the CUDA context exists before this rank chose its GPU (pycuda.autoprimaryctx "
                             "was imported too early)")
        drv.init()
        count = drv.Device.count()
        if count == 0:
            raise TrainError(f"rank {self.rank}: no CUDA device")
        if count > 1 and self.local_size and self.local_size > count:  # (one visible GPU each: the launcher bound them)
            raise TrainError(f"{self.local_size} processes on this host share its {count} GPUs: run one process per "
                             f"GPU (mpirun -np N with N <= GPUs per host, or --map-by ppr:{count}:node across hosts)")
        self.device = self.local_rank % count
        os.environ["CUDA_DEVICE"] = str(self.device)

    def gpu_comm(self) -> "NcclComm":
        """The NCCL communicator over all ranks; call it once this rank's CUDA context exists."""
        try:
            from nccl.bindings import nccl
        except ImportError:
            raise TrainError("training on several GPUs needs nccl4py: pip install nccl4py") from None
        self.nccl = nccl
        with self.deadline(SETUP_S, "joining the NCCL communicator"):
            uid = nccl.get_unique_id() if self.is_root else None
            raw = self.comm.bcast(bytes(uid) if self.is_root else None, root=0)
            # comm_init_rank takes the id as a writable buffer (a UniqueId, a bytearray), not bytes
            uid = uid if self.is_root else nccl.UniqueId.from_buffer(bytearray(raw))
            handle = nccl.comm_init_rank(self.world, uid, self.rank)
        self.nccl_comm = handle if isinstance(handle, nccl.Comm) else nccl.Comm(handle)
        return NcclComm(nccl, self.nccl_comm, self.rank, self.world)

    # -- waiting, with a watchdog ----------------------------------------------------------------
    def wait(self, stream, what: str) -> None:
        if self._event is None:
            import pycuda.driver as drv
            self._event = drv.Event(drv.event_flags.DISABLE_TIMING)
        self._event.record(stream)
        self.wait_event(self._event, what)

    def wait_event(self, event, what: str) -> None:
        """Until the GPU has passed `event`, within the timeout (work enqueued after it may still run)."""
        self._poll(event.query, what, self.timeout, stoppable=True)

    def total(self, values: list[float], what: str) -> list[float]:
        send = np.asarray(values, dtype=np.float64)
        recv = np.empty_like(send)
        request = self.comm.Iallreduce(send, recv, op=self.MPI.SUM)
        self._poll(request.Test, what, self.timeout, stoppable=True)
        return recv.tolist()

    def stop_requested(self) -> None:
        if self._stop_at is None:
            self._stop_at = time.monotonic()

    def barrier(self, what: str) -> None:
        """Every rank waits here for the others, rank 0's host-only phases included."""
        self._poll(self.comm.Ibarrier().Test, what, PHASES * self.timeout)

    def _poll(self, done, what: str, timeout: float, stoppable: bool = False) -> None:
        start = time.monotonic()
        check_at = start
        while not done():
            now = time.monotonic()
            if now >= check_at:
                self._check_nccl(what)
                if now - start > timeout:
                    self.fail(f"waited {timeout:g} s for {what}: another rank has died or hangs; stopping every "
                              f"rank (raise --comm-timeout if this wait is legitimately longer)")
                if stoppable and self._stop_at is not None and now - max(start, self._stop_at) > STOP_GRACE_S:
                    self.fail(f"asked to stop, and {what} has waited {now - start:.0f} s: another rank has died "
                              f"(mpirun sends SIGTERM when one does); stopping")
                check_at = now + CHECK_S
            time.sleep(POLL_S)

    def _check_nccl(self, what: str) -> None:
        if self.nccl_comm is None:
            return
        err = int(self.nccl.comm_get_async_error(self.nccl_comm))
        if err not in (int(self.nccl.Result.Success), int(self.nccl.Result.InProgress)):
            self.fail(f"NCCL failed during {what}: {self.nccl.get_error_string(err)}")

    @contextmanager
    def deadline(self, seconds: float, what: str):
        """For a blocking call the host cannot poll: a timer thread fails the run past `seconds`."""
        timer = threading.Timer(seconds, self.fail, (f"{what} took over {seconds:g} s: another rank has died or "
                                                     "hangs; stopping every rank",))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    # -- failing and finishing -------------------------------------------------------------------
    def fail(self, message: str) -> None:
        """One line, then abort the communicator and the MPI job (every rank ends)."""
        sys.stderr.write(f"error: rank {self.rank}: {message}\n")
        drain_output()
        if self.nccl_comm is not None:  # ncclCommAbort may itself wait on a dead peer: not for long
            t = threading.Thread(target=self.nccl.comm_abort, args=(self.nccl_comm,), daemon=True)
            t.start()
            t.join(5.0)
        try:
            self.comm.Abort(1)
        finally:
            os._exit(1)

    def _on_sigterm(self, signum, frame) -> None:
        sys.stderr.write(f"error: rank {self.rank}: stopped by SIGTERM (mpirun ends every rank when one fails; "
                         f"see the first rank's error)\n")
        drain_output()
        os._exit(1)

    def close(self) -> bool:
        """After a run that ended on every rank and destroyed its CUDA graphs: finalize and free
        the communicator. False if that did not finish within CLOSE_S (the caller then ends the
        process without waiting for NCCL's threads)."""
        if self.nccl_comm is None:
            return True
        self.barrier("the end of the run")
        comm, nccl = self.nccl_comm, self.nccl
        self.nccl_comm = None  # the watchdog reads no more errors from it

        def finish():
            try:
                nccl.comm_finalize(comm)
                nccl.comm_destroy(comm)
            except Exception as e:  # noqa: BLE001 - the run is over; say so and go on
                sys.stderr.write(f"warning: rank {self.rank}: closing NCCL: {e}\n")
        closer = threading.Thread(target=finish, daemon=True)
        closer.start()
        closer.join(CLOSE_S)
        if closer.is_alive():
            sys.stderr.write(f"warning: rank {self.rank}: NCCL's communicator did not close within {CLOSE_S:g} s; "
                             "exiting without it\n")
            return False
        return True


class NcclComm:
    """The program's collectives (model.py) as NCCL calls on raw device pointers. Reduce and Join
    use a communication stream of their own; AllReduce and AllGather run on the compute stream."""

    def __init__(self, nccl, comm, rank: int, world: int):
        import pycuda.driver as drv
        self.drv, self.nccl, self.comm, self.rank, self.world = drv, nccl, comm, rank, world
        self.stream = drv.Stream()
        self.dtypes = {"f32": (nccl.DataType.Float32, 4), "bf16": (nccl.DataType.Bfloat16, 2),
                       "i32": (nccl.DataType.Int32, 4)}
        self.sum = int(nccl.RedOp.Sum)

    def _call(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # nccl4py raises NCCLError(status)
            raise TrainError(f"NCCL {fn.__name__} failed: {e}") from None

    def plan(self, item, ptr, dtypes):
        """A callable(stream) that enqueues `item`; ptr(Slice) is the slice's device address,
        dtypes maps buffer names to element types (the gradients' type is the reduction's)."""
        nccl, drv = self.nccl, self.drv
        if isinstance(item, Reduce):
            event = drv.Event(drv.event_flags.DISABLE_TIMING)
            pieces = [(ptr(s), s.elems, int(self.dtypes[dtypes[s.buffer]][0]), root) for s, root in item.pieces]

            def run(stream):
                event.record(stream)
                self.stream.wait_for_event(event)
                self._call(nccl.group_start)
                for p, n, dtype, root in pieces:
                    if root is None:
                        self._call(nccl.all_reduce, p, p, n, dtype, self.sum, self.comm, self.stream.handle)
                    else:
                        self._call(nccl.reduce, p, p, n, dtype, self.sum, root, self.comm, self.stream.handle)
                self._call(nccl.group_end)
            return run
        if isinstance(item, Join):
            event = drv.Event(drv.event_flags.DISABLE_TIMING)

            def run(stream):
                event.record(self.stream)
                stream.wait_for_event(event)
            return run
        if isinstance(item, AllReduce):
            p, n, dtype = ptr(item.ref), item.ref.elems, int(self.dtypes[dtypes[item.ref.buffer]][0])
            return lambda stream: self._call(nccl.all_reduce, p, p, n, dtype, self.sum, self.comm, stream.handle)
        if isinstance(item, AllGather):
            dtype = int(self.dtypes[dtypes[item.buffer]][0])
            base, mine = ptr(Slice(item.buffer, 0, 0)), ptr(Slice(item.buffer, self.rank * item.shard, item.shard))
            return lambda stream: self._call(nccl.all_gather, mine, base, item.shard, dtype, self.comm, stream.handle)
        raise TypeError(f"not a collective: {item!r}")
