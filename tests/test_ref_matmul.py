"""The matmul group's references (matmul_forward, matmul_backward, matmul_backward_bias, sgemm)
against PyTorch on the CPU in float64 at odd sizes; the backward references also against
autograd and finite differences; the contracts' PyTorch expressions and test sizes."""

import numpy as np
import pytest

from references.matmul_backward import matmul_backward
from references.matmul_backward_bias import matmul_backward_bias
from references.matmul_forward import matmul_forward
from references.sgemm import sgemm
from workbench.check import make_case
from workbench.family import Project

from conftest import ROOT

torch = pytest.importorskip("torch")
F = torch.nn.functional

FAMILIES = ["matmul_forward", "matmul_backward", "matmul_backward_bias", "sgemm"]
# (B, T, C, OC): a single element, nothing a multiple of 4, OC past a 128-tile
SHAPES = [(1, 1, 1, 1), (2, 3, 37, 5), (1, 7, 33, 130)]


def t(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def draw(shape, seed):
    rng = np.random.default_rng(seed)
    b, tt, c, oc = shape
    return (rng.normal(size=(b, tt, c)), rng.normal(0, 0.5, size=(oc, c)),
            rng.normal(size=oc), rng.normal(size=(b, tt, oc)))


# -- forward ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_matmul_forward_matches_torch_linear(shape):
    inp, weight, bias, _ = draw(shape, 0)
    want = F.linear(t(inp), t(weight), t(bias)).numpy()
    got = matmul_forward(inp, weight, bias)["out"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mnk", [(1, 1, 1), (3, 5, 7), (33, 65, 17)])
def test_sgemm_matches_torch_matmul(mnk):
    m, n, k = mnk
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, size=(m, k)), rng.uniform(-1, 1, size=(k, n))
    got = sgemm(a, b)["C"]
    assert got.shape == (m, n)
    np.testing.assert_allclose(got, (t(a) @ t(b)).numpy(), rtol=1e-12, atol=1e-12)


# -- backward against autograd ---------------------------------------------------------------------
def autograd(inp, weight, bias, dout):
    x, w, b = (t(v).requires_grad_() for v in (inp, weight, bias))
    F.linear(x, w, b).backward(t(dout))
    return x.grad.numpy(), w.grad.numpy(), b.grad.numpy()


@pytest.mark.parametrize("shape", SHAPES)
def test_matmul_backward_matches_autograd_and_accumulates(shape):
    inp, weight, bias, dout = draw(shape, 2)
    dweight0 = np.random.default_rng(3).normal(size=weight.shape)
    dx, dw, _ = autograd(inp, weight, bias, dout)
    ref = matmul_backward(dweight0.copy(), dout, inp, weight)
    np.testing.assert_allclose(ref["dinp"], dx, rtol=1e-12, atol=1e-12)
    # dweight is an inout: the reference must return old + new, not overwrite
    np.testing.assert_allclose(ref["dweight"], dweight0 + dw, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_matmul_backward_bias_matches_autograd_and_accumulates(shape):
    inp, weight, bias, dout = draw(shape, 4)
    dbias0 = np.random.default_rng(5).normal(size=bias.shape)
    _, _, db = autograd(inp, weight, bias, dout)
    ref = matmul_backward_bias(dbias0.copy(), dout)
    np.testing.assert_allclose(ref["dbias"], dbias0 + db, rtol=1e-12, atol=1e-12)


# -- backward against finite differences -----------------------------------------------------------
def numeric_grad(f, x, h=1e-6):
    """Central differences of the scalar f() with respect to every element of x (in place)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        keep = x[i]
        x[i] = keep + h
        up = f()
        x[i] = keep - h
        down = f()
        x[i] = keep
        g[i] = (up - down) / (2 * h)
    return g


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (2, 3, 5, 7)])
def test_matmul_backward_references_match_finite_differences(shape):
    inp, weight, bias, dout = draw(shape, 6)
    loss = lambda: float((dout * matmul_forward(inp, weight, bias)["out"]).sum())
    ref = matmul_backward(np.zeros_like(weight), dout, inp, weight)
    np.testing.assert_allclose(ref["dinp"], numeric_grad(loss, inp), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ref["dweight"], numeric_grad(loss, weight), rtol=1e-6, atol=1e-7)
    dbias = matmul_backward_bias(np.zeros_like(bias), dout)["dbias"]
    np.testing.assert_allclose(dbias, numeric_grad(loss, bias), rtol=1e-6, atol=1e-7)


# -- the contracts ---------------------------------------------------------------------------------
def test_the_contracts_match_the_trainer_table():
    project = Project(ROOT)
    roles = {f: {a.name: (a.role, a.shape) for a in project.family(f).args} for f in FAMILIES}
    assert roles["matmul_forward"] == {"out": ("out", "B, T, OC"), "inp": ("in", "B, T, C"),
                                       "weight": ("in", "OC, C"), "bias": ("in", "OC")}
    assert roles["matmul_backward"] == {"dinp": ("out", "B, T, C"), "dweight": ("inout", "OC, C"),
                                        "dout": ("in", "B, T, OC"), "inp": ("in", "B, T, C"),
                                        "weight": ("in", "OC, C")}
    assert roles["matmul_backward_bias"] == {"dbias": ("inout", "OC"), "dout": ("in", "B, T, OC")}
    for f in ("matmul_forward", "matmul_backward", "sgemm"):
        assert project.family(f).params == {"tf32": 0}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_torch_expression_agrees_with_the_reference(family):
    """The expression the worker times beside us, evaluated on the CPU the way the worker does."""
    fam = Project(ROOT).family(family)
    sizes = fam.test_sizes[2]
    case = make_case(fam, sizes, seed=0)
    tensors = {k: t(v) for k, v in case.inputs.items()}
    env = {**fam.env(sizes), **tensors, "torch": torch, "F": F, "ref": fam.reference_module}
    got = eval(compile(fam.torch, family, "eval"), {"__builtins__": {}}, env)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(fam.torch_outputs)
    for name, value in zip(fam.torch_outputs, got):
        want = case.expected[name]
        np.testing.assert_allclose(value.numpy().reshape(want.shape), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_test_size_runs_through_the_reference(family):
    fam = Project(ROOT).family(family)
    for sizes in fam.test_sizes:
        case = make_case(fam, sizes, seed=0)
        for arg in fam.args:
            if arg.is_output:
                assert case.expected[arg.name].shape == fam.shape(arg, sizes)
                assert np.isfinite(case.expected[arg.name]).all()


@pytest.mark.parametrize("family", FAMILIES)
def test_every_version_is_checked_at_a_test_size_and_odd_sizes_are_covered(family):
    fam = Project(ROOT).family(family)
    for v in fam.versions:
        accepted = [s for s in fam.test_sizes if not v.unmet(s) and s != fam.default_sizes]
        assert accepted, f"{v.path.name}: no test size meets its preconditions"
        assert not v.unmet(fam.default_sizes), f"{v.path.name}: cannot run at the classic sizes"
    assert any(s == {k: 1 for k in fam.sizes} for s in fam.test_sizes), "size 1 is a test size"
    assert any(any(x % 4 for x in s.values()) for s in fam.test_sizes), "sizes not multiples of 4"


@pytest.mark.parametrize("family, odd", [
    ("matmul_forward", {"B": 1, "T": 7, "C": 33, "OC": 130}),
    ("sgemm", {"M": 127, "N": 129, "K": 131}),
])
def test_the_tile_versions_refuse_sizes_they_cannot_handle(family, odd):
    fam = Project(ROOT).family(family)
    tiled = [v for v in fam.versions if v.kernels and any("128" in p for p in v.preconditions)]
    assert tiled, "the 128x128-tile versions state their shape preconditions"
    for v in tiled:
        assert v.unmet(odd), f"{v.path.name} claims to handle {odd}"
    # the bounds-checked versions (naive, tiled, library) take any size
    assert any(not v.unmet(odd) for v in fam.versions if v not in tiled)


def test_the_vectorised_bias_versions_require_oc_multiple_of_4():
    fam = Project(ROOT).family("matmul_backward_bias")
    assert fam.version(5).unmet({"B": 2, "T": 3, "OC": 37}) == ["OC % 4 == 0"]
    assert fam.version(6).unmet({"B": 2, "T": 3, "OC": 37}) == ["OC % 4 == 0"]
    assert fam.version(4).unmet({"B": 2, "T": 3, "OC": 37}) == []


def test_flops_and_bytes_at_the_classic_sizes():
    project = Project(ROOT)
    fwd = project.family("matmul_forward")
    sizes = fwd.default_sizes
    n, c, oc = 8 * 1024, 768, 3072
    assert fwd.flops_done(sizes) == 2 * n * c * oc
    assert fwd.bytes_moved(sizes) == 4 * (n * c + oc * c + oc + n * oc)
    bias = project.family("matmul_backward_bias")
    assert bias.bytes_moved(bias.default_sizes) == 4 * (n * oc + 2 * oc)
    sg = project.family("sgemm")
    assert sg.flops_done(sg.default_sizes) == 2 * 4096 ** 3
