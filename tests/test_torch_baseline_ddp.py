"""The PyTorch baseline as a multi-process (DDP) baseline, on the CPU with gloo and the tiny model:
two ranks of B=2 take the same tokens as one process of B=4 and give the same losses; gradient
accumulation over micro-steps too; a --total-batch that does not divide is one line."""

import importlib.util
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

TIMEOUT_S = 300
LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
               "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
T = 32


@pytest.fixture(scope="module")
def tokens(tmp_path_factory):
    from train.formats import write_tokens

    path = tmp_path_factory.mktemp("tokens") / "train.bin"
    # 700 tokens: 5 global batches of 128, so 6 steps of 128 wrap round; 2 of 256 and then a wrap
    write_tokens(path, np.random.default_rng(7).integers(0, 50257, 700))
    return path


def base_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(extra)
    return env


def command(tokens, out, B, steps, *more) -> list[str]:
    return [sys.executable, "-m", "train.torch_baseline", "-i", str(tokens), "--device", "cpu", "--init", "tiny",
            "-b", str(B), "-t", str(T), "--steps", str(steps), "--json", str(out), *more]


def wait_all(procs) -> list[tuple[int, str, str]]:
    """Each process's (exit code, stdout, stderr); all are killed when one runs past the timeout."""
    results = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=TIMEOUT_S)
            results.append((p.returncode, stdout, stderr))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        for p in procs:
            p.communicate()
        pytest.fail(f"the torch baseline ran past {TIMEOUT_S} s")
    return results


def run_one(tokens, out, B, steps, *more) -> dict:
    p = subprocess.Popen(command(tokens, out, B, steps, *more), cwd=ROOT, env=base_env(), text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    [(rc, stdout, stderr)] = wait_all([p])
    assert rc == 0, stdout + stderr
    return json.loads(out.read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(tokens, out, world, B, steps, *more) -> dict:
    port = free_port()
    procs = [subprocess.Popen(command(tokens, out, B, steps, *more), cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=base_env(WORLD_SIZE=str(world), RANK=str(r), LOCAL_RANK=str(r),
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1"))
             for r in range(world)]
    results = wait_all(procs)
    for r, (rc, stdout, stderr) in enumerate(results):
        assert rc == 0, f"rank {r}: exit {rc}\n{stdout}{stderr}"
    summary = [line for line in results[0][1].splitlines() if line.startswith("torch baseline")]
    assert len(summary) == 1 and f"DDP over {world} CPU processes" in summary[0], results[0][1]
    assert not any(line.startswith("torch") for line in results[1][1].splitlines()), "only rank 0 prints"
    return json.loads(out.read_text())


@needs_torch
@pytest.mark.slow  # torch processes, seconds each
def test_two_ranks_equal_one_process_of_the_same_total_batch(tokens, tmp_path):
    one = run_one(tokens, tmp_path / "one.json", 4, 3)
    two = run_ranks(tokens, tmp_path / "two.json", 2, 2, 3)
    assert (two["world"], two["micro_steps"], two["total_batch"]) == (2, 1, 4 * T)
    assert (one["world"], one["micro_steps"], one["total_batch"]) == (1, 1, 4 * T)
    assert len(two["losses"]) == 3
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-4)


@needs_torch
@pytest.mark.slow  # torch processes, seconds each
def test_micro_steps_equal_one_big_batch(tokens, tmp_path):
    # 6 steps: the last wraps round the 5 global batches of the file
    big = run_one(tokens, tmp_path / "big.json", 4, 6)
    acc = run_one(tokens, tmp_path / "acc.json", 2, 6, "--total-batch", str(4 * T))
    assert acc["micro_steps"] == 2 and acc["total_batch"] == 4 * T
    np.testing.assert_allclose(acc["losses"], big["losses"], rtol=1e-4)
    assert big["losses"][5] != big["losses"][0]  # the wrapped step sees batch 0 again, on trained weights


@needs_torch
@pytest.mark.slow  # torch processes, seconds each
def test_two_ranks_with_micro_steps_equal_one_process(tokens, tmp_path):
    one = run_one(tokens, tmp_path / "one.json", 8, 2)
    two = run_ranks(tokens, tmp_path / "two.json", 2, 2, 2, "--total-batch", str(8 * T))
    assert (two["world"], two["micro_steps"]) == (2, 2)
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-4)


@needs_torch
def test_a_total_batch_that_does_not_divide_is_one_line(tokens, tmp_path):
    p = subprocess.run(command(tokens, tmp_path / "x.json", 2, 3, "--total-batch", "100"), cwd=ROOT,
                       env=base_env(), text=True, capture_output=True, timeout=TIMEOUT_S)
    assert p.returncode != 0
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "--total-batch" in lines[0] and "64" in lines[0], p.stderr
    assert not (tmp_path / "x.json").exists()


def test_each_rank_takes_its_windows_of_the_global_batch(tmp_path):
    """No torch needed: window w = micro * world + rank of global batch s starts at token
    s * total + w * B*T (the trainer's window((s, micro, rank)) * B*T), wrapping by whole global
    batches."""
    from train.formats import write_tokens
    from train.torch_baseline import GlobalBatches

    path = tmp_path / "t.bin"
    write_tokens(path, np.arange(1000))
    B, T_, world, total = 2, 4, 2, 32  # 2 micro-steps of 2 ranks; 999 // 32 = 31 global batches
    for rank in range(world):
        data = GlobalBatches(str(path), B, T_, total, world, rank)
        assert (data.micro_steps, data.data.per_epoch) == (2, 31)
        x = np.empty((2, B * T_), np.int32)
        y = np.empty_like(x)
        for step in (0, 1, 30, 31, 33):
            data.load(step, x, y)
            for micro in range(2):
                start = (step % 31) * total + (micro * world + rank) * B * T_
                assert start == ((step % 31) * 2 + micro) * world * B * T_ + rank * B * T_
                np.testing.assert_array_equal(x[micro], np.arange(start, start + B * T_))
                np.testing.assert_array_equal(y[micro], np.arange(start + 1, start + B * T_ + 1))
