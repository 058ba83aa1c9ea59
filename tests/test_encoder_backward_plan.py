"""encoder_backward's plan made on the host (references/encoder_backward.py) and version 12, which
follows it, without a GPU.

* the plan: every position's row is added exactly once (NumPy executes the plan and matches the
  reference), at every test size, with skewed batches (a token holding most of a batch: long groups
  split into segments) and with the edge cases of the encoding (pairs, groups of 3, of exactly
  SEGMENT and SEGMENT + 1 positions); its size stays within the contract's bound; it is fast
  enough to make once per micro-step;
* version 12 on the CPU SIMT emulator (tests/gpu_emu): every output element within tolerance at
  every test size, several seeds, block sizes and block orders (a long group's last segment is
  then a different block's); the same bits whatever the order (deterministic); the plan's tickets
  back at zero after the launch.
The 16-byte bf16x2 reduction it issues on sm_90 is checked on the GPU (tests/test_gpu.py).
"""

import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from references.encoder_backward import (SEGMENT, apply_plan, encoder_backward, encoder_backward_plan,
                                         partial_slots, plan_words)
from workbench import expr
from workbench.check import Case, make_inputs, run_reference
from workbench.family import Project

from conftest import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

FAMILY = Project(ROOT).family("encoder_backward")
PLANNED = 12
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def random_case(rng, B, T, C, V, tokens=None):
    inp = rng.integers(0, V, (B, T)) if tokens is None else np.asarray(tokens).reshape(B, T)
    return (rng.normal(size=(V, C)), rng.normal(size=(T, C)), rng.normal(size=(B, T, C)), inp)


def check_plan(dwte, dwpe, dout, inp):
    C = dout.shape[-1]
    role, plan = encoder_backward_plan(inp, C)
    N = inp.size
    assert role.shape == (N,) and plan.size == plan_words(N, C)
    got_te, got_pe = apply_plan(dwte, dwpe, dout, inp, role, plan)
    want = encoder_backward(dwte, dwpe, dout, inp)
    np.testing.assert_allclose(got_te, want["dwte"], atol=1e-9)
    np.testing.assert_allclose(got_pe, want["dwpe"], atol=1e-9)
    return role, plan


