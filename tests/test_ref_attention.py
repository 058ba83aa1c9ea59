"""The attention group's NumPy references (attention forward/backward, ReLU attention forward/
backward, trimat, permute, unpermute) against PyTorch on the CPU in float64, at odd sizes; the
backward references also against finite differences; and each family's contract run through the
workbench's own case builder and `torch` expression."""

import numpy as np
import pytest

from references.attention_backward import attention_backward, forward_outputs
from references.attention_forward import attention_forward
from references.permute import permute
from references.relu_attention_backward import relu_attention_backward
from references.relu_attention_forward import relu_attention_forward
from references.trimat_forward import trimat_forward
from references.unpermute import unpermute
from workbench.check import compare, make_case
from workbench.family import Project

from conftest import ROOT

torch = pytest.importorskip("torch")
F = torch.nn.functional

FAMILIES = ["attention_forward", "attention_backward", "relu_attention_forward",
            "relu_attention_backward", "trimat_forward", "permute", "unpermute"]
# (B, T, NH, HS): a single token, odd everything, HS not a multiple of 4, several heads
SHAPES = [(1, 1, 1, 1), (2, 3, 3, 5), (1, 37, 2, 8), (2, 17, 4, 12)]


def packed(B, T, NH, HS, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(B, T, 3 * NH * HS)), rng.normal(size=(B, T, NH * HS))


def torch_heads(qkv, NH):
    B, T, C3 = qkv.shape
    return torch.from_numpy(qkv).view(B, T, 3, NH, C3 // 3 // NH).permute(2, 0, 3, 1, 4)


def torch_causal_scores(qkv, NH):
    q, k, _ = torch_heads(qkv, NH)
    T = q.shape[2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    return s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))


