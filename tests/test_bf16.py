"""The bf16 precision across the families that have one, on the CPU: each family's bf16 table (which
arguments become bf16, the tolerance of its outputs), the references at bf16 at every test size,
the bf16 versions' precision and their coverage of the test sizes, the error analyses behind the
tolerances (a correctly rounded result passes, the mistakes they are meant to catch fail), and the
PyTorch expressions at bf16 where the CPU build can run them. Tables by group of families: the
loss head (fused_classifier, softmax_forward, crossentropy_forward,
crossentropy_softmax_backward), the layernorm group (layernorm_forward, layernorm_backward,
fused_residual_forward, residual_forward) and the rest (gelu_forward, gelu_backward,
encoder_forward, encoder_backward, adamw, global_norm, permute, unpermute). What is one family's
own is in its test file (tests/test_<family>.py).
"""

import numpy as np
import pytest

from workbench.check import compare, from_storage, make_case, to_storage
from workbench.family import Project

from conftest import ROOT


def family(name):
    return Project(ROOT).family(name)


def rounded(values):
    """float64 values rounded to the nearest bf16 (as float64)."""
    return from_storage(to_storage(np.asarray(values, dtype=np.float32), "bf16"), "bf16").astype(np.float64)


def passes(expected, got, atol, rtol):
    return bool(np.all(np.abs(got - expected) <= atol + rtol * np.abs(expected)))


# ---- the loss head -----------------------------------------------------------------------------
# family -> (the args that are bf16 at bf16, the bf16 versions this group added)
LOSS_HEAD = {
    "fused_classifier": ({"logits"}, {5, 6}),
    "softmax_forward": ({"inp", "out"}, {9, 10}),
    "crossentropy_forward": ({"probs"}, {2}),
    "crossentropy_softmax_backward": ({"probs", "dlogits"}, {3}),
}


# The fp32 tolerances of every output, as the fp32 contracts set them: bf16 must not loosen them.
FP32_TOLERANCE = {
    ("fused_classifier", "logits"): (1e-12, 1e-4),
    ("fused_classifier", "losses"): (1e-5, 1e-4),
    ("softmax_forward", "out"): (1e-8, 1e-4),
    ("crossentropy_forward", "losses"): (1e-5, 1e-5),
    ("crossentropy_softmax_backward", "dlogits"): (1e-10, 1e-5),
}


# One rounding to bf16 (8 significant bits) moves a value by at most 2^-8 of itself.
BF16_ROUNDING = 2.0 ** -8


@pytest.mark.parametrize("name", sorted(LOSS_HEAD))
def test_the_contract_lists_bf16_with_its_args(name):
    fam = family(name)
    assert "bf16" in fam.precision_names()
    assert set(fam.precisions["bf16"].args) == LOSS_HEAD[name][0]
    dtypes = {a.name: a.dtype for a in fam.args_for("bf16")}
    assert {n for n, d in dtypes.items() if d == "bf16"} == LOSS_HEAD[name][0]
    assert all(d == "i32" for n, d in dtypes.items() if n == "targets")


@pytest.mark.parametrize("name", sorted(LOSS_HEAD))
def test_fp32_tolerances_are_unchanged_and_fp32_outputs_keep_them_at_bf16(name):
    fam = family(name)
    for arg in fam.args:
        if not arg.is_output:
            continue
        assert fam.tolerance(arg, "fp32") == FP32_TOLERANCE[(name, arg.name)]
        if arg.name not in fam.precisions["bf16"].args:  # losses: computed in float at either precision
            assert fam.tolerance(arg, "bf16") == FP32_TOLERANCE[(name, arg.name)]


