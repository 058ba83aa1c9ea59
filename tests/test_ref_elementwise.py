"""The elementwise group's references (residual, fused residual + LayerNorm, GELU forward and
backward, LayerNorm backward) against PyTorch on the CPU in float64, at odd sizes; the backward
references also against finite differences; the PyTorch helpers the workbench times against the
references; and the contracts' test sizes."""

import numpy as np
import pytest

from references.fused_residual_forward import fused_residual_forward, torch_fused_residual_forward
from references.gelu_backward import gelu_backward, torch_gelu_backward
from references.gelu_forward import gelu_forward
from references.layernorm_backward import layernorm_backward, prepare, torch_layernorm_backward
from references.layernorm_forward import layernorm_forward
from references.residual_forward import residual_forward
from workbench.check import make_case
from workbench.family import Project

from conftest import ROOT

torch = pytest.importorskip("torch")
F = torch.nn.functional

SHAPES = [(1, 1, 1), (2, 3, 37), (1, 5, 36), (1, 2, 1600)]
FAMILIES = ["residual_forward", "fused_residual_forward", "gelu_forward", "gelu_backward",
            "layernorm_backward"]


def t(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


# -- residual and fused residual ----------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_residual_forward_matches_torch(shape):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=shape), rng.normal(size=shape)
    np.testing.assert_allclose(residual_forward(a, b)["out"], (t(a) + t(b)).numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("shape", SHAPES)
def test_fused_residual_forward_matches_torch_add_then_layer_norm(shape):
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=shape), rng.normal(0.3, 1, size=shape)
    w, bias = rng.normal(1, 0.1, size=shape[-1]), rng.normal(0, 0.1, size=shape[-1])
    ref = fused_residual_forward(a, b, w, bias, 1e-5)
    r = t(a) + t(b)
    np.testing.assert_allclose(ref["residual"], r.numpy(), rtol=1e-15)
    normed = F.layer_norm(r, (shape[-1],), t(w), t(bias), 1e-5)
    np.testing.assert_allclose(ref["normed"], normed.numpy(), atol=1e-12, rtol=1e-10)
    np.testing.assert_allclose(ref["mean"], r.mean(-1).numpy(), atol=1e-14)
    var = r.var(-1, unbiased=False).numpy()
    np.testing.assert_allclose(ref["rstd"], 1 / np.sqrt(var + 1e-5), rtol=1e-12)


def test_fused_residual_equals_residual_then_layernorm_forward():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 3, 37)), rng.normal(size=(2, 3, 37))
    w, bias = rng.normal(1, 0.1, size=37), rng.normal(0, 0.1, size=37)
    fused = fused_residual_forward(a, b, w, bias, 1e-5)
    ln = layernorm_forward(residual_forward(a, b)["out"], w, bias, 1e-5)
    for name in ("normed", "mean", "rstd"):
        np.testing.assert_allclose(fused[name], ln["out" if name == "normed" else name], rtol=1e-14)


def test_torch_fused_residual_helper_returns_the_references_outputs_in_order():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(2, 3, 37)), rng.normal(size=(2, 3, 37))
    w, bias = rng.normal(1, 0.1, size=37), rng.normal(0, 0.1, size=37)
    ref = fused_residual_forward(a, b, w, bias, 1e-5)
    got = torch_fused_residual_forward(t(a), t(b), t(w), t(bias), 1e-5)
    for name, value in zip(["residual", "normed", "mean", "rstd"], got):
        np.testing.assert_allclose(value.numpy().reshape(ref[name].shape), ref[name], rtol=1e-10, atol=1e-12)


# -- GELU ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_gelu_forward_matches_torch_tanh_approximation(shape):
    x = np.random.default_rng(4).normal(0, 3, size=shape)
    np.testing.assert_allclose(gelu_forward(x)["out"], F.gelu(t(x), approximate="tanh").numpy(),
                               atol=1e-14, rtol=1e-12)


def test_gelu_forward_is_not_the_exact_erf_gelu():
    x = np.linspace(-3, 3, 101)
    assert np.abs(gelu_forward(x)["out"] - F.gelu(t(x)).numpy()).max() > 1e-4


@pytest.mark.parametrize("shape", SHAPES)
def test_gelu_backward_matches_autograd(shape):
    rng = np.random.default_rng(5)
    x, dout = rng.normal(0, 3, size=shape), rng.normal(size=shape)
    xt = t(x).requires_grad_()
    F.gelu(xt, approximate="tanh").backward(t(dout))
    np.testing.assert_allclose(gelu_backward(x, dout)["dinp"], xt.grad.numpy(), atol=1e-13, rtol=1e-11)


