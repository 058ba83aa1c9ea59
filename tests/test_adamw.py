"""The adamw family at bf16, without a GPU: the bf16 copy of the updated params is an output only at
bf16, and its tolerance fails a truncating conversion. (Version 5 on the CPU SIMT emulator: its
header's [[emulate]] tables, tests/test_emulator.py.)

Its NumPy reference (at the end): against torch.optim.AdamW (after clip_grad_norm_'s scaling) in
float64, with and without clipping; the clip factor; the steps make_step draws clip in some cases
only. The tests that call PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.adamw import adamw, clip_factor, make_step
from workbench.check import make_case
from workbench.family import Project

from conftest import ROOT
from references_helpers import needs_torch, torch


FAMILY = Project(ROOT).family("adamw")


def passes(expected, got, atol, rtol):
    return bool(np.all(np.abs(got - expected) <= atol + rtol * np.abs(expected)))


def test_adamw_returns_the_bf16_copy_of_the_updated_params_only_at_bf16():
    fam = FAMILY
    bf16 = make_case(fam, {"N": 37}, 1, "bf16")
    assert np.array_equal(bf16.expected["params_bf16"], bf16.expected["params"])
    assert "params_bf16" not in make_case(fam, {"N": 37}, 1).expected


def test_the_adamw_tolerance_fails_a_truncating_bf16_conversion():
    fam = FAMILY
    arg = next(a for a in fam.args_for("bf16") if a.name == "params_bf16")
    want = make_case(fam, {"N": 4099}, 0, "bf16").expected["params_bf16"]
    bits = np.asarray(want, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    assert not passes(want, bits.view(np.float32).astype(np.float64), *fam.tolerance(arg, "bf16"))


# -- the reference ---------------------------------------------------------------------------------
def torch_adamw_step(params, grads, m, v, hp, norm2, max_norm):
    """torch.optim.AdamW (the plain, non-fused float64 path) resumed at step t, after scaling the
    gradient as torch.nn.utils.clip_grad_norm_ would for this global norm."""
    lr, beta1, beta2, eps, weight_decay, t = hp
    p = torch.tensor(params, requires_grad=True)
    opt = torch.optim.AdamW([p], lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay,
                            foreach=False)
    p.grad = torch.tensor(grads) * clip_factor(norm2[0], max_norm)
    opt.state[p] = {"step": torch.tensor(t - 1.0), "exp_avg": torch.tensor(m), "exp_avg_sq": torch.tensor(v)}
    opt.step()
    s = opt.state[p]
    return p.detach().numpy(), s["exp_avg"].numpy(), s["exp_avg_sq"].numpy()


@needs_torch
@pytest.mark.parametrize("N", [1, 3, 37, 4099])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("norm", [0.5, 3.0])  # below max_norm (no clipping) and above it
def test_adamw_matches_torch_adamw_with_clipping(N, weight_decay, norm):
    rng = np.random.default_rng(N)
    params, grads = rng.normal(0, 0.02, N), rng.normal(0, 0.01, N)
    m, v = rng.normal(0, 0.01, N), rng.uniform(0, 1e-4, N)
    hp = np.array([3e-4, 0.9, 0.999, 1e-8, weight_decay, 3.0])
    norm2 = np.array([norm * norm])
    got = adamw(params, grads, m, v, hp, norm2, max_norm=1.0)
    want = torch_adamw_step(params, grads, m, v, hp, norm2, 1.0)
    for name, w in zip(("params", "m", "v"), want):
        np.testing.assert_allclose(got[name], w, rtol=1e-10, atol=1e-15, err_msg=name)


def test_adamw_clipping_scales_the_gradient_only_above_max_norm():
    assert clip_factor(0.25, 1.0) == 1.0
    assert clip_factor(4.0, 1.0) == pytest.approx(0.5)
    assert clip_factor(0.0, 1.0) == 1.0
    rng = np.random.default_rng(5)
    args = dict(params=rng.normal(size=8), grads=rng.normal(size=8), m=np.zeros(8), v=np.zeros(8),
                hp=np.array([1e-3, 0.9, 0.999, 1e-8, 0.0, 1.0]))
    small = adamw(**args, norm2=np.array([0.25]))
    big = adamw(**args, norm2=np.array([4.0]))
    np.testing.assert_allclose(big["m"], 0.5 * small["m"])
    np.testing.assert_allclose(big["v"], 0.25 * small["v"])


def test_adamw_make_step_clips_in_some_cases_and_not_in_others():
    clipped = []
    for seed in range(6):
        d = make_step(np.random.default_rng(seed))
        lr, beta1, beta2, eps, wd, t = d["hp"]
        assert (lr, beta1, beta2, eps, t) == (3e-4, 0.9, 0.999, 1e-8, 3.0) and wd in (0.0, 0.1)
        assert 1 / 3 - 1e-9 <= np.sqrt(d["norm2"][0]) <= 3 + 1e-9
        clipped.append(clip_factor(d["norm2"][0], 1.0) < 1)
    assert any(clipped) and not all(clipped)