@pytest.mark.parametrize("name", sorted(LOSS_HEAD))
def test_bf16_tolerance_admits_one_rounding_and_rejects_zeros_and_two_percent(name):
    """The reference rounded once to bf16 (what a correct version stores) passes; an output of
    zeros, or one 2% off everywhere, fails: the tolerance is neither too tight nor toothless."""
    fam = family(name)
    args = {a.name: a for a in fam.args_for("bf16")}
    for sizes in fam.test_sizes:
        case = make_case(fam, sizes, 0, "bf16")
        for out in (n for n in fam.precisions["bf16"].args if args[n].is_output):
            atol, rtol = fam.tolerance(args[out], "bf16")
            assert BF16_ROUNDING * 2 <= rtol <= 1e-2
            ref = case.expected[out]

            def passes(got):
                return bool(np.all(np.abs(got - ref) <= atol + rtol * np.abs(ref)))

            assert passes(rounded(ref)), (name, sizes)
            if np.abs(ref).max() > 0:  # V = 1: every gradient is exactly 0
                assert not passes(np.zeros_like(ref)), (name, sizes, "zeros pass")
                assert not passes(ref * 1.02 + np.sign(ref) * 2 * atol), (name, sizes, "2% off passes")


@pytest.mark.parametrize("name", sorted(LOSS_HEAD))
def test_bf16_cases_hold_the_fp32_draws_rounded(name):
    fam = family(name)
    for sizes in fam.test_sizes:
        wide, narrow = make_case(fam, sizes, 1, "fp32"), make_case(fam, sizes, 1, "bf16")
        for arg in fam.args_for("bf16"):
            if not arg.is_input:
                continue
            got = narrow.inputs[arg.name]
            if arg.dtype == "bf16":
                assert got.dtype == np.uint16
                assert np.array_equal(got, to_storage(wide.inputs[arg.name], "bf16"))
            else:
                assert np.array_equal(got, wide.inputs[arg.name])
        for out, ref in narrow.expected.items():
            assert ref.shape == wide.expected[out].shape
            assert np.isfinite(ref).all()


@pytest.mark.parametrize("name", sorted(LOSS_HEAD))
def test_the_new_versions_are_bf16_and_one_handles_every_test_size(name):
    fam = family(name)
    versions = [v for v in fam.versions if v.number in LOSS_HEAD[name][1]]
    assert len(versions) == len(LOSS_HEAD[name][1])
    for v in versions:
        assert v.precision == "bf16" and v.kernels and v.changed and v.why, v.path
    for sizes in fam.test_sizes:
        assert any(not v.unmet(sizes) for v in versions), sizes
    # the numbering continues after the family's fp32 versions
    assert min(LOSS_HEAD[name][1]) == max(v.number for v in fam.versions if v.precision == "fp32") + 1


# ---- the layernorm group -----------------------------------------------------------------------
# family -> (the args that become bf16, the bf16 versions)
LAYERNORM_GROUP = {
    "layernorm_forward": (["out", "inp", "weight", "bias"], [8, 9, 10]),
    "layernorm_backward": (["dinp", "dweight", "dbias", "dout", "inp", "weight"], [6, 7, 9, 11, 12]),
    "fused_residual_forward": (["residual", "normed", "inp1", "inp2", "weight", "bias"], [4, 5, 6]),
    "residual_forward": (["out", "inp1", "inp2"], [4]),
}


LAYERNORM_FAMILIES = sorted(LAYERNORM_GROUP)


# Versions whose column sums use float atomics (their last bits vary from run to run)
NOT_DETERMINISTIC = {("layernorm_backward", 11), ("layernorm_backward", 12)}


@pytest.mark.parametrize("name", LAYERNORM_FAMILIES)
def test_the_contract_lists_the_bf16_args_and_the_curriculum_tolerance(name):
    fam = family(name)
    p = fam.precisions["bf16"]
    assert sorted(p.args) == sorted(LAYERNORM_GROUP[name][0]) and set(p.args.values()) == {"bf16"}
    assert (p.atol, p.rtol) == (1e-2, 1e-2)
    for arg in fam.args_for("bf16"):
        if arg.name in p.args:
            assert arg.dtype == "bf16"
        else:  # mean and rstd: still fp32, and still held to the fp32 tolerance
            assert arg.dtype == "f32" and fam.tolerance(arg, "bf16") == fam.tolerance(arg, "fp32")
    assert fam.bytes_moved(fam.default_sizes, "bf16") < fam.bytes_moved(fam.default_sizes)