def test_gelu_backward_matches_finite_differences():
    rng = np.random.default_rng(6)
    x, dout = rng.normal(0, 2, size=(2, 5)), rng.normal(size=(2, 5))
    h = 1e-6
    fd = (gelu_forward(x + h)["out"] - gelu_forward(x - h)["out"]) / (2 * h) * dout
    np.testing.assert_allclose(gelu_backward(x, dout)["dinp"], fd, atol=1e-8, rtol=1e-7)


def test_torch_gelu_backward_helper_matches_the_reference():
    rng = np.random.default_rng(7)
    x, dout = rng.normal(0, 3, size=(3, 37)), rng.normal(size=(3, 37))
    np.testing.assert_allclose(torch_gelu_backward(t(x), t(dout)).numpy(), gelu_backward(x, dout)["dinp"],
                               atol=1e-13, rtol=1e-11)


def _kernel_gelu_math_f32(x):
    """The kernels' float32 formulas: 0.5 (1 + tanh u) as the logistic 1 / (1 + exp(-2u))."""
    f = np.float32
    x = x.astype(f)
    x2 = x * x
    u = f(0.7978845608028654) * (x + f(0.044715) * x2 * x)
    du = f(0.7978845608028654) * (f(1) + f(3 * 0.044715) * x2)
    e = np.exp(np.minimum(f(-2) * u, f(80))).astype(f)
    s = (f(1) / (f(1) + e)).astype(f)
    return x * s, s + f(2) * x * s * (e * s) * du


def test_the_kernels_logistic_gelu_stays_within_the_elementwise_tolerance_in_float32():
    x = np.concatenate([np.linspace(-40, 40, 200001), np.random.default_rng(8).normal(0, 3, 100000)])
    x = x.astype(np.float32).astype(np.float64)
    out, grad = _kernel_gelu_math_f32(x)
    ref_out = gelu_forward(x)["out"]
    ref_grad = gelu_backward(x, np.ones_like(x))["dinp"]
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(grad))
    # a tenth of the families' 1e-5 tolerance, leaving room for the fast exp's few ulp
    assert np.all(np.abs(out - ref_out) <= 1e-6 + 1e-6 * np.abs(ref_out))
    assert np.all(np.abs(grad - ref_grad) <= 1e-6 + 1e-6 * np.abs(ref_grad))


# -- LayerNorm backward -------------------------------------------------------------------------
def _ln_case(shape, seed):
    rng = np.random.default_rng(seed)
    C = shape[-1]
    inp, dout = rng.normal(0.5, 2, size=shape), rng.normal(size=shape)
    w, bias = rng.normal(1, 0.1, size=C), rng.normal(0, 0.1, size=C)
    grads0 = rng.normal(size=shape), rng.normal(size=C), rng.normal(size=C)
    return inp, dout, w, bias, grads0


@pytest.mark.parametrize("shape", SHAPES + [(3, 2, 5)])
def test_layernorm_backward_matches_autograd_plus_the_initial_gradients(shape):
    inp, dout, w, bias, (dinp0, dw0, db0) = _ln_case(shape, 9)
    stats = prepare(inp)
    ref = layernorm_backward(dinp0, dw0, db0, dout, inp, w, stats["mean"], stats["rstd"])
    x, wt, bt = t(inp).requires_grad_(), t(w).requires_grad_(), t(bias).requires_grad_()
    F.layer_norm(x, (shape[-1],), wt, bt, 1e-5).backward(t(dout))
    np.testing.assert_allclose(ref["dinp"] - dinp0, x.grad.numpy(), atol=1e-10, rtol=1e-9)
    np.testing.assert_allclose(ref["dweight"] - dw0, wt.grad.numpy(), atol=1e-10, rtol=1e-9)
    np.testing.assert_allclose(ref["dbias"] - db0, bt.grad.numpy(), atol=1e-10, rtol=1e-9)


def test_layernorm_backward_accumulates_rather_than_overwrites():
    inp, dout, w, _, (dinp0, dw0, db0) = _ln_case((2, 3, 7), 10)
    stats = prepare(inp)
    zero = layernorm_backward(0 * dinp0, 0 * dw0, 0 * db0, dout, inp, w, stats["mean"], stats["rstd"])
    acc = layernorm_backward(dinp0, dw0, db0, dout, inp, w, stats["mean"], stats["rstd"])
    for name, initial in (("dinp", dinp0), ("dweight", dw0), ("dbias", db0)):
        np.testing.assert_allclose(acc[name], zero[name] + initial, rtol=1e-14, atol=1e-14)


