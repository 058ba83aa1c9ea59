"""The attention_backward family at bf16, and its tensor-core versions (6: TF32; 7, 8, 10, 11: bf16), without
a GPU.

* the contract: which arguments are bf16, and the tolerance;
* the reference runs at bf16 at every test size;
* the versions: numbering (cuDNN's version 9 the only library one), precision, determinism, and a
  bf16 version for every test size;
* the tolerances against a float64 model of exactly the roundings the versions make (TF32 inputs
  and operands for 6; bf16 P, dS and outputs for 7, 8, 10 and 11): the model must sit well inside them;
* the kernels themselves run on the CPU SIMT emulator as their headers' [[emulate]] tables say
  (tests/test_emulator.py): that checks the fragment index math, the causal mask, the barriers
  and the cp.async waits before a GPU ever runs them.

Its NumPy reference (at the end): against PyTorch's autograd through causal SDPA in float64 at odd
sizes and against finite differences, P recomputed from the lse it is given; the case's prepared
forward outputs match the forward reference. The tests that call PyTorch skip themselves where it is
not installed.
"""

import numpy as np
import pytest

from references.attention_backward import attention_backward, forward_outputs
from references.attention_forward import attention_forward
from workbench.check import from_storage, make_case
from workbench.family import Project

from conftest import ROOT
from references_helpers import (ATTENTION_SHAPES, needs_torch, numerical_grad, packed, torch,
                                torch_sdpa_packed)


FAMILY = Project(ROOT).family("attention_backward")
TENSOR_CORE = (6, 7, 8, 10, 11)
CUDNN = 9


def test_the_bf16_contract():
    p = FAMILY.precisions["bf16"]
    assert p.args == {"dqkv": "bf16", "dout": "bf16", "qkv": "bf16", "out": "bf16"}
    assert (p.atol, p.rtol) == (2e-2, 2e-2)
    dtypes = {a.name: a.dtype for a in FAMILY.args_for("bf16")}
    assert dtypes["lse"] == "f32"  # the bf16 forward writes its log-sum-exp in fp32


@pytest.mark.parametrize("sizes", FAMILY.test_sizes, ids=FAMILY.format_sizes)
def test_the_reference_runs_at_bf16(sizes):
    case = make_case(FAMILY, sizes, 0, "bf16")
    assert case.inputs["qkv"].dtype == np.uint16 and case.inputs["lse"].dtype == np.float32
    assert np.isfinite(case.expected["dqkv"]).all()


def test_the_versions():
    versions = {v.number: v for v in FAMILY.versions}
    assert sorted(versions) == list(range(1, len(versions) + 1))
    library = [n for n, v in versions.items() if any(s.kind == "library" for s in v.steps) and v.precision == "bf16"]
    assert library == [CUDNN], "cuDNN's version 9 is the one library version"
    tf32, atomics, split, split32, atomics32 = (versions[n] for n in TENSOR_CORE)
    assert tf32.precision == "fp32" and not tf32.deterministic
    assert (tf32.atol, tf32.rtol) == (5e-3, 1e-2)
    assert atomics.precision == "bf16" and not atomics.deterministic
    assert split.precision == "bf16" and split.deterministic
    assert split32.precision == "bf16" and split32.deterministic  # no atomics: `train --deterministic` may use it
    assert atomics32.precision == "bf16" and not atomics32.deterministic  # dQ by atomics
    for v in (split32, atomics32):
        assert v.atol is None and tuple(v.block_sizes) == (128, 256)
    for sizes in FAMILY.test_sizes:  # the checker needs a bf16 version at every test size
        assert not any(v.unmet(sizes) for v in (atomics, split, split32, atomics32)), sizes
    assert not tf32.unmet(FAMILY.default_sizes) and not split.unmet(FAMILY.default_sizes)


