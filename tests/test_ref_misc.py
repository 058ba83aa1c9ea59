"""The misc group's NumPy references against PyTorch on the CPU (float64), at odd sizes:
encoder_forward, encoder_backward (also by finite differences), adamw, global_norm, reduce; and
each family's own PyTorch baseline expression, evaluated as the bench does, against its reference."""

import numpy as np
import pytest

from references.adamw import adamw, clip_factor, make_step
from references.encoder_backward import encoder_backward
from references.encoder_forward import encoder_forward
from references.global_norm import global_norm
from references.reduce import reduce
from workbench.check import make_case
from workbench.family import Project

from conftest import ROOT

torch = pytest.importorskip("torch")
F = torch.nn.functional


def tokens(rng, B, T, V):
    return rng.integers(0, V, size=(B, T))


@pytest.mark.parametrize("B, T, C, V", [(1, 1, 1, 1), (2, 3, 37, 5), (3, 5, 36, 2), (1, 7, 1600, 11)])
def test_encoder_forward_matches_torch_embedding(B, T, C, V):
    rng = np.random.default_rng(0)
    inp, wte, wpe = tokens(rng, B, T, V), rng.normal(size=(V, C)), rng.normal(size=(T, C))
    out = encoder_forward(inp, wte, wpe)["out"]
    want = F.embedding(torch.from_numpy(inp), torch.from_numpy(wte)) + torch.from_numpy(wpe)
    np.testing.assert_array_equal(out, want.numpy())


def test_encoder_forward_uses_the_position_of_each_token():
    wte = np.zeros((3, 2))
    wpe = np.array([[1.0, 2.0], [10.0, 20.0]])
    out = encoder_forward(np.array([[2, 2]]), wte, wpe)["out"]
    np.testing.assert_array_equal(out[0], wpe)


@pytest.mark.parametrize("B, T, C, V", [(1, 1, 1, 1), (2, 3, 5, 1), (2, 3, 37, 5), (4, 33, 36, 7)])
def test_encoder_backward_matches_torch_autograd_and_accumulates(B, T, C, V):
    rng = np.random.default_rng(1)
    inp, dout = tokens(rng, B, T, V), rng.normal(size=(B, T, C))
    dwte0, dwpe0 = rng.normal(size=(V, C)), rng.normal(size=(T, C))
    wte = torch.zeros(V, C, dtype=torch.float64, requires_grad=True)
    wpe = torch.zeros(T, C, dtype=torch.float64, requires_grad=True)
    (F.embedding(torch.from_numpy(inp), wte) + wpe).backward(torch.from_numpy(dout))
    got = encoder_backward(dwte0, dwpe0, dout, inp)
    np.testing.assert_allclose(got["dwte"], dwte0 + wte.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["dwpe"], dwpe0 + wpe.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_encoder_backward_leaves_its_inputs_alone():
    rng = np.random.default_rng(2)
    dwte, dwpe = rng.normal(size=(3, 4)), rng.normal(size=(2, 4))
    keep = dwte.copy(), dwpe.copy()
    encoder_backward(dwte, dwpe, rng.normal(size=(1, 2, 4)), np.array([[1, 1]]))
    np.testing.assert_array_equal(dwte, keep[0])
    np.testing.assert_array_equal(dwpe, keep[1])


def test_encoder_backward_by_finite_differences():
    # L = sum(out * dout) is linear in wte and wpe, so central differences are exact up to rounding.
    rng = np.random.default_rng(3)
    B, T, C, V = 2, 3, 4, 3
    inp = np.array([[0, 2, 0], [0, 1, 2]])  # token 0 three times: repeated rows must add up
    dout, wte, wpe = rng.normal(size=(B, T, C)), rng.normal(size=(V, C)), rng.normal(size=(T, C))
    got = encoder_backward(np.zeros((V, C)), np.zeros((T, C)), dout, inp)

    def loss(wte, wpe):
        return float((encoder_forward(inp, wte, wpe)["out"] * dout).sum())

    h = 1e-6
    for name, x, grad in (("wte", wte, got["dwte"]), ("wpe", wpe, got["dwpe"])):
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            plus, minus = x.copy(), x.copy()
            plus[idx] += h
            minus[idx] -= h
            args = {"wte": wte, "wpe": wpe}
            lp = loss(**{**args, name: plus})
            lm = loss(**{**args, name: minus})
            fd[idx] = (lp - lm) / (2 * h)
        np.testing.assert_allclose(grad, fd, atol=1e-7, err_msg=name)


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


@pytest.mark.parametrize("N", [1, 3, 37, 100003])
def test_global_norm_matches_torch_vector_norm(N):
    g = np.random.default_rng(N).normal(0, 0.01, N)
    got = global_norm(g)["norm2"]
    want = torch.linalg.vector_norm(torch.from_numpy(g)) ** 2
    assert got.shape == (1,)
    np.testing.assert_allclose(got[0], want.item(), rtol=1e-12)


@pytest.mark.parametrize("N", [1, 2, 3, 1000003])
def test_reduce_matches_torch_sum(N):
    x = np.random.default_rng(N).uniform(0, 1, N)
    got = reduce(x)["out"]
    assert got.shape == (1,)
    np.testing.assert_allclose(got[0], torch.from_numpy(x).sum().item(), rtol=1e-12)


FAMILIES = ["encoder_forward", "encoder_backward", "adamw", "global_norm", "reduce"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_torch_baseline_expression_agrees_with_the_reference(family):
    """The contract's `torch` expression, evaluated the way the bench's worker does (float32
    tensors, no builtins, `ref` = the reference module), on the CPU at a small test size."""
    fam = Project(ROOT).family(family)
    sizes = min(fam.test_sizes, key=lambda s: abs(np.prod(list(s.values())) - 5000))
    for seed in (0, 1):
        case = make_case(fam, sizes, seed)
        tensors = {k: torch.from_numpy(np.array(v)) for k, v in case.inputs.items()}
        env = {**fam.env(sizes), **tensors, "torch": torch, "F": F, "ref": fam.reference_module}
        got = eval(compile(fam.torch, family, "eval"), {"__builtins__": {}}, env)
        got = got if isinstance(got, (tuple, list)) else (got,)
        assert len(got) == len(fam.torch_outputs)
        for name, value in zip(fam.torch_outputs, got):
            arg = fam.arg(name)
            atol = arg.atol if arg.atol is not None else fam.atol
            rtol = arg.rtol if arg.rtol is not None else fam.rtol
            np.testing.assert_allclose(value.numpy().reshape(-1), case.expected[name].reshape(-1),
                                       atol=atol, rtol=rtol, err_msg=f"{family} {name} seed {seed}")