@pytest.mark.parametrize("name", LAYERNORM_FAMILIES)
def test_the_reference_runs_at_bf16_at_every_size(name):
    fam = family(name)
    for sizes in [fam.default_sizes, *fam.test_sizes]:
        case = make_case(fam, sizes, 0, "bf16")
        for arg in fam.args_for("bf16"):
            if arg.is_input and arg.dtype == "bf16":
                assert case.inputs[arg.name].dtype == np.uint16
            if arg.is_output:
                assert np.isfinite(case.expected[arg.name]).all(), (name, sizes, arg.name)


@pytest.mark.parametrize("name", LAYERNORM_FAMILIES)
def test_the_new_versions_are_bf16_and_one_of_them_takes_every_test_size(name):
    fam = family(name)
    versions = [fam.version(n) for n in LAYERNORM_GROUP[name][1]]
    assert all(v.precision == "bf16" for v in versions)
    assert [v.number for v in fam.versions if v.precision == "bf16"] == LAYERNORM_GROUP[name][1]
    for v in versions:
        assert v.deterministic == ((name, v.number) not in NOT_DETERMINISTIC), v.label
        for arg in v.args:
            assert arg.dtype == ("bf16" if arg.name in LAYERNORM_GROUP[name][0] else "f32")
    for sizes in [fam.default_sizes, *fam.test_sizes]:
        assert any(not v.unmet(sizes) for v in versions), f"no bf16 version of {name} takes {sizes}"
    assert not any(v.unmet(fam.default_sizes) for v in versions)  # the fast ones are timed too


def _torch_inputs(torch, fam, case):
    out = {}
    for arg in fam.args_for("bf16"):
        if arg.name not in case.inputs:
            continue
        shape = fam.shape(arg, case.sizes)
        if arg.dtype == "bf16":
            out[arg.name] = torch.from_numpy(case.inputs[arg.name].astype(np.int16).reshape(shape)).view(torch.bfloat16)
        else:
            out[arg.name] = torch.from_numpy(np.array(case.inputs[arg.name]).reshape(shape))
    return out


# layernorm_backward's baseline is GPU-only at bf16: PyTorch's CPU LayerNorm backward wants mean
# and rstd in the input's dtype, its GPU kernel (what is timed) in fp32.
@pytest.mark.parametrize("name", ["layernorm_forward", "residual_forward", "fused_residual_forward"])
def test_the_torch_baseline_at_bf16_runs_and_passes_on_the_cpu(name):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    fam = family(name)
    sizes = fam.test_sizes[1]
    case = make_case(fam, sizes, 0, "bf16")
    env = {**fam.env(sizes), **_torch_inputs(torch, fam, case), "torch": torch, "F": F, "ref": fam.reference_module}
    got = eval(compile(fam.torch_expression("bf16"), name, "eval"), {"__builtins__": {}}, env)
    got = got if isinstance(got, (tuple, list)) else (got,)
    args = {a.name: a for a in fam.args_for("bf16")}
    for out, value in zip(fam.torch_outputs, got):
        arg = args[out]
        value = value.detach().to(torch.bfloat16 if arg.dtype == "bf16" else torch.float32).float().numpy()
        assert compare(arg, case.expected[out], value, *fam.tolerance(arg, "bf16")).ok, out


# ---- the other families ------------------------------------------------------------------------
# family -> (the arguments that are bf16 at this precision, (atol, rtol) of its bf16 outputs)
MISC_CONTRACTS = {
    "gelu_forward": ({"out", "inp"}, (1e-2, 1e-2)),
    "gelu_backward": ({"dinp", "inp", "dout"}, (1e-2, 1e-2)),
    "encoder_forward": ({"out", "wte", "wpe"}, (1e-2, 1e-2)),
    "encoder_backward": ({"dwte", "dwpe", "dout"}, (1e-2, 1e-2)),
    "adamw": ({"grads", "params_bf16"}, (1e-7, 5e-3)),
    "global_norm": ({"grads"}, (1e-12, 1e-5)),
    "permute": ({"q", "k", "v", "inp"}, (0.0, 0.0)),
    "unpermute": ({"out", "inp"}, (0.0, 0.0)),
}