# ---- the rounding model behind the tolerances ----------------------------------------------------
def _tf32(x):
    """Round to TF32 as cvt.rna.tf32.f32 does (10 mantissa bits, ties away from zero)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32).astype(np.float64)


def _bf16(x):
    """Round to bf16, nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def rounding_model(dout, qkv, out, lse, NH, inputs, operands, outputs):
    """dqkv as the tensor-core versions compute it, in float64 except where they round:
    `inputs` on q, k, v, dout before every product, `operands` on P and dS before they enter
    theirs, `outputs` on the result. D = dout . out in fp32 from the unrounded values."""
    from references.attention_forward import heads, merge_heads, split_heads
    q, k, v = split_heads(qkv, NH)
    T, HS = q.shape[2], q.shape[3]
    do, o = heads(dout, NH), heads(out, NH)
    scale = 1.0 / np.sqrt(HS)
    causal = np.tril(np.ones((T, T), dtype=bool))
    qr, kr, vr, dor = (inputs(x) for x in (q, k, v, do))
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    for b in range(q.shape[0]):
        p = np.where(causal, np.exp(qr[b] @ kr[b].swapaxes(-1, -2) * scale - lse[b][..., None]), 0.0)
        dp = dor[b] @ vr[b].swapaxes(-1, -2)
        d = (do[b].astype(np.float32) * o[b].astype(np.float32)).sum(-1, keepdims=True, dtype=np.float32)
        ds = p * (dp - d)
        dv[b] = operands(p).swapaxes(-1, -2) @ dor[b]
        dq[b] = scale * operands(ds) @ kr[b]
        dk[b] = scale * operands(ds).swapaxes(-1, -2) @ qr[b]
    return outputs(np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1))


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_the_tolerances_cover_the_rounding_model_with_room(precision):
    """At every test size and seed, the atol the model needs at the version's rtol is at most
    60% of the version's atol (TF32: 2.2e-3 of 5e-3; bf16: 6.2e-3 of 2e-2)."""
    version = FAMILY.version(6 if precision == "tf32" else 8)
    atol, rtol = version.tolerance(FAMILY.arg("dqkv"))
    at = "fp32" if precision == "tf32" else "bf16"
    dtypes = {a.name: a.dtype for a in FAMILY.args_for(at)}
    rounding = (dict(inputs=_tf32, operands=_tf32, outputs=lambda x: x.astype(np.float32).astype(np.float64))
                if precision == "tf32" else dict(inputs=lambda x: x, operands=_bf16, outputs=_bf16))
    worst = 0.0
    for sizes in FAMILY.test_sizes:
        for seed in FAMILY.seeds:
            case = make_case(FAMILY, sizes, seed, at)
            x = {n: from_storage(a, dtypes[n]).astype(np.float64) for n, a in case.inputs.items()}
            got = rounding_model(x["dout"], x["qkv"], x["out"], x["lse"], sizes["NH"], **rounding)
            ref = case.expected["dqkv"].reshape(got.shape)
            worst = max(worst, float((np.abs(got - ref) - rtol * np.abs(ref)).max()))
    assert 0 < worst <= 0.6 * atol, f"the model needs atol {worst:.2g} at rtol {rtol}: {atol} leaves no room"


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("B, T, NH, HS", ATTENTION_SHAPES)
def test_attention_backward_matches_torch_autograd(B, T, NH, HS):
    qkv, dout = packed(B, T, NH, HS, seed=1)
    fwd = forward_outputs(qkv, NH)
    ref = attention_backward(dout, qkv, fwd["out"], fwd["lse"], NH)["dqkv"]
    x = torch.from_numpy(qkv).requires_grad_(True)
    (g,) = torch.autograd.grad(torch_sdpa_packed(x, NH), x, torch.from_numpy(dout))
    np.testing.assert_allclose(ref, g.numpy(), atol=1e-12, rtol=1e-9)


def test_attention_backward_matches_finite_differences():
    NH = 2
    qkv, dout = packed(1, 3, NH, 2, seed=2)
    fwd = attention_forward(qkv, NH)
    ref = attention_backward(dout, qkv, fwd["out"], fwd["lse"], NH)["dqkv"]
    num = numerical_grad(lambda x: float((dout * attention_forward(x, NH)["out"]).sum()), qkv.copy())
    np.testing.assert_allclose(ref, num, atol=1e-8, rtol=1e-6)


def test_attention_backward_uses_the_given_lse():
    # A stale lse (here shifted by log 2) must show in the gradient: P is recomputed from it.
    qkv, dout = packed(1, 5, 1, 3, seed=3)
    fwd = forward_outputs(qkv, 1)
    good = attention_backward(dout, qkv, fwd["out"], fwd["lse"], 1)["dqkv"]
    bad = attention_backward(dout, qkv, fwd["out"], fwd["lse"] + np.log(2.0), 1)["dqkv"]
    assert not np.allclose(good, bad)


def test_the_backward_prepare_matches_the_forward():
    project = Project(ROOT)
    fam = project.family("attention_backward")
    sizes = {"B": 2, "T": 5, "NH": 3, "HS": 4}
    case = make_case(fam, sizes, seed=0)
    fwd = attention_forward(case.inputs["qkv"].astype(np.float64), 3)
    np.testing.assert_allclose(case.inputs["out"], fwd["out"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(case.inputs["lse"], fwd["lse"], rtol=1e-6, atol=1e-7)