def test_layernorm_backward_matches_finite_differences():
    inp, dout, w, bias, _ = _ln_case((2, 2, 5), 11)
    C = inp.shape[-1]
    stats = prepare(inp)
    ref = layernorm_backward(np.zeros_like(inp), np.zeros(C), np.zeros(C), dout, inp, w,
                             stats["mean"], stats["rstd"])

    def loss(x, wt, b):  # mean and rstd are recomputed from x: dinp includes their gradient
        return float((layernorm_forward(x, wt, b)["out"] * dout).sum())

    h = 1e-6
    params = [inp, w, bias]
    for pos, name in enumerate(("dinp", "dweight", "dbias")):
        fd = np.zeros_like(params[pos])
        for idx in np.ndindex(fd.shape):
            up, down = list(params), list(params)
            up[pos], down[pos] = params[pos].copy(), params[pos].copy()
            up[pos][idx] += h
            down[pos][idx] -= h
            fd[idx] = (loss(*up) - loss(*down)) / (2 * h)
        np.testing.assert_allclose(ref[name], fd, atol=1e-6, rtol=1e-5, err_msg=name)


def test_prepare_gives_the_forwards_mean_and_rstd():
    inp = np.random.default_rng(12).normal(0.5, 2, size=(2, 3, 37))
    stats, fwd = prepare(inp), layernorm_forward(inp, np.ones(37), np.zeros(37))
    np.testing.assert_allclose(stats["mean"], fwd["mean"], rtol=1e-14)
    np.testing.assert_allclose(stats["rstd"], fwd["rstd"], rtol=1e-14)


def test_torch_layernorm_backward_helper_matches_the_reference():
    inp, dout, w, _, (dinp0, dw0, db0) = _ln_case((2, 3, 37), 13)
    stats = prepare(inp)
    ref = layernorm_backward(dinp0, dw0, db0, dout, inp, w, stats["mean"], stats["rstd"])
    got = torch_layernorm_backward(t(dinp0), t(dw0), t(db0), t(dout), t(inp), t(w),
                                   t(stats["mean"]), t(stats["rstd"]))
    for name, value in zip(["dinp", "dweight", "dbias"], got):
        np.testing.assert_allclose(value.numpy(), ref[name], atol=1e-10, rtol=1e-9, err_msg=name)


def test_layernorm_backward_case_feeds_the_reference_float32_statistics_of_its_own_inp():
    fam = Project(ROOT).family("layernorm_backward")
    case = make_case(fam, {"B": 2, "T": 3, "C": 37}, seed=0)
    assert case.inputs["mean"].dtype == np.float32
    x = case.inputs["inp"].astype(np.float64)
    np.testing.assert_allclose(case.inputs["mean"], x.mean(-1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(case.inputs["rstd"], 1 / np.sqrt(x.var(-1) + 1e-5), rtol=1e-6)


# -- the contracts ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", FAMILIES)
def test_every_version_has_a_test_size_meeting_its_preconditions_beside_the_defaults(name):
    fam = Project(ROOT).family(name)
    for v in fam.versions:
        usable = [s for s in fam.test_sizes if s != fam.default_sizes and not v.unmet(s)]
        assert usable, f"{v.path.name}: no test size satisfies {v.preconditions}"


@pytest.mark.parametrize("name", FAMILIES)
def test_test_sizes_include_odd_rows_and_a_single_element(name):
    fam = Project(ROOT).family(name)
    assert any(s["C"] % 4 for s in fam.test_sizes), "need C not a multiple of 4"
    assert any(all(v == 1 for v in s.values()) for s in fam.test_sizes), "need a single element"


def test_layernorm_backward_is_tested_at_gpt2_xl_width():
    fam = Project(ROOT).family("layernorm_backward")
    assert any(s["C"] == 1600 for s in fam.test_sizes)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_reference_returns_every_output_of_the_contract(name):
    fam = Project(ROOT).family(name)
    sizes = min(fam.test_sizes, key=lambda s: np.prod(list(s.values())))
    case = make_case(fam, sizes, seed=0)
    assert {a.name for a in fam.args if a.is_output} == set(case.expected)