MISC_NEW_VERSIONS = {"gelu_forward": [4], "gelu_backward": [4], "encoder_forward": [4, 5],
                "encoder_backward": [4, 6], "adamw": [4, 5], "global_norm": [4], "permute": [3],
                "unpermute": [3]}


MISC_FAMILIES = sorted(MISC_CONTRACTS)


@pytest.mark.parametrize("name", MISC_FAMILIES)
def test_the_bf16_contract_changes_only_the_float_arguments_it_names(name):
    fam = family(name)
    bf16_args, (atol, rtol) = MISC_CONTRACTS[name]
    assert (fam.precisions["bf16"].atol, fam.precisions["bf16"].rtol) == (atol, rtol)
    args = {a.name: a for a in fam.args_for("bf16")}
    assert {n for n, a in args.items() if a.dtype == "bf16"} == bf16_args
    for a in fam.args:  # the others keep their fp32 types (token ids stay int32)
        if a.name not in bf16_args:
            assert args[a.name].dtype == a.dtype
    for n in bf16_args:
        if args[n].is_output:
            assert fam.tolerance(args[n], "bf16") == (atol, rtol)
    for a in fam.args:  # fp32 outputs keep the family's fp32 tolerance at bf16
        if a.is_output and a.name not in bf16_args:
            assert fam.tolerance(args[a.name], "bf16") == fam.tolerance(a)


# At every test size: the reference runs on the bf16-rounded inputs, and its exact outputs
# rounded once to nearest bf16 pass the bf16 tolerance (it covers the one rounding every bf16
# output has; permute and unpermute move bf16 values, which round to themselves).
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "encoder_backward" else n
                                  for n in MISC_FAMILIES])  # (its test sizes hold a 50257 x 1600 table: seconds)
def test_the_reference_runs_at_bf16_and_its_rounded_outputs_pass(name):
    fam = family(name)
    args = fam.args_for("bf16")
    for sizes in fam.test_sizes:
        case = make_case(fam, sizes, 0, "bf16")
        for a in args:
            if a.is_input:
                assert case.inputs[a.name].dtype == (np.uint16 if a.dtype == "bf16" else a.np_dtype)
            if a.is_output:
                want = case.expected[a.name]
                assert np.isfinite(want).all(), (name, sizes, a.name)
                if a.dtype == "bf16":
                    assert passes(want, rounded(want), *fam.tolerance(a, "bf16")), (name, sizes, a.name)


@pytest.mark.parametrize("name", MISC_FAMILIES)
def test_the_new_versions_are_bf16_and_some_bf16_version_takes_every_test_size(name):
    fam = family(name)
    for number in MISC_NEW_VERSIONS[name]:
        v = fam.version(number)
        assert v.precision == "bf16" and v.deterministic, v.path
        assert {a.name for a in v.args if a.dtype == "bf16"} == MISC_CONTRACTS[name][0]
    bf16 = [v for v in fam.versions if v.precision == "bf16"]
    for sizes in [fam.default_sizes, *fam.test_sizes]:
        assert any(not v.unmet(sizes) for v in bf16), (name, sizes)


def test_bytes_at_bf16():
    sizes = {"B": 8, "T": 1024, "C": 768, "V": 50257}
    N, C, T = 8 * 1024, 768, 1024
    assert family("encoder_forward").bytes_moved(sizes, "bf16") == 2 * (2 * N * C + T * C) + 4 * N
    assert family("encoder_backward").bytes_moved(sizes, "bf16") == 2 * (N * C + 2 * N * C + 2 * T * C) + 4 * N
    assert family("gelu_backward").bytes_moved({"B": 2, "T": 3, "C": 4}, "bf16") == 2 * 3 * 24
    assert family("adamw").bytes_moved({"N": 1000}, "bf16") == 28 * 1000 + 28  # as at fp32
    assert family("global_norm").bytes_moved({"N": 1000}, "bf16") == 2 * 1000 + 4
    assert family("permute").bytes_moved({"B": 2, "T": 3, "NH": 4, "HS": 8}, "bf16") == 2 * 6 * 192


