"""The relu_attention_backward family at bf16, and its tensor-core version 3, without a GPU.

* the contract: which arguments are bf16, and the tolerance;
* the reference runs at bf16 at every test size;
* the tolerance against a float64 model of exactly the roundings version 3 makes (bf16 relu(S)
  and dS before their products, bf16 outputs): the model must sit well inside it;
* version 3 runs on the CPU SIMT emulator as its header's [[emulate]] tables say
  (tests/test_emulator.py): every test size, odd sizes (T not a multiple of the tiles, HS = 37
  and 128), several seeds, both schedulers, cp.async copies landing only at their wait (LATE).

Its NumPy reference (at the end): against PyTorch's autograd in float64 at odd sizes and against
finite differences, relu'(0) = 0 as in PyTorch; the family draws integer qkv so that the mask is
exact. The tests that call PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.relu_attention_backward import relu_attention_backward
from references.relu_attention_forward import relu_attention_forward
from workbench.check import from_storage, make_case
from workbench.family import Project

from conftest import ROOT
from references_helpers import (ATTENTION_SHAPES, needs_torch, numerical_grad, packed, torch,
                                torch_causal_scores, torch_relu_packed)


FAMILY = Project(ROOT).family("relu_attention_backward")
VERSION = 3


def test_the_bf16_contract():
    p = FAMILY.precisions["bf16"]
    assert p.args == {"dqkv": "bf16", "dout": "bf16", "qkv": "bf16"}
    assert (p.atol, p.rtol) == (1e-2, 1e-2)
    sizes = FAMILY.default_sizes
    C = sizes["NH"] * sizes["HS"]
    assert FAMILY.bytes_moved(sizes, "bf16") == 2 * 7 * sizes["B"] * sizes["T"] * C


@pytest.mark.parametrize("sizes", FAMILY.test_sizes, ids=FAMILY.format_sizes)
def test_the_reference_runs_at_bf16(sizes):
    case = make_case(FAMILY, sizes, 0, "bf16")
    assert case.inputs["qkv"].dtype == np.uint16 and case.inputs["dout"].dtype == np.uint16
    assert np.isfinite(case.expected["dqkv"]).all()


def test_version_3():
    v = FAMILY.version(VERSION)
    assert v.precision == "bf16" and v.deterministic  # dQ by recomputation: no atomics
    for sizes in [*FAMILY.test_sizes, FAMILY.default_sizes, dict(FAMILY.default_sizes, HS=128)]:
        assert not v.unmet(sizes), sizes


# ---- the rounding model behind the tolerance ----------------------------------------------------
def _bf16(x):
    """Round to bf16, nearest even."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32).astype(np.float64)


def rounding_model(dout, qkv, NH):
    """dqkv as version 3 computes it, in float64 except where it rounds: relu(S) and
    dS = [S > 0] dout.v (both unscaled) to bf16 before their products, scale / T applied after,
    the result to bf16."""
    from references.attention_forward import heads, merge_heads, split_heads
    q, k, v = split_heads(qkv, NH)
    do = heads(dout, NH)
    T, HS = q.shape[2], q.shape[3]
    c = 1.0 / np.sqrt(HS) / T
    causal = np.tril(np.ones((T, T), dtype=bool))
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    for b in range(q.shape[0]):
        s = q[b] @ k[b].swapaxes(-1, -2)
        on = causal & (s > 0)
        p = _bf16(np.where(on, s, 0.0))
        ds = _bf16(np.where(on, do[b] @ v[b].swapaxes(-1, -2), 0.0))
        dv[b] = c * p.swapaxes(-1, -2) @ do[b]
        dq[b] = c * ds @ k[b]
        dk[b] = c * ds.swapaxes(-1, -2) @ q[b]
    return _bf16(np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1))


