"""The checks that span kernel families, one group of families at a time: every version has a
test size it accepts, the test sizes are odd where they must be, the reference gives every output
of the contract at every test size, the contracts agree with the trainer's table, and each
family's `torch` expression, evaluated the way the bench's worker does, agrees with its reference.
Each family's own reference tests (against PyTorch in float64, finite differences, by hand) are in
its tests/test_<family>.py; the helpers they share in tests/references_helpers.py. The tests that
evaluate PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from workbench.check import compare, make_case, make_inputs, run_reference
from workbench.family import Project

from conftest import ROOT
from references_helpers import F, needs_torch, t, torch

ATTENTION = ["attention_forward", "attention_backward", "relu_attention_forward",
             "relu_attention_backward", "trimat_forward", "permute", "unpermute"]
ELEMENTWISE = ["residual_forward", "fused_residual_forward", "gelu_forward", "gelu_backward",
               "layernorm_backward", "layernorm_backward_proj_bias"]
MATMUL = ["matmul_forward", "matmul_backward", "matmul_backward_bias", "sgemm", "matmul_forward_gelu",
          "matmul_backward_dgelu"]
MISC = ["encoder_forward", "encoder_backward", "adamw", "global_norm", "reduce"]
SOFTMAX = ["softmax_forward", "crossentropy_forward", "crossentropy_softmax_backward",
           "fused_classifier"]


@pytest.fixture(scope="module")
def project():
    return Project(ROOT)


# -- the attention families ------------------------------------------------------------------------
@pytest.mark.parametrize("family", ATTENTION)
def test_every_version_has_a_test_size_meeting_its_preconditions(project, family):
    fam = project.family(family)
    assert len(fam.versions) >= 2
    assert any(s["HS"] % 4 for s in fam.test_sizes) and any(s["T"] % 4 for s in fam.test_sizes)
    for v in fam.versions:
        assert any(not v.unmet(s) for s in fam.test_sizes), f"{v.path.name}: no test size it accepts"


@needs_torch
@pytest.mark.parametrize("family", ATTENTION)
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


# -- the elementwise families ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_every_version_has_a_test_size_meeting_its_preconditions_beside_the_defaults(name):
    fam = Project(ROOT).family(name)
    for v in fam.versions:
        usable = [s for s in fam.test_sizes if s != fam.default_sizes and not v.unmet(s)]
        assert usable, f"{v.path.name}: no test size satisfies {v.preconditions}"


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_test_sizes_include_odd_rows_and_a_single_element(name):
    fam = Project(ROOT).family(name)
    assert any(s["C"] % 4 for s in fam.test_sizes), "need C not a multiple of 4"
    assert any(all(v == 1 for v in s.values()) for s in fam.test_sizes), "need a single element"


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_the_reference_returns_every_output_of_the_contract(name):
    fam = Project(ROOT).family(name)
    sizes = min(fam.test_sizes, key=lambda s: np.prod(list(s.values())))
    case = make_case(fam, sizes, seed=0)
    assert {a.name for a in fam.args if a.is_output} == set(case.expected)


# -- the matmul families ---------------------------------------------------------------------------
def test_the_contracts_match_the_trainer_table():
    project = Project(ROOT)
    roles = {f: {a.name: (a.role, a.shape) for a in project.family(f).args} for f in MATMUL}
    assert roles["matmul_forward"] == {"out": ("out", "B, T, OC"), "inp": ("in", "B, T, C"),
                                       "weight": ("in", "OC, C"), "bias": ("in", "OC")}
    assert roles["matmul_backward"] == {"dinp": ("out", "B, T, C"), "dweight": ("inout", "OC, C"),
                                        "dout": ("in", "B, T, OC"), "inp": ("in", "B, T, C"),
                                        "weight": ("in", "OC, C")}
    assert roles["matmul_backward_bias"] == {"dbias": ("inout", "OC"), "dout": ("in", "B, T, OC")}
    for f in ("matmul_backward", "sgemm"):
        assert project.family(f).params == {"tf32": 0}
    # zero_bias: the caller's promise that the bias is zero (the lm head), which a version may use
    assert project.family("matmul_forward").params == {"tf32": 0, "zero_bias": 0}


@needs_torch
@pytest.mark.parametrize("family", MATMUL)
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


@pytest.mark.parametrize("family", MATMUL)
def test_every_test_size_runs_through_the_reference(family):
    fam = Project(ROOT).family(family)
    for sizes in fam.test_sizes:
        case = make_case(fam, sizes, seed=0)
        for arg in fam.args:
            if arg.is_output:
                assert case.expected[arg.name].shape == fam.shape(arg, sizes)
                assert np.isfinite(case.expected[arg.name]).all()


@pytest.mark.parametrize("family", MATMUL)
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


# -- the encoder and optimizer families ------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("family", MISC)
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


# -- the softmax and cross-entropy families --------------------------------------------------------
@pytest.mark.parametrize("name", SOFTMAX)
def test_every_version_has_a_test_size_meeting_its_preconditions_besides_the_default(project, name):
    fam = project.family(name)
    for v in fam.versions:
        ok = [s for s in fam.test_sizes if not v.unmet(s) and s != fam.default_sizes]
        assert ok, f"{v.label}: no test size satisfies {v.preconditions}"
    assert any(not fam.version(1).unmet(s) for s in fam.test_sizes)


@pytest.mark.parametrize("name", SOFTMAX)
def test_test_sizes_are_odd(project, name):
    fam = project.family(name)
    last = fam.sizes[-1]  # the row length (V or Vp)
    assert any(s[last] == 1 for s in fam.test_sizes)
    assert any(s[last] % 4 for s in fam.test_sizes if s[last] > 4)


@pytest.mark.parametrize("name", SOFTMAX)
def test_reference_runs_on_every_test_size(project, name):
    fam = project.family(name)
    for sizes in fam.test_sizes:
        case = make_case(fam, sizes, seed=0)
        for arg in fam.args:
            if arg.is_output:
                assert case.expected[arg.name].shape == fam.shape(arg, sizes)
                assert np.isfinite(case.expected[arg.name]).all(), f"{name} {sizes} {arg.name}"


@needs_torch
@pytest.mark.parametrize("name", SOFTMAX)
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
