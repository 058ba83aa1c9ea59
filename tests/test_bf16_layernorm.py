"""The bf16 precision of the layernorm group (layernorm_forward, layernorm_backward,
fused_residual_forward, residual_forward), on the CPU: the contracts, the reference at every size,
the new versions' headers, and the PyTorch baselines where the CPU build can run them."""

import numpy as np
import pytest

from workbench.check import compare, from_storage, make_case, to_storage
from workbench.family import Project

from conftest import ROOT

# family -> (the args that become bf16, the bf16 versions)
BF16 = {
    "layernorm_forward": (["out", "inp", "weight", "bias"], [8, 9, 10]),
    "layernorm_backward": (["dinp", "dweight", "dbias", "dout", "inp", "weight"], [6, 7, 9, 11, 12]),
    "fused_residual_forward": (["residual", "normed", "inp1", "inp2", "weight", "bias"], [4, 5, 6]),
    "residual_forward": (["out", "inp1", "inp2"], [4]),
}
FAMILIES = sorted(BF16)
# Versions whose column sums use float atomics (their last bits vary from run to run)
NOT_DETERMINISTIC = {("layernorm_backward", 11), ("layernorm_backward", 12)}


def family(name):
    return Project(ROOT).family(name)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_contract_lists_the_bf16_args_and_the_curriculum_tolerance(name):
    fam = family(name)
    p = fam.precisions["bf16"]
    assert sorted(p.args) == sorted(BF16[name][0]) and set(p.args.values()) == {"bf16"}
    assert (p.atol, p.rtol) == (1e-2, 1e-2)
    for arg in fam.args_for("bf16"):
        if arg.name in p.args:
            assert arg.dtype == "bf16"
        else:  # mean and rstd: still fp32, and still held to the fp32 tolerance
            assert arg.dtype == "f32" and fam.tolerance(arg, "bf16") == fam.tolerance(arg, "fp32")
    assert fam.bytes_moved(fam.default_sizes, "bf16") < fam.bytes_moved(fam.default_sizes)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_reference_runs_at_bf16_at_every_size(name):
    fam = family(name)
    for sizes in [fam.default_sizes, *fam.test_sizes]:
        case = make_case(fam, sizes, 0, "bf16")
        for arg in fam.args_for("bf16"):
            if arg.is_input and arg.dtype == "bf16":
                assert case.inputs[arg.name].dtype == np.uint16
            if arg.is_output:
                assert np.isfinite(case.expected[arg.name]).all(), (name, sizes, arg.name)


@pytest.mark.parametrize("name", FAMILIES)
def test_the_new_versions_are_bf16_and_one_of_them_takes_every_test_size(name):
    fam = family(name)
    versions = [fam.version(n) for n in BF16[name][1]]
    assert all(v.precision == "bf16" for v in versions)
    assert [v.number for v in fam.versions if v.precision == "bf16"] == BF16[name][1]
    for v in versions:
        assert v.deterministic == ((name, v.number) not in NOT_DETERMINISTIC), v.label
        for arg in v.args:
            assert arg.dtype == ("bf16" if arg.name in BF16[name][0] else "f32")
    for sizes in [fam.default_sizes, *fam.test_sizes]:
        assert any(not v.unmet(sizes) for v in versions), f"no bf16 version of {name} takes {sizes}"
    assert not any(v.unmet(fam.default_sizes) for v in versions)  # the fast ones are timed too


def test_the_fast_layernorm_forward_serves_gpt2_and_gpt2_xl():
    v = family("layernorm_forward").version(9)
    for C in (768, 1600):
        assert not v.unmet({"B": 8, "T": 1024, "C": C})


def test_fused_residual_must_normalize_the_fp32_sum_not_the_rounded_residual():
    """The family's tolerance comment: mean and rstd keep fp32's 1e-5, and the statistics of the
    bf16-rounded residual miss the reference's (of the exact sum) by more than that."""
    fam = family("fused_residual_forward")
    sizes = {"B": 2, "T": 64, "C": 768}
    case = make_case(fam, sizes, 0, "bf16")
    exact = sum(from_storage(case.inputs[k], "bf16").astype(np.float64) for k in ("inp1", "inp2"))
    rounded = from_storage(to_storage(exact.astype(np.float32), "bf16"), "bf16").astype(np.float64)
    mean_arg = next(a for a in fam.args_for("bf16") if a.name == "mean")
    atol, rtol = fam.tolerance(mean_arg, "bf16")
    assert compare(mean_arg, case.expected["mean"], exact.mean(-1), atol, rtol).ok
    assert not compare(mean_arg, case.expected["mean"], rounded.mean(-1), atol, rtol).ok
    # the residual itself is one rounding of the sum: inside the bf16 tolerance
    res_arg = next(a for a in fam.args_for("bf16") if a.name == "residual")
    assert compare(res_arg, case.expected["residual"], rounded, *fam.tolerance(res_arg, "bf16")).ok


def test_one_rounding_passes_the_bf16_tolerance_and_a_truncation_of_the_sum_of_columns_does_not():
    """dweight's sum over N rows, rounded once at the end, passes; a bf16 running sum fails."""
    fam = family("layernorm_backward")
    sizes = {"B": 4, "T": 256, "C": 64}
    case = make_case(fam, sizes, 0, "bf16")
    arg = next(a for a in fam.args_for("bf16") if a.name == "dbias")
    dout = from_storage(case.inputs["dout"], "bf16").reshape(-1, sizes["C"])
    start = from_storage(case.inputs["dbias"], "bf16")
    once = from_storage(to_storage((start + dout.astype(np.float32).sum(0)).astype(np.float32), "bf16"), "bf16")
    assert compare(arg, case.expected["dbias"], once, *fam.tolerance(arg, "bf16")).ok
    running = start.copy()
    for row in dout:
        running = from_storage(to_storage(running + row, "bf16"), "bf16")
    assert not compare(arg, case.expected["dbias"], running, *fam.tolerance(arg, "bf16")).ok


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
