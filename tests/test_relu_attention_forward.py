"""The relu_attention_forward family at bf16, and its tensor-core version 3, without a GPU.

* the contract: which arguments are bf16, the tolerance and the bytes;
* the reference runs at bf16 at every test size;
* version 3: its precision, and exactly one of its launch steps at every head size up to 128;
* the tolerance against a NumPy model of exactly the roundings version 3 makes (fp32 scores, P
  rounded to bf16, fp32 P @ V, out rounded to bf16): the model must sit well inside it;
* the kernel itself on the CPU SIMT emulator (tests/gpu_emu), at its header's [[emulate]] cases
  (every test size and a few odd ones, both schedulers, late cp.async; tests/test_emulator.py
  checks them at the family tolerance): every output element within an ulp of the rounding model
  (the family tolerance is loose at large T: see family.toml).

Its NumPy reference (at the end): against a PyTorch ReLU attention in float64 at odd sizes; causal
and normalised by T (a row by hand). The tests that call PyTorch skip themselves where it is not
installed.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from references.relu_attention_forward import relu_attention_forward
from workbench import expr
from workbench.check import from_storage, make_case
from workbench.family import Project

from conftest import ROOT
from references_helpers import (ATTENTION_SHAPES, needs_torch, packed, torch, torch_heads,
                                torch_relu_packed)

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402


FAMILY = Project(ROOT).family("relu_attention_forward")
ATOL, RTOL = 3e-3, 1e-2
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def test_the_bf16_contract():
    p = FAMILY.precisions["bf16"]
    assert p.args == {"out": "bf16", "qkv": "bf16"}
    assert (p.atol, p.rtol) == (ATOL, RTOL)
    assert {a.name: a.dtype for a in FAMILY.args_for("bf16")} == {"out": "bf16", "qkv": "bf16"}
    sizes = FAMILY.default_sizes
    assert FAMILY.bytes_moved(sizes, "bf16") * 2 == FAMILY.bytes_moved(sizes)  # 2 bytes an element


@pytest.mark.parametrize("sizes", FAMILY.test_sizes, ids=FAMILY.format_sizes)
def test_the_reference_runs_at_bf16(sizes):
    case = make_case(FAMILY, sizes, 0, "bf16")
    assert case.inputs["qkv"].dtype == np.uint16
    assert np.isfinite(case.expected["out"]).all()


@pytest.mark.parametrize("sizes", [FAMILY.default_sizes, *FAMILY.test_sizes,
                                   *({"B": 1, "T": 1, "NH": 1, "HS": hs} for hs in (8, 37, 64, 65, 72, 99, 128))],
                         ids=FAMILY.format_sizes)
def test_version_3_runs_exactly_one_kernel_at_every_size(sizes):
    v = FAMILY.version(3)
    assert v.precision == "bf16" and v.atol is None and v.rtol is None  # the family's bf16 tolerance
    assert not v.unmet(sizes), "every head size up to 128"
    env = FAMILY.env(sizes)
    chosen = [s for s in v.steps if expr.evaluate(s.when, env)]
    assert len(chosen) == 1, [s.name for s in chosen]
    hsp = 64 if sizes["HS"] <= 64 else 128
    assert chosen[0].name.startswith(f"relu_attention_forward3_hs{hsp}")
    assert chosen[0].name.endswith("_any") == (sizes["HS"] % 8 != 0)


def bf16(x):
    """float32 -> the nearest bf16 (ties to even), as float32."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def rounding_model(qkv, B, T, NH, HS):
    """Version 3's arithmetic: fp32 scores of the bf16 q, k; P = relu(s x float32(1 / (sqrt(HS) T)))
    in fp32, rounded to bf16; fp32 P @ V; out rounded to bf16. (B, T, C) float64."""
    x = np.asarray(qkv, dtype=np.float32).reshape(B, T, 3, NH, HS).transpose(0, 3, 2, 1, 4)
    q, k, v = x[:, :, 0], x[:, :, 1], x[:, :, 2]
    s = q @ np.swapaxes(k, -1, -2)
    factor = np.float32(1.0 / np.sqrt(HS) / T)
    p = bf16(np.where(np.tril(np.ones((T, T), bool)), np.maximum(s * factor, np.float32(0)), np.float32(0)))
    return bf16(p @ v).astype(np.float64).transpose(0, 2, 1, 3).reshape(B, T, NH * HS)


def _model_case(sizes, seed):
    case = make_case(FAMILY, sizes, seed, "bf16")
    qkv = from_storage(case.inputs["qkv"], "bf16")
    return case, rounding_model(qkv, *(sizes[n] for n in ("B", "T", "NH", "HS")))


