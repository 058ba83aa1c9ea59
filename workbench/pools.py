"""The bench session's background process pools (the reference cases in cases.py, the compiles
in compiles.py): started from a fork server, niced below the processes that drive the GPU, and
stopped by killing their workers rather than waiting for them."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

# The pools' workers start from a fork server, not a fork of this process: a fork would copy our
# threads' locks mid-use and the write ends of the version children's stdin pipes (which then
# never see their end of file).
POOL_START = multiprocessing.get_context("forkserver")


# Each worker's BLAS and OpenMP run on one thread. By default every worker's OpenBLAS starts a
# thread per core: the 8 reference workers' matmuls put up to 50-90 runnable threads on the H100
# host's 16 cores (vmstat during a bench --all), and the processes driving the GPU waited for a
# core (one thread each took that bench from 170 to 162 s).
ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _start_worker(niceness: int) -> None:
    """A pool worker's start, before its first task imports numpy (the fork server preloads
    nothing under `python -m`): niced, one BLAS thread."""
    os.nice(niceness)
    for name in ONE_THREAD:
        os.environ[name] = "1"


def niced_pool(workers: int, niceness: int) -> ProcessPoolExecutor:
    """A pool of `workers` processes from the fork server, each niced by `niceness` as it starts
    and limited to one BLAS thread."""
    return ProcessPoolExecutor(max_workers=workers, initializer=_start_worker, initargs=(niceness,),
                               mp_context=POOL_START)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a background pool now: queued work is cancelled and work under way is killed, not
    waited for. A session closed early (a bench stopped, a test run of a few families) would
    otherwise wait for the references and compiles it had started for families it will never
    reach: minutes, on the H100's host, for a GPU test run of two families. Nothing is lost: case
    files live in the session's own folder, deleted next, and the compile cache is written by
    rename."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public kill before 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.kill()
    for process in processes:
        process.join(timeout=10)