@pytest.mark.parametrize("sizes", FAMILY.test_sizes, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_the_plan_adds_every_row_once(sizes):
    rng = np.random.default_rng(3)
    check_plan(*random_case(rng, sizes["B"], sizes["T"], sizes["C"], sizes["V"]))


@pytest.mark.parametrize("k", [1, 2, 3, SEGMENT, SEGMENT + 1, 2 * SEGMENT + 1, 200])
def test_groups_of_every_kind(k):
    """A group of k positions among lone ones: its leader's role says pair, segment or long group."""
    B, T, C, V = 2, 128, 16, 50257
    rng = np.random.default_rng(k)
    tokens = 1000 + np.arange(B * T)  # all distinct
    where = rng.choice(B * T, size=k, replace=False)
    tokens[where] = 7
    role, plan = check_plan(*random_case(rng, B, T, C, V, tokens))
    N = B * T
    first = np.sort(where)[0]
    assert (role == -1).sum() == (N - k if k > 1 else N)
    if k == 1:
        assert role[first] == -1
    elif k == 2:
        assert role[first] == np.sort(where)[1]
    else:
        segments = -(-k // SEGMENT)
        leaders = np.flatnonzero(role >= N)
        assert len(leaders) == segments and first in leaders
        for n in leaders:
            h = role[n] - N
            others, counters, slot, first_slot, segs = plan[h:h + 5]
            assert h % 4 == 0 and segs == segments
            assert min(k, SEGMENT // 2) <= others + 1 <= SEGMENT
            assert (counters >= 0) == (segments > 1)
            if segments > 1:
                assert first_slot <= slot < first_slot + segments <= partial_slots(N)
        assert (role == -2).sum() == k - segments


def test_a_token_holding_most_of_a_batch():
    rng = np.random.default_rng(0)
    B, T, C, V = 8, 512, 24, 300
    tokens = rng.integers(0, V, B * T)
    tokens[rng.random(B * T) < 0.6] = 5
    role, plan = check_plan(*random_case(rng, B, T, C, V, tokens))
    assert (role >= B * T).sum() >= 0.6 * B * T / SEGMENT


def test_the_contract_sizes_bound_the_plan_and_the_scratch():
    """The family's P and version 12's scratch hold the worst batches (one token everywhere;
    tokens in groups of 3, the most records)."""
    version = FAMILY.version(PLANNED)
    for B, T, C in [(1, 1, 8), (4, 33, 40), (8, 1024, 768), (3, 17, 4104)]:
        N = B * T
        env = FAMILY.env({"B": B, "T": T, "C": C, "V": 7})
        assert env["P"] == plan_words(N, C)
        scratch = expr.evaluate(next(s.size for s in version.scratch if s.name == "partial"), env)
        assert scratch >= partial_slots(N) * C
        for tokens in (np.zeros(N, int), np.arange(N) // 3, np.arange(N) // (SEGMENT + 1)):
            role, plan = encoder_backward_plan(tokens.reshape(B, T), C)
            assert plan.size == env["P"]
            slots = [plan[r - N + 2] for r in role if r >= N]
            assert max(slots + [-1]) < partial_slots(N)


def test_the_plan_is_quick_enough_for_every_micro_step():
    """A trainer's batch (B=32, T=1024) in well under a step's time (tens of ms); never a timed
    bar, only a guard against a Python loop creeping in (which takes ~100x longer)."""
    rng = np.random.default_rng(0)
    inp = np.minimum(rng.zipf(1.2, (32, 1024)), 50256)
    start = time.perf_counter()
    encoder_backward_plan(inp, 768)
    assert time.perf_counter() - start < 1.0


def case_with_tokens(sizes, seed, tokens):
    """The family's bf16 case with inp replaced by `tokens` (the plan made again for them)."""
    from references.encoder_backward import prepare_plan
    inputs = make_inputs(FAMILY, sizes, seed, "bf16")
    inputs["inp"] = np.asarray(tokens, dtype=np.int32).reshape(inputs["inp"].shape)
    inputs.update(prepare_plan(inputs["inp"], sizes["C"]))
    inputs["plan"] = inputs["plan"].astype(np.int32)
    return Case(dict(sizes), seed, inputs, run_reference(FAMILY, sizes, inputs, "bf16"), "bf16")


def assert_ok(reports):
    assert {r.name for r in reports} == {"dwte", "dwpe"}
    for r in reports:
        assert r.ok, f"{r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


@needs_gxx
@pytest.mark.parametrize("sizes", [s for s in FAMILY.test_sizes if s["C"] % 8 == 0] + [{"B": 8, "T": 64, "C": 40, "V": 2}],
                         ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_version_12_on_the_emulator(sizes):
    version = FAMILY.version(PLANNED)
    for seed, block_size, order in [(0, 128, 0), (1, 256, 5)]:
        assert_ok(runner.emulate(version, sizes, seed=seed, block_size=block_size, block_order=order))


@needs_gxx
def test_version_12_long_groups_in_any_block_order():
    """A token on 60% of the positions: dozens of segments, their last finisher in another block
    at every order; the bits do not depend on it, and every ticket is zero again after."""
    version = FAMILY.version(PLANNED)
    sizes = {"B": 8, "T": 96, "C": 64, "V": 40}
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, sizes["V"], sizes["B"] * sizes["T"])
    tokens[rng.random(tokens.size) < 0.6] = 3
    tokens[:3] = 9  # and a group of three at the start
    case = case_with_tokens(sizes, 0, tokens)
    assert (case.inputs["role"] >= tokens.size).sum() > 20
    first = None
    for order in (0, 1, 2):
        outputs, after = {}, {}
        assert_ok(runner.emulate(version, sizes, block_size=128, case=case, block_order=order,
                                 outputs=outputs, inputs_after=after))
        assert after["plan"].tobytes() == np.asarray(case.inputs["plan"]).tobytes(), "tickets left set"
        if first is None:
            first = outputs
        for name in outputs:
            assert outputs[name].tobytes() == first[name].tobytes(), f"{name} differs with block order {order}"
