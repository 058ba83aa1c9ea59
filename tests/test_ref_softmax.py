"""The softmax group's NumPy references (softmax_forward, crossentropy_forward,
crossentropy_softmax_backward, fused_classifier) against PyTorch on the CPU in float64, at odd
sizes; the backward references also against finite differences; and their contracts end to end
on the host (inputs drawn, `prepare` run, reference shapes, the torch expressions evaluated)."""

import numpy as np
import pytest

from references.crossentropy_forward import crossentropy_forward, make_probs
from references.crossentropy_softmax_backward import crossentropy_softmax_backward
from references.fused_classifier import fused_classifier, torch_fused_classifier
from references.softmax_forward import softmax_forward
from workbench.check import make_case, make_inputs, run_reference
from workbench.family import Project

from conftest import ROOT

torch = pytest.importorskip("torch")
F = torch.nn.functional

FAMILIES = ["softmax_forward", "crossentropy_forward", "crossentropy_softmax_backward", "fused_classifier"]


def softmax64(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rows_and_targets(rng, B, T, V, sigma=2.0):
    logits = rng.normal(0, sigma, size=(B, T, V))
    targets = rng.integers(0, V, size=(B, T))
    return logits, targets


# -- softmax_forward --------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(1, 1), (3, 37), (5, 1025), (2, 4099)])
def test_softmax_forward_matches_torch(shape):
    x = np.random.default_rng(0).normal(0, 2, size=shape)
    ref = softmax_forward(x)["out"]
    np.testing.assert_allclose(ref, torch.softmax(torch.from_numpy(x), -1).numpy(), rtol=1e-12, atol=0)


def test_softmax_forward_subtracts_the_max_so_large_logits_do_not_overflow():
    x = np.random.default_rng(1).normal(0, 1, size=(2, 37)) + 1000.0  # exp(1000) is inf
    out = softmax_forward(x)["out"]
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out.sum(axis=-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(out, softmax_forward(x - 1000.0)["out"], rtol=1e-9)


def test_softmax_forward_of_a_single_column_is_one():
    assert softmax_forward(np.array([[-3.0], [7.5]]))["out"].tolist() == [[1.0], [1.0]]


# -- crossentropy_forward ---------------------------------------------------------------------

def test_make_probs_gives_valid_probability_rows():
    probs = make_probs(2, 3, 37, np.random.default_rng(2))["probs"]
    assert probs.shape == (2, 3, 37) and probs.dtype == np.float32
    assert (probs > 0).all()
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("B, T, V", [(1, 1, 1), (2, 3, 37), (3, 5, 1025)])
def test_crossentropy_forward_matches_torch(B, T, V):
    rng = np.random.default_rng(3)
    logits, targets = rows_and_targets(rng, B, T, V)
    probs = softmax64(logits)
    ref = crossentropy_forward(probs, targets)["losses"]
    t = F.nll_loss(torch.log(torch.from_numpy(probs)).reshape(-1, V), torch.from_numpy(targets).reshape(-1),
                   reduction="none").reshape(B, T)
    np.testing.assert_allclose(ref, t.numpy(), rtol=1e-12, atol=1e-14)
    # and it is the cross-entropy of the logits behind those probabilities
    ce = F.cross_entropy(torch.from_numpy(logits).reshape(-1, V), torch.from_numpy(targets).reshape(-1),
                         reduction="none").reshape(B, T)
    np.testing.assert_allclose(ref, ce.numpy(), rtol=1e-10, atol=1e-12)


def test_crossentropy_forward_picks_the_targets_probability():
    probs = np.array([[[0.25, 0.5, 0.25], [0.1, 0.2, 0.7]]])
    losses = crossentropy_forward(probs, np.array([[1, 2]]))["losses"]
    np.testing.assert_allclose(losses, -np.log([[0.5, 0.7]]), rtol=1e-15)


# -- crossentropy_softmax_backward ------------------------------------------------------------

def weighted_loss(logits, targets, dlosses):
    """sum over positions of dlosses * cross-entropy(logits): its gradient is the reference's."""
    p = softmax64(logits)
    picked = np.take_along_axis(p, targets[..., None], axis=-1)[..., 0]
    return float((dlosses * -np.log(picked)).sum())


@pytest.mark.parametrize("B, T, V", [(1, 1, 1), (2, 3, 37), (1, 5, 1025)])
def test_crossentropy_softmax_backward_matches_torch_autograd(B, T, V):
    rng = np.random.default_rng(4)
    logits, targets = rows_and_targets(rng, B, T, V)
    dlosses = rng.uniform(-1, 1, size=(B, T))
    ref = crossentropy_softmax_backward(softmax64(logits), targets, dlosses)["dlogits"]
    x = torch.from_numpy(logits).requires_grad_(True)
    losses = F.cross_entropy(x.reshape(-1, V), torch.from_numpy(targets).reshape(-1), reduction="none")
    losses.backward(torch.from_numpy(dlosses).reshape(-1))
    np.testing.assert_allclose(ref, x.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_crossentropy_softmax_backward_matches_finite_differences():
    rng = np.random.default_rng(5)
    B, T, V = 2, 2, 5
    logits, targets = rows_and_targets(rng, B, T, V, sigma=1.0)
    dlosses = rng.uniform(-1, 1, size=(B, T))
    ref = crossentropy_softmax_backward(softmax64(logits), targets, dlosses)["dlogits"]
    h = 1e-6
    fd = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        plus, minus = logits.copy(), logits.copy()
        plus[idx] += h
        minus[idx] -= h
        fd[idx] = (weighted_loss(plus, targets, dlosses) - weighted_loss(minus, targets, dlosses)) / (2 * h)
    np.testing.assert_allclose(ref, fd, rtol=1e-6, atol=1e-8)


def test_crossentropy_softmax_backward_writes_rather_than_accumulates():
    probs = np.full((1, 1, 4), 0.25)
    dlogits = crossentropy_softmax_backward(probs, np.array([[3]]), np.array([[2.0]]))["dlogits"]
    np.testing.assert_allclose(dlogits, [[[0.5, 0.5, 0.5, -1.5]]], rtol=1e-15)


# -- fused_classifier -------------------------------------------------------------------------

def padded(rng, B, T, V, Vp):
    """Logits with garbage (large values) in the padded columns, which must be ignored."""
    logits, targets = rows_and_targets(rng, B, T, V)
    pad = rng.normal(50, 10, size=(B, T, Vp - V))
    return np.concatenate([logits, pad], axis=-1), targets


@pytest.mark.parametrize("B, T, V, Vp", [(1, 1, 1, 1), (1, 3, 1, 4), (2, 3, 37, 40), (1, 5, 1025, 1152),
                                         (2, 2, 4099, 4103)])
def test_fused_classifier_matches_torch_cross_entropy_and_autograd(B, T, V, Vp):
    rng = np.random.default_rng(6)
    logits, targets = padded(rng, B, T, V, Vp)
    dloss = 1.0 / (B * T)
    ref = fused_classifier(logits, targets, V, dloss)
    x = torch.from_numpy(logits[..., :V].copy()).requires_grad_(True)
    losses = F.cross_entropy(x.reshape(-1, V), torch.from_numpy(targets).reshape(-1), reduction="none")
    losses.mean().backward()
    np.testing.assert_allclose(ref["losses"], losses.detach().numpy().reshape(B, T), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(ref["logits"][..., :V], x.grad.numpy(), rtol=1e-10, atol=1e-15)
    assert (ref["logits"][..., V:] == 0).all(), "padded columns of the gradient must be zero"


def test_fused_classifier_matches_finite_differences_of_dloss_times_the_losses():
    rng = np.random.default_rng(7)
    B, T, V, Vp = 1, 3, 5, 8
    logits, targets = padded(rng, B, T, V, Vp)
    dloss = 0.37
    ref = fused_classifier(logits, targets, V, dloss)["logits"]

    def total(z):
        return dloss * fused_classifier(z, targets, V, dloss)["losses"].sum()

    h = 1e-6
    fd = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        plus, minus = logits.copy(), logits.copy()
        plus[idx] += h
        minus[idx] -= h
        fd[idx] = (total(plus) - total(minus)) / (2 * h)
    np.testing.assert_allclose(ref, fd, rtol=1e-6, atol=1e-9)
    assert (fd[..., V:] == 0).all()  # the loss does not depend on the padding at all


def test_fused_classifier_ignores_the_padding_values():
    rng = np.random.default_rng(8)
    logits, targets = padded(rng, 2, 3, 37, 40)
    other = logits.copy()
    other[..., 37:] = -1e30
    a, b = fused_classifier(logits, targets, 37, 0.5), fused_classifier(other, targets, 37, 0.5)
    np.testing.assert_array_equal(a["losses"], b["losses"])
    np.testing.assert_array_equal(a["logits"], b["logits"])


def test_the_torch_baseline_helper_agrees_with_the_reference():
    rng = np.random.default_rng(9)
    logits, targets = padded(rng, 2, 3, 37, 40)
    ref = fused_classifier(logits, targets, 37, 1 / 6)
    dlogits, losses = torch_fused_classifier(torch.from_numpy(logits), torch.from_numpy(targets.astype(np.int32)),
                                             37, 1 / 6)
    assert tuple(dlogits.shape) == (2, 3, 40)
    np.testing.assert_allclose(dlogits.numpy(), ref["logits"], rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(losses.numpy(), ref["losses"], rtol=1e-12)


# -- the contracts on the host ------------------------------------------------------------------

@pytest.fixture(scope="module")
def project():
    return Project(ROOT)


def test_fused_classifier_contract_is_the_trainers(project):
    fam = project.family("fused_classifier")
    assert fam.sizes == ("B", "T", "V", "Vp")
    roles = {a.name: (a.role, a.shape, a.dtype) for a in fam.args}
    assert roles == {"logits": ("inout", "B, T, Vp", "f32"), "losses": ("out", "B, T", "f32"),
                     "targets": ("in", "B, T", "i32")}
    env = fam.env({"B": 8, "T": 1024, "V": 50257, "Vp": 50304})
    assert env["dloss"] == pytest.approx(1 / 8192)
    assert any(s["Vp"] % 4 for s in fam.test_sizes) and any(s["Vp"] == s["V"] for s in fam.test_sizes)


@pytest.mark.parametrize("name", FAMILIES)
def test_every_version_has_a_test_size_meeting_its_preconditions_besides_the_default(project, name):
    fam = project.family(name)
    for v in fam.versions:
        ok = [s for s in fam.test_sizes if not v.unmet(s) and s != fam.default_sizes]
        assert ok, f"{v.label}: no test size satisfies {v.preconditions}"
    assert any(not fam.version(1).unmet(s) for s in fam.test_sizes)


@pytest.mark.parametrize("name", FAMILIES)
def test_test_sizes_are_odd(project, name):
    fam = project.family(name)
    last = fam.sizes[-1]  # the row length (V or Vp)
    assert any(s[last] == 1 for s in fam.test_sizes)
    assert any(s[last] % 4 for s in fam.test_sizes if s[last] > 4)


@pytest.mark.parametrize("name", FAMILIES)
def test_reference_runs_on_every_test_size(project, name):
    fam = project.family(name)
    for sizes in fam.test_sizes:
        case = make_case(fam, sizes, seed=0)
        for arg in fam.args:
            if arg.is_output:
                assert case.expected[arg.name].shape == fam.shape(arg, sizes)
                assert np.isfinite(case.expected[arg.name]).all(), f"{name} {sizes} {arg.name}"


@pytest.mark.parametrize("name", FAMILIES)
def test_the_families_torch_expression_agrees_with_the_reference(project, name):
    """The same evaluation the GPU worker does, on CPU tensors at a small test size."""
    fam = project.family(name)
    sizes = next(s for s in fam.test_sizes if 30 < s[fam.sizes[-1]] < 2000)
    inputs = make_inputs(fam, sizes, seed=1)
    expected = run_reference(fam, sizes, inputs)
    env = {**fam.env(sizes), **{k: torch.from_numpy(np.array(v)) for k, v in inputs.items()},
           "torch": torch, "F": F, "ref": fam.reference_module}
    got = eval(compile(fam.torch, "<torch>", "eval"), {"__builtins__": {}}, env)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(fam.torch_outputs)
    for name_, value in zip(fam.torch_outputs, got):
        arg = fam.arg(name_)
        atol = arg.atol if arg.atol is not None else fam.atol
        np.testing.assert_allclose(value.detach().double().numpy(), expected[name_], rtol=fam.rtol, atol=atol)


def test_the_probability_inputs_are_derived_rows(project):
    for name in ("crossentropy_forward", "crossentropy_softmax_backward"):
        fam = project.family(name)
        inputs = make_inputs(fam, {"B": 2, "T": 3, "V": 37}, seed=0)
        np.testing.assert_allclose(inputs["probs"].sum(axis=-1), 1.0, rtol=1e-5)
        assert ((inputs["targets"] >= 0) & (inputs["targets"] < 37)).all()