def test_the_bf16_torch_expressions_run_on_the_cpu():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    assert family("adamw").torch_expression("bf16") is None  # no baseline: see its contract
    exact = {"gelu_forward", "gelu_backward", "encoder_forward", "permute", "unpermute"}
    for name in MISC_FAMILIES:
        fam = family(name)
        expression = fam.torch_expression("bf16")
        if expression is None:
            continue
        sizes = fam.test_sizes[2]
        case = make_case(fam, sizes, 0, "bf16")
        views = {}
        for a in fam.args_for("bf16"):
            shape = fam.shape(a, sizes)
            if a.is_input:
                value = np.ascontiguousarray(case.inputs[a.name])
                t = torch.from_numpy(value.view(np.int16) if a.dtype == "bf16" else value.copy())
                views[a.name] = (t.view(torch.bfloat16) if a.dtype == "bf16" else t).reshape(shape).clone()
            else:
                views[a.name] = torch.full(shape, float("nan"),
                                           dtype=torch.bfloat16 if a.dtype == "bf16" else torch.float32)
        env = {**fam.env(sizes), **views, "torch": torch, "F": F, "ref": fam.reference_module}
        got = eval(compile(expression, name, "eval"), {"__builtins__": {}}, env)
        got = got if isinstance(got, (tuple, list)) else (got,)
        assert len(got) == len(fam.torch_outputs)
        for out, value in zip(fam.torch_outputs, got):
            arg = next(a for a in fam.args_for("bf16") if a.name == out)
            assert value.dtype == (torch.bfloat16 if arg.dtype == "bf16" else torch.float32), (name, out)
            value = value.detach().float().numpy().astype(np.float64).reshape(case.expected[out].shape)
            # CPU PyTorch sums bf16 in bf16 (encoder_backward) and fp32 norms naively: only the
            # single-rounding ops are held to the tolerance here; the GPU runs check the rest.
            if name in exact:
                assert passes(case.expected[out], value, *fam.tolerance(arg, "bf16")), (name, out)


def test_storing_bf16_rounds_half_to_even_bit_for_bit_as_one_value_at_a_time_does():
    """to_storage works in place on whole arrays; this is the rounding written out for one value
    at a time (half to even on the 16 bits dropped; NaN stays a quiet NaN), over every 4099th
    float32 bit pattern, the ties, the largest finite values and float64 input."""
    import struct

    from workbench.check import from_storage, to_storage

    def one(x: float) -> int:
        bits = struct.unpack("<I", struct.pack("<f", x))[0]
        if x != x:
            return 0x7FC0
        low, high = bits & 0xFFFF, bits >> 16
        if low > 0x8000 or (low == 0x8000 and high & 1):
            high += 1
        return high & 0xFFFF

    patterns = np.arange(0, 2**32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ties = np.array([1.00390625, 1.01171875, 1.0078125, -1.00390625, 3.4028235e38, -3.4028235e38, 0.0, -0.0,
                     1e-45, np.inf, -np.inf, np.nan], dtype=np.float32)
    for values in (patterns[::97], ties):
        assert to_storage(values, "bf16").tolist() == [one(float(v)) for v in values]
    wide = np.linspace(-3, 3, 1001)  # float64 in: the float32 value rounded
    assert np.array_equal(to_storage(wide, "bf16"), to_storage(wide.astype(np.float32), "bf16"))
    stored = to_storage(patterns, "bf16")
    back = from_storage(stored, "bf16")
    assert back.dtype == np.float32 and np.array_equal(to_storage(back, "bf16"), stored), "a stored value is exact"