def test_the_tolerance_covers_the_rounding_model_with_room():
    """At every test size, over seeds 0-99, the atol the model needs at rtol 1e-2 is at most 80%
    of the contract's (measured: 4.2e-3 of 1e-2, at T = 3; 8.9e-3 over seeds 0-999), and at the
    sizes past the tiny T = 3 at most 30% (2.3e-3 over seeds 0-999). Seeds 0-2 alone once set
    the atol at 4e-3, which 2% of other seeds exceeded."""
    atol, rtol = FAMILY.tolerance(FAMILY.arg("dqkv"), "bf16")
    dtypes = {a.name: a.dtype for a in FAMILY.args_for("bf16")}
    worst = {}
    for sizes in FAMILY.test_sizes:
        for seed in range(100):
            case = make_case(FAMILY, sizes, seed, "bf16")
            x = {n: from_storage(a, dtypes[n]).astype(np.float64) for n, a in case.inputs.items()}
            got = rounding_model(x["dout"], x["qkv"], sizes["NH"])
            ref = case.expected["dqkv"].reshape(got.shape)
            need = float((np.abs(got - ref) - rtol * np.abs(ref)).max())
            worst[sizes["T"]] = max(worst.get(sizes["T"], 0.0), need)
    assert 0 < max(worst.values()) <= 0.8 * atol, f"the model needs atol {worst} at rtol {rtol}: {atol} leaves too little room"
    assert max(v for t, v in worst.items() if t > 3) <= 0.3 * atol, worst


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("B, T, NH, HS", ATTENTION_SHAPES)
def test_relu_attention_backward_matches_torch_autograd(B, T, NH, HS):
    qkv, dout = packed(B, T, NH, HS, seed=6)
    ref = relu_attention_backward(dout, qkv, NH)["dqkv"]
    x = torch.from_numpy(qkv).requires_grad_(True)
    (g,) = torch.autograd.grad(torch_relu_packed(x, NH), x, torch.from_numpy(dout))
    np.testing.assert_allclose(ref, g.numpy(), atol=1e-12, rtol=1e-9)


@needs_torch
def test_relu_attention_backward_matches_finite_differences():
    NH = 2
    for seed in range(100):  # scores well away from the kink, where differences are exact
        qkv, dout = packed(1, 4, NH, 3, seed=seed)
        s = torch_causal_scores(qkv, NH).numpy()
        if np.abs(s[np.isfinite(s)]).min() > 1e-3:
            break
    ref = relu_attention_backward(dout, qkv, NH)["dqkv"]
    num = numerical_grad(lambda x: float((dout * relu_attention_forward(x, NH)["out"]).sum()), qkv.copy())
    np.testing.assert_allclose(ref, num, atol=1e-8, rtol=1e-6)


@needs_torch
def test_relu_attention_backward_derivative_is_zero_at_a_zero_score():
    # Integer inputs (as the family draws them) give exact zeros of q.k: relu'(0) must be 0,
    # as in PyTorch, not 1 (which [s >= 0] would give).
    rng = np.random.default_rng(7)
    qkv = rng.integers(-2, 3, size=(1, 8, 3 * 2 * 4)).astype(np.float64)
    dout = rng.normal(size=(1, 8, 8))
    s = torch_causal_scores(qkv, 2).numpy()
    assert (s == 0).any(), "the draw should contain exact zero scores"
    ref = relu_attention_backward(dout, qkv, 2)["dqkv"]
    x = torch.from_numpy(qkv).requires_grad_(True)
    (g,) = torch.autograd.grad(torch_relu_packed(x, 2), x, torch.from_numpy(dout))
    np.testing.assert_allclose(ref, g.numpy(), atol=1e-12, rtol=1e-9)


def test_relu_backward_draws_integer_qkv_so_the_mask_is_exact():
    project = Project(ROOT)
    case = make_case(project.family("relu_attention_backward"), {"B": 1, "T": 9, "NH": 2, "HS": 4}, seed=0)
    qkv = case.inputs["qkv"]
    assert np.array_equal(qkv, np.round(qkv)) and qkv.min() >= -2 and qkv.max() <= 2