def torch_sdpa_packed(x, NH):
    """An independent float64 SDPA on a packed (B, T, 3C) tensor (differentiable in x)."""
    B, T, C3 = x.shape
    q, k, v = x.view(B, T, 3, NH, C3 // 3 // NH).permute(2, 0, 3, 1, 4)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C3 // 3)


def torch_relu_packed(x, NH):
    B, T, C3 = x.shape
    q, k, v = x.view(B, T, 3, NH, C3 // 3 // NH).permute(2, 0, 3, 1, 4)
    s = F.relu(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5)
    att = torch.where(torch.ones(T, T, dtype=torch.bool).tril(), s, torch.zeros_like(s)) / T
    return (att @ v).transpose(1, 2).reshape(B, T, C3 // 3)


def numerical_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        up = f(x)
        x[i] = old - eps
        down = f(x)
        x[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


# -- attention forward ---------------------------------------------------------------------------
@pytest.mark.parametrize("B, T, NH, HS", SHAPES)
def test_attention_forward_matches_torch_sdpa(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS)
    ref = attention_forward(qkv, NH)
    out = torch_sdpa_packed(torch.from_numpy(qkv), NH)
    np.testing.assert_allclose(ref["out"], out.numpy(), atol=1e-12, rtol=1e-10)
    lse = torch.logsumexp(torch_causal_scores(qkv, NH), dim=-1)
    np.testing.assert_allclose(ref["lse"], lse.numpy(), atol=1e-12, rtol=1e-10)


def test_attention_forward_does_not_look_ahead():
    qkv, _ = packed(2, 9, 3, 4)
    later = qkv.copy()
    later[:, 5:] += 1.0  # change only tokens 5..8
    a, b = attention_forward(qkv, 3), attention_forward(later, 3)
    np.testing.assert_array_equal(a["out"][:, :5], b["out"][:, :5])
    np.testing.assert_array_equal(a["lse"][:, :, :5], b["lse"][:, :, :5])
    assert not np.allclose(a["out"][:, 5:], b["out"][:, 5:])


# -- attention backward --------------------------------------------------------------------------
@pytest.mark.parametrize("B, T, NH, HS", SHAPES)
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


# -- ReLU attention ------------------------------------------------------------------------------
@pytest.mark.parametrize("B, T, NH, HS", SHAPES)
def test_relu_attention_forward_matches_torch(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS, seed=4)
    ref = relu_attention_forward(qkv, NH)["out"]
    np.testing.assert_allclose(ref, torch_relu_packed(torch.from_numpy(qkv), NH).numpy(), atol=1e-12, rtol=1e-10)


def test_relu_attention_forward_is_causal_and_normalised_by_T():
    qkv, _ = packed(1, 6, 1, 3, seed=5)
    q, k, v = torch_heads(qkv, 1)
    s = np.maximum((q @ k.transpose(-1, -2)).numpy()[0, 0] / np.sqrt(3), 0)
    t = 4  # row 4 by hand: sum over t2 <= 4 of relu(s) v / T
    expected = (s[t, :t + 1, None] * v.numpy()[0, 0, :t + 1]).sum(axis=0) / 6
    np.testing.assert_allclose(relu_attention_forward(qkv, 1)["out"][0, t], expected, rtol=1e-12)


@pytest.mark.parametrize("B, T, NH, HS", SHAPES)
def test_relu_attention_backward_matches_torch_autograd(B, T, NH, HS):
    qkv, dout = packed(B, T, NH, HS, seed=6)
    ref = relu_attention_backward(dout, qkv, NH)["dqkv"]
    x = torch.from_numpy(qkv).requires_grad_(True)
    (g,) = torch.autograd.grad(torch_relu_packed(x, NH), x, torch.from_numpy(dout))
    np.testing.assert_allclose(ref, g.numpy(), atol=1e-12, rtol=1e-9)


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


# -- trimat, permute, unpermute ------------------------------------------------------------------
@pytest.mark.parametrize("B, T, NH, HS", SHAPES)
def test_trimat_is_the_scaled_lower_triangle(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS, seed=8)
    ref = trimat_forward(qkv, NH)["preatt"]
    expected = torch_causal_scores(qkv, NH).numpy()
    lower = np.tril(np.ones((T, T), dtype=bool))
    np.testing.assert_allclose(ref[..., lower], expected[..., lower], atol=1e-12, rtol=1e-10)
    assert np.all(np.isneginf(ref[..., ~lower]))


@pytest.mark.parametrize("B, T, NH, HS", SHAPES)
def test_permute_splits_heads_like_torch(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS, seed=9)
    ref = permute(qkv, NH)
    q, k, v = torch_heads(qkv, NH)
    for name, t in zip("qkv", (q, k, v)):
        np.testing.assert_array_equal(ref[name], t.numpy())
        assert ref[name].shape == (B, NH, T, HS)


@pytest.mark.parametrize("B, T, NH, HS", SHAPES)
def test_unpermute_inverts_the_head_split(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS, seed=10)
    heads = permute(qkv, NH)
    C = NH * HS
    for i, name in enumerate("qkv"):
        np.testing.assert_array_equal(unpermute(heads[name])["out"], qkv[..., i * C:(i + 1) * C])


# -- the contracts as the workbench runs them ----------------------------------------------------
@pytest.fixture(scope="module")
def project():
    return Project(ROOT)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_version_has_a_test_size_meeting_its_preconditions(project, family):
    fam = project.family(family)
    assert len(fam.versions) >= 2
    assert any(s["HS"] % 4 for s in fam.test_sizes) and any(s["T"] % 4 for s in fam.test_sizes)
    for v in fam.versions:
        assert any(not v.unmet(s) for s in fam.test_sizes), f"{v.path.name}: no test size it accepts"


@pytest.mark.parametrize("family", FAMILIES)
def test_the_torch_baseline_agrees_with_the_reference(project, family):
    """The contract's `torch` expression, evaluated the way the worker does (float32 tensors),
    against the reference at every small test size, within the family's tolerance."""
    fam = project.family(family)
    for sizes in fam.test_sizes:
        if sizes["T"] > 100:
            continue
        case = make_case(fam, sizes, seed=0)
        env = {**fam.env(sizes), **{k: torch.from_numpy(np.array(v)) for k, v in case.inputs.items()},
               "torch": torch, "F": F, "ref": fam.reference_module}
        got = eval(compile(fam.torch, "<torch>", "eval"), {"__builtins__": {}}, env)
        got = got if isinstance(got, (tuple, list)) else (got,)
        assert len(got) == len(fam.torch_outputs)
        for name, value in zip(fam.torch_outputs, got):
            arg = fam.arg(name)
            report = compare(arg, case.expected[name], value.detach().numpy(), fam.atol, fam.rtol)
            assert report.ok, (sizes, name, report.max_abs)


def test_relu_backward_draws_integer_qkv_so_the_mask_is_exact(project):
    case = make_case(project.family("relu_attention_backward"), {"B": 1, "T": 9, "NH": 2, "HS": 4}, seed=0)
    qkv = case.inputs["qkv"]
    assert np.array_equal(qkv, np.round(qkv)) and qkv.min() >= -2 and qkv.max() <= 2


def test_the_backward_prepare_matches_the_forward(project):
    fam = project.family("attention_backward")
    sizes = {"B": 2, "T": 5, "NH": 3, "HS": 4}
    case = make_case(fam, sizes, seed=0)
    fwd = attention_forward(case.inputs["qkv"].astype(np.float64), 3)
    np.testing.assert_allclose(case.inputs["out"], fwd["out"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(case.inputs["lse"], fwd["lse"], rtol=1e-6, atol=1e-7)
