"""The encoder_forward family's later versions, without a GPU. Each runs on the CPU SIMT emulator
(tests/gpu_emu) as its header's [[emulate]] tables say (tests/test_emulator.py: every family test
size it takes and sizes that reach its corners, every block size, both schedulers, seeds 0-2,
and for the persistent and ring versions one multiprocessor as well as 132). Here:

* 6 (fp32) and 7 (bf16), the memory-bound versions built to close the last few percent to a
  copy's speed: the trainer's sizes accepted (C = 768..1600, T <= 1024, B <= 32), and the launch
  shape their lesson rests on: at the default sizes the grid is one resident wave (the blocks fit
  in the threads an SM that the kernel's __launch_bounds__ guarantee), and version 7 gives each
  warp the two rows the header says;
* 8 (fp32): a thread per float4 column of a position, for a group of up to eight sequences: the
  trainer's sizes accepted, block sizes within the kernel's __launch_bounds__, one thread per
  (position, group of 8 sequences, float4 column), so at the default B = 8 every thread moves the
  whole batch of its column;
* 10 (fp32) and 11 (bf16): version 3's and 5's grids with the ids asked of L2 at the start and
  the wpe load issued before the token; 12 (fp32): version 10 with two float4 a thread, a grid's
  width apart; 13 (fp32) and 14 (bf16): the rows gathered into a ring of tiles in shared memory
  (kernels/common/encoder_forward_bulk.cuh): the preconditions keep the ring inside a block's
  shared memory;
* tokens outside the vocabulary give NaN rows, and only there (versions 6-8 and 10-14).

Its NumPy reference (at the end): against PyTorch's embedding in float64 at odd sizes; each token
gets its position's row. The tests that call PyTorch skip themselves where it is not installed.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import memory_bound
from references.encoder_forward import encoder_forward
from workbench import expr
from workbench.check import from_storage, make_case
from workbench.family import Project

from conftest import ROOT
from references_helpers import F, needs_torch, random_tokens, torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402


PROJECT = Project(ROOT)
MEMORY_BOUND = {6: "fp32", 7: "bf16"}
VERSIONS = {10: "fp32", 11: "bf16", 12: "fp32", 13: "fp32", 14: "bf16"}
RING = (13, 14)
SHARED_PER_BLOCK = 232448  # an H100's (and the most any GPU gives a block)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def version(number):
    return PROJECT.family("encoder_forward").version(number)


def launch_names(v, sizes, sms=132):
    env = {**v.family.env(sizes, v.block_sizes[0]), "SMS": sms}
    for name, text in v.derived.items():
        env[name] = expr.evaluate(text, env)
    return env


@pytest.fixture
def emulate(monkeypatch):
    def run(v, sizes, sms, **kw):
        monkeypatch.setattr(runner, "SMS", sms)
        return runner.emulate(v, sizes, **kw)
    return run


# ---- 6 and 7: memory-bound ----------------------------------------------------------------------
@pytest.mark.parametrize("number", sorted(MEMORY_BOUND))
def test_the_memory_bound_headers(number):
    v = version(number)
    assert v.precision == MEMORY_BOUND[number] and v.deterministic
    memory_bound.assert_takes_the_trainers_sizes(v)


@pytest.mark.parametrize("number", sorted(MEMORY_BOUND))
def test_at_the_default_sizes_the_grid_is_one_resident_wave(number):
    memory_bound.assert_one_resident_wave(version(number))


def test_at_the_default_sizes_version_7_gives_every_warp_exactly_two_rows():
    memory_bound.assert_every_warp_gets_two_rows(version(7))


# ---- 8 ------------------------------------------------------------------------------------------
def test_version_8s_header():
    v = version(8)
    assert v.precision == "fp32" and v.deterministic
    for C in (768, 1024, 1280, 1600):
        for B, T in ((1, 1), (4, 1024), (8, 1024), (32, 1024), (5, 77)):
            assert not v.unmet({"B": B, "T": T, "C": C, "V": 50257}), (C, B, T)
    assert v.unmet({"B": 2, "T": 3, "C": 37, "V": 5})  # C % 4 != 0 is refused, not mishandled


def test_version_8s_block_sizes_are_within_the_launch_bounds():
    v = version(8)
    max_threads, min_blocks = memory_bound.bounds(v.path.read_text())["encoder_forward8"]
    assert max(v.block_sizes) <= max_threads
    # the header's 1280 threads an SM (48 registers): every listed block size fills them, in at
    # most 32 blocks an SM
    assert max_threads * min_blocks == 1280
    assert all(1280 % bs == 0 and 1280 // bs <= 32 for bs in v.block_sizes)


def test_the_grid_has_a_thread_per_position_group_and_column():
    v = version(8)
    for sizes in [v.family.default_sizes, {"B": 32, "T": 1024, "C": 768, "V": 50257},
                  {"B": 13, "T": 33, "C": 784, "V": 100}]:
        threads = -(-sizes["B"] // 8) * sizes["T"] * sizes["C"] // 4
        for bs in v.block_sizes:
            env = v.family.env(sizes, bs)
            env["SMS"] = 132
            (step,) = v.steps
            grid = expr.evaluate_int(step.grid[0], env, "grid")
            assert (grid - 1) * bs < threads <= grid * bs, (sizes, bs)
    # at the default sizes one group holds the whole batch: wpe is read once per column
    assert v.family.default_sizes["B"] == 8


# ---- 10 to 14 ------------------------------------------------------------------------------------
def test_the_headers():
    for number, precision in VERSIONS.items():
        v = version(number)
        assert v.precision == precision and v.deterministic
    emulated = {(n, v.family.format_sizes(s)) for n in VERSIONS for s, _ in runner.cases(version(n))}
    assert len(emulated) >= 25


@pytest.mark.parametrize("number", RING)
def test_the_preconditions_keep_the_ring_inside_a_blocks_shared_memory(number):
    """The widest rows the preconditions allow still fit (a launch asking for more fails with
    'invalid argument' on the GPU), and the ring always has two stages or more (the emulator's
    path relies on a barrier between filling a stage and reading it)."""
    v = version(number)
    per = 4 if v.precision == "fp32" else 2
    widest = max(c for c in range(8, 65536, 8) if not v.unmet({"B": 1, "T": 1, "C": c, "V": 2}))
    for c in (widest, widest // 2, 768, 64, 8):
        env = launch_names(v, {"B": 1, "T": 1, "C": c, "V": 2})
        assert env["S"] >= 2 and 1 <= env["R"] <= 32
        assert env["shared_bytes"] <= SHARED_PER_BLOCK, (c, env["shared_bytes"])
        assert env["shared_bytes"] >= env["S"] * env["R"] * c * per  # the wte rows at least
    assert v.unmet({"B": 1, "T": 1, "C": widest + 8, "V": 2})


# ---- tokens outside the vocabulary ---------------------------------------------------------------
@needs_gxx
def test_version_8_tokens_outside_the_vocabulary_give_nan_rows():
    v = version(8)
    sizes = {"B": 13, "T": 33, "C": 784, "V": 100}  # groups of 8 and 5
    T, C, V = sizes["T"], sizes["C"], sizes["V"]
    case = make_case(v.family, sizes, 0, v.precision)
    tokens = case.inputs["inp"].reshape(-1)
    # first and last of the full group, last of the partial one, and two in one column (t = 1)
    bad = [0 * T + 0, 7 * T + 1, 12 * T + 1, 9 * T + 32, 3 * T + 1]
    tokens[bad] = [-1, V, 1 << 30, -7, -(1 << 31)]
    good = np.setdiff1d(np.arange(tokens.size), bad)
    got = {}
    runner.emulate(v, sizes, seed=0, block_size=v.block_sizes[0], case=case, outputs=got)
    out = np.asarray(got["out"], dtype=np.float64).reshape(tokens.size, C)
    assert np.isnan(out[bad]).all()
    wte = case.inputs["wte"].astype(np.float64).reshape(V, C)
    wpe = case.inputs["wpe"].astype(np.float64).reshape(T, C)
    want = wte[tokens[good]] + wpe[good % T]
    assert np.all(np.abs(out[good] - want) <= 1e-5 + 1e-5 * np.abs(want))


@needs_gxx
@pytest.mark.parametrize("number", [6, 7, 10, 11, 12, 13, 14])  # 10-12 load wpe before the token is known; 13-14 skip the bad rows' copies
def test_tokens_outside_the_vocabulary_give_nan_rows(emulate, number):
    v = version(number)
    sizes = {"B": 3, "T": 33, "C": 784, "V": 100}
    case = make_case(v.family, sizes, 0, v.precision)
    tokens = case.inputs["inp"].reshape(-1)
    bad = [0, 34, 40, 98]  # both rows of a pair (t = 1), and the unpaired third sequence
    tokens[bad] = [-1, 100, 1 << 30, -7]
    good = np.setdiff1d(np.arange(tokens.size), bad)
    got = {}
    emulate(v, sizes, 1, seed=0, block_size=v.block_sizes[0], case=case, outputs=got)
    out = np.asarray(got["out"], dtype=np.float64).reshape(tokens.size, sizes["C"])
    assert np.isnan(out[bad]).all()
    dtype = "f32" if v.precision == "fp32" else "bf16"
    wte = from_storage(case.inputs["wte"], dtype).astype(np.float64).reshape(sizes["V"], sizes["C"])
    wpe = from_storage(case.inputs["wpe"], dtype).astype(np.float64).reshape(sizes["T"], sizes["C"])
    want = wte[tokens[good]] + wpe[good % sizes["T"]]
    tol = 1e-5 if v.precision == "fp32" else 1e-2
    assert np.all(np.abs(out[good] - want) <= tol + tol * np.abs(want))


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("B, T, C, V", [(1, 1, 1, 1), (2, 3, 37, 5), (3, 5, 36, 2), (1, 7, 1600, 11)])
def test_encoder_forward_matches_torch_embedding(B, T, C, V):
    rng = np.random.default_rng(0)
    inp, wte, wpe = random_tokens(rng, B, T, V), rng.normal(size=(V, C)), rng.normal(size=(T, C))
    out = encoder_forward(inp, wte, wpe)["out"]
    want = F.embedding(torch.from_numpy(inp), torch.from_numpy(wte)) + torch.from_numpy(wpe)
    np.testing.assert_array_equal(out, want.numpy())


def test_encoder_forward_uses_the_position_of_each_token():
    wte = np.zeros((3, 2))
    wpe = np.array([[1.0, 2.0], [10.0, 20.0]])
    out = encoder_forward(np.array([[2, 2]]), wte, wpe)["out"]
    np.testing.assert_array_equal(out[0], wpe)