@pytest.mark.parametrize("sizes", [pytest.param(FAMILY.default_sizes, marks=pytest.mark.slow), *FAMILY.test_sizes],
                         ids=FAMILY.format_sizes)
def test_the_tolerance_covers_the_rounding_model_with_room(sizes):
    for seed in range(1 if sizes == FAMILY.default_sizes else 3):
        case, model = _model_case(sizes, seed)
        exp = case.expected["out"]
        worst = (np.abs(model - exp) / (ATOL + RTOL * np.abs(exp))).max()
        assert worst < 0.5, (seed, worst)  # at least 2x inside the tolerance


def test_the_rounding_model_is_not_exact():
    """The model makes version 3's roundings (else the test above proves nothing): at the default
    sizes its error is well above fp32's and below the tolerance."""
    sizes = dict(FAMILY.default_sizes, B=1, NH=2)
    case, model = _model_case(sizes, 0)
    err = np.abs(model - case.expected["out"]).max()
    assert 5e-5 < err < ATOL, err


# ---- the kernel on the emulator -----------------------------------------------------------------
# The header's [[emulate]] cases: the test sizes and odd ones (one token; one key past a whole
# tile; three query tiles, the last with two rows; odd heads over two tiles, with element-wise
# loads; HSP = 128 with 16-byte copies and element-wise). A missing barrier at the end of a key
# tile lets a warp refill the buffer others still read: the copies for tile j + 2 go into tile j's
# buffer. LATE copies land only at the next wait, after the barrier at the top of the tile, which
# hides it; element-wise loads (HS % 8 != 0) and EARLY copies land at once and show it, given three
# key tiles or more: hence T = 140, HS = 37 (LATE) and T = 200, HS = 64 (EARLY).
VERSION = FAMILY.version(3)
EMULATED = runner.cases(VERSION)


@needs_gxx
@pytest.mark.parametrize("sizes, run", EMULATED, ids=[runner.case_id(VERSION, s, r) for s, r in EMULATED])
def test_version_3_on_the_emulator_makes_the_models_roundings(sizes, run):
    case, model = _model_case(sizes, run.seed)
    outputs = {}
    (report,) = runner.run_case(VERSION, sizes, run, case=case, outputs=outputs)
    assert report.ok, report
    assert (report.atol, report.rtol) == (ATOL, RTOL)
    # The kernel's own roundings are the model's: within an ulp of out (fp32 sums in another order
    # may move a rounding by one) plus 1e-5 for a sum that cancels to ~0 (its fp32 error is then
    # all there is), where the family's tolerance would let through far more.
    got = np.asarray(outputs["out"], dtype=np.float64).reshape(model.shape)
    off = np.abs(got - model) - 2.0 ** -7 * np.abs(model)
    # Rarely a score's fp32 sum, taken in the MMA's order, ends on the other side of a bf16
    # rounding of P than numpy's: out moves by that P's half-ulp times its v (seed 5 at T = 260:
    # one element of 33,280, 1.7e-5 past the bound). Such flips stay rare and within one P ulp.
    B, T, NH, HS = (sizes[n] for n in ("B", "T", "NH", "HS"))
    x = from_storage(case.inputs["qkv"], "bf16").astype(np.float64).reshape(B, T, 3, NH, HS).transpose(0, 3, 2, 1, 4)
    p_max = max(0.0, (x[:, :, 0] @ np.swapaxes(x[:, :, 1], -1, -2)).max()) / np.sqrt(HS) / T
    one_flip = 2.0 ** -8 * p_max * np.abs(x[:, :, 2]).max()
    where = (np.unravel_index(off.argmax(), off.shape), off.max())
    assert off.max() <= max(1e-5, one_flip), where
    assert (off > 1e-5).mean() <= 1e-3, ((off > 1e-5).sum(), where)


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("B, T, NH, HS", ATTENTION_SHAPES)
def test_relu_attention_forward_matches_torch(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS, seed=4)
    ref = relu_attention_forward(qkv, NH)["out"]
    np.testing.assert_allclose(ref, torch_relu_packed(torch.from_numpy(qkv), NH).numpy(), atol=1e-12, rtol=1e-10)


@needs_torch
def test_relu_attention_forward_is_causal_and_normalised_by_T():
    qkv, _ = packed(1, 6, 1, 3, seed=5)
    q, k, v = torch_heads(qkv, 1)
    s = np.maximum((q @ k.transpose(-1, -2)).numpy()[0, 0] / np.sqrt(3), 0)
    t = 4  # row 4 by hand: sum over t2 <= 4 of relu(s) v / T
    expected = (s[t, :t + 1, None] * v.numpy()[0, 0, :t + 1]).sum(axis=0) / 6
    np.testing.assert_allclose(relu_attention_forward(qkv, 1)["out"][0, t], expected, rtol=1e-12)
