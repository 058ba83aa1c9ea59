"""The fused_classifier family at bf16, without a GPU: the reference zeroes the padding, and
version 6 keeps its rows in registers without spilling.

Its NumPy reference (at the end): against PyTorch's cross-entropy and autograd in float64 (the
padded columns ignored, their gradient zero) and against finite differences; the PyTorch helper
timed beside it; the contract is the trainer's. The tests that call PyTorch skip themselves where it
is not installed.
"""

import numpy as np
import pytest

from references.fused_classifier import fused_classifier, torch_fused_classifier
from workbench.check import make_case
from workbench.compile import compile_only
from workbench.family import Project

from conftest import ROOT
from references_helpers import F, needs_torch, rows_and_targets, torch


FAMILY = Project(ROOT).family("fused_classifier")


def test_the_fused_classifier_reference_at_bf16_zeroes_the_padding():
    fam = FAMILY
    sizes = {"B": 2, "T": 3, "V": 37, "Vp": 40}
    case = make_case(fam, sizes, 0, "bf16")
    assert np.all(case.expected["logits"][..., 37:] == 0)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])  # sm_80 with the slow cases (conftest.py)
def test_version_6_does_not_spill(nvcc, arch):
    """Its rows live in registers: a spill would put them in local memory (i.e. DRAM) instead."""
    v = FAMILY.version(6)
    resources, _ = compile_only(v.path, arch)
    for kernel in v.kernels:
        r = resources[kernel]
        assert r.spill_stores == 0 and r.spill_loads == 0, (arch, kernel, r.line())


# -- the reference ---------------------------------------------------------------------------------
def padded(rng, B, T, V, Vp):
    """Logits with garbage (large values) in the padded columns, which must be ignored."""
    logits, targets = rows_and_targets(rng, B, T, V)
    pad = rng.normal(50, 10, size=(B, T, Vp - V))
    return np.concatenate([logits, pad], axis=-1), targets


@needs_torch
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


@needs_torch
def test_the_torch_baseline_helper_agrees_with_the_reference():
    rng = np.random.default_rng(9)
    logits, targets = padded(rng, 2, 3, 37, 40)
    ref = fused_classifier(logits, targets, 37, 1 / 6)
    dlogits, losses = torch_fused_classifier(torch.from_numpy(logits), torch.from_numpy(targets.astype(np.int32)),
                                             37, 1 / 6)
    assert tuple(dlogits.shape) == (2, 3, 40)
    np.testing.assert_allclose(dlogits.numpy(), ref["logits"], rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(losses.numpy(), ref["losses"], rtol=1e-12)


def test_fused_classifier_contract_is_the_trainers():
    project = Project(ROOT)
    fam = project.family("fused_classifier")
    assert fam.sizes == ("B", "T", "V", "Vp")
    roles = {a.name: (a.role, a.shape, a.dtype) for a in fam.args}
    assert roles == {"logits": ("inout", "B, T, Vp", "f32"), "losses": ("out", "B, T", "f32"),
                     "targets": ("in", "B, T", "i32")}
    env = fam.env({"B": 8, "T": 1024, "V": 50257, "Vp": 50304})
    assert env["dloss"] == pytest.approx(1 / 8192)
    assert any(s["Vp"] % 4 for s in fam.test_sizes) and any(s["Vp"] == s["V"] for s in fam.test_sizes)
