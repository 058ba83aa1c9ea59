"""bf16 for the misc group's families (gelu_forward, gelu_backward, encoder_forward,
encoder_backward, adamw, global_norm, permute, unpermute), on the CPU: the contracts' bf16
tables, the references at bf16 at every test size, the new versions' precision and coverage of
the test sizes, the error analyses behind the tolerances (a correctly rounded result passes,
the mistakes they are meant to catch fail), the PyTorch expressions at bf16, and adamw 5's kernel
on the CPU SIMT emulator (tests/gpu_emu)."""

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.check import from_storage, make_case, to_storage
from workbench.family import Project

from conftest import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

# family -> (the arguments that are bf16 at this precision, (atol, rtol) of its bf16 outputs)
CONTRACTS = {
    "gelu_forward": ({"out", "inp"}, (1e-2, 1e-2)),
    "gelu_backward": ({"dinp", "inp", "dout"}, (1e-2, 1e-2)),
    "encoder_forward": ({"out", "wte", "wpe"}, (1e-2, 1e-2)),
    "encoder_backward": ({"dwte", "dwpe", "dout"}, (1e-2, 1e-2)),
    "adamw": ({"grads", "params_bf16"}, (1e-7, 5e-3)),
    "global_norm": ({"grads"}, (1e-12, 1e-5)),
    "permute": ({"q", "k", "v", "inp"}, (0.0, 0.0)),
    "unpermute": ({"out", "inp"}, (0.0, 0.0)),
}
NEW_VERSIONS = {"gelu_forward": [4], "gelu_backward": [4], "encoder_forward": [4, 5],
                "encoder_backward": [4, 6], "adamw": [4, 5], "global_norm": [4], "permute": [3],
                "unpermute": [3]}
FAMILIES = sorted(CONTRACTS)


def family(name):
    return Project(ROOT).family(name)


def rounded(values):
    """float64 values rounded to the nearest bf16 (as float64)."""
    return from_storage(to_storage(np.asarray(values, dtype=np.float32), "bf16"), "bf16").astype(np.float64)


def passes(expected, got, atol, rtol):
    return bool(np.all(np.abs(got - expected) <= atol + rtol * np.abs(expected)))


@pytest.mark.parametrize("name", FAMILIES)
def test_the_bf16_contract_changes_only_the_float_arguments_it_names(name):
    fam = family(name)
    bf16_args, (atol, rtol) = CONTRACTS[name]
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
                                  for n in FAMILIES])  # (its test sizes hold a 50257 x 1600 table: seconds)
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


@pytest.mark.parametrize("name", FAMILIES)
def test_the_new_versions_are_bf16_and_some_bf16_version_takes_every_test_size(name):
    fam = family(name)
    for number in NEW_VERSIONS[name]:
        v = fam.version(number)
        assert v.precision == "bf16" and v.deterministic, v.path
        assert {a.name for a in v.args if a.dtype == "bf16"} == CONTRACTS[name][0]
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


def test_adamw_returns_the_bf16_copy_of_the_updated_params_only_at_bf16():
    fam = family("adamw")
    bf16 = make_case(fam, {"N": 37}, 1, "bf16")
    assert np.array_equal(bf16.expected["params_bf16"], bf16.expected["params"])
    assert "params_bf16" not in make_case(fam, {"N": 37}, 1).expected


def test_the_adamw_tolerance_fails_a_truncating_bf16_conversion():
    fam = family("adamw")
    arg = next(a for a in fam.args_for("bf16") if a.name == "params_bf16")
    want = make_case(fam, {"N": 4099}, 0, "bf16").expected["params_bf16"]
    bits = np.asarray(want, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    assert not passes(want, bits.view(np.float32).astype(np.float64), *fam.tolerance(arg, "bf16"))


def test_the_encoder_backward_tolerance_fails_a_bf16_running_sum():
    """dwte rounded to bf16 after every added row (what bf16 atomics or a bf16 accumulator do)
    drifts past the tolerance when few tokens collect many rows; rounding once does not."""
    fam = family("encoder_backward")
    sizes = {"B": 8, "T": 64, "C": 40, "V": 2}
    case = make_case(fam, sizes, 0, "bf16")
    dwte = from_storage(case.inputs["dwte"], "bf16").astype(np.float64)
    dout = from_storage(case.inputs["dout"], "bf16").astype(np.float64).reshape(-1, sizes["C"])
    for position, token in enumerate(case.inputs["inp"].reshape(-1)):
        dwte[token] = rounded(dwte[token] + dout[position])
    atol, rtol = fam.tolerance(fam.arg("dwte"), "bf16")
    assert not passes(case.expected["dwte"], dwte, atol, rtol)
    assert passes(case.expected["dwte"], rounded(case.expected["dwte"]), atol, rtol)


def test_the_bf16_torch_expressions_run_on_the_cpu():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    assert family("adamw").torch_expression("bf16") is None  # no baseline: see its contract
    exact = {"gelu_forward", "gelu_backward", "encoder_forward", "permute", "unpermute"}
    for name in FAMILIES:
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


# ---- adamw 5 on the emulator --------------------------------------------------------------------
# Every test size (N = 1 and 3: the scalar tail alone; 37, 4099, 1048579: float4 groups and a tail
# of 1 or 3) at two seeds: seed 0 neither clips nor decays, seed 1 clips (norm ~2.8 > max_norm 1)
# with weight decay 0.1. Seed 0 at the smallest block size with one warp racing ahead, seed 1 at
# the largest with the warps in step.
ADAMW = family("adamw")
ADAMW_EMULATED = [(sizes, seed) for sizes in ADAMW.test_sizes for seed in (0, 1)]


@pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
@pytest.mark.parametrize("sizes, seed", ADAMW_EMULATED,
                         ids=[f"{ADAMW.format_sizes(s)}-seed{seed}" for s, seed in ADAMW_EMULATED])
def test_adamw_5_on_the_emulator(sizes, seed):
    version = ADAMW.version(5)
    block_size = version.block_sizes[0] if seed == 0 else version.block_sizes[-1]
    reports = runner.emulate(version, sizes, seed=seed, block_size=block_size, mode="LATE",
                             sched="PRIORITY" if seed == 0 else "SHUFFLE")
    assert {r.name for r in reports} == {"params", "m", "v", "params_bf16"}
    for r in reports:
        assert r.ok, f"{r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"
