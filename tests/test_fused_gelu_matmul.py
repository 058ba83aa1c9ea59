"""The fc layer's GELU fused into its GEMMs (matmul_forward_gelu, matmul_backward_dgelu): the
references against PyTorch's autograd in float64, the contracts (which versions take which sizes,
the bf16 bias gradient's tolerance), the naive versions on the CPU emulator, and gemm_lt's choice
of cuBLASLt epilogue. Every test size through the reference and the PyTorch expressions: with the
other matmul families in tests/test_references.py. The library versions themselves need the GPU
(`workbench run`)."""

import shutil
import sys

import numpy as np
import pytest

from references.gelu_forward import gelu_forward
from references.matmul_backward_dgelu import matmul_backward_dgelu
from references.matmul_forward_gelu import matmul_forward_gelu
from workbench.check import from_storage, make_case, to_storage
from workbench.errors import ContractError
from workbench.family import Project
from workbench.library_calls import _epilogue

from conftest import ROOT, project_with

FAMILIES = ["matmul_forward_gelu", "matmul_backward_dgelu"]
SHAPES = [(1, 1, 1, 1), (2, 3, 37, 5), (1, 7, 33, 16)]  # (B, T, C, OC)


def draw(shape, seed):
    rng = np.random.default_rng(seed)
    b, t, c, oc = shape
    return rng.normal(0, 1.5, (b, t, c)), rng.normal(0, 0.5, (oc, c)), rng.normal(0, 0.5, oc), rng.normal(size=(b, t, oc))


def test_the_forward_is_linear_then_tanh_gelu():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for shape in SHAPES:
        inp, weight, bias, _ = draw(shape, 0)
        got = matmul_forward_gelu(inp, weight, bias)
        pre = F.linear(*(torch.from_numpy(a) for a in (inp, weight, bias)))
        np.testing.assert_allclose(got["pre"], pre.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got["out"], F.gelu(pre, approximate="tanh").numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_backward_is_autograd_through_gelu_then_linear_and_accumulates(shape):
    """For out = gelu(pre) @ weight^T + bias: dpre and the bias gradient of the layer that made
    pre (the column sums of dpre) against autograd; dweight and dpre_bias add to what they held."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    pre, _, _, _ = draw(shape, 1)
    b, t, c, oc = shape
    rng = np.random.default_rng(2)
    weight, bias, dout = rng.normal(0, 0.5, (oc, c)), rng.normal(0, 0.5, oc), rng.normal(size=(b, t, oc))
    upstream_bias = rng.normal(size=c)  # a bias added before the GELU: its gradient is dpre's column sums
    p, ub, w = (torch.from_numpy(a).requires_grad_() for a in (pre, upstream_bias, weight))
    inp = F.gelu(p + ub, approximate="tanh")
    F.linear(inp, w, torch.from_numpy(bias)).backward(torch.from_numpy(dout))
    dpre_bias0, dweight0 = rng.normal(size=c), rng.normal(size=(oc, c))
    got = matmul_backward_dgelu(dpre_bias0.copy(), dweight0.copy(), dout, inp.detach().numpy(), pre + upstream_bias,
                                weight)
    np.testing.assert_allclose(got["dpre"], p.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["dpre_bias"], dpre_bias0 + ub.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["dweight"], dweight0 + w.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("family, dim", [("matmul_forward_gelu", "OC"), ("matmul_backward_dgelu", "C")])
def test_the_library_versions_need_aux_rows_a_multiple_of_8_and_the_naive_one_takes_any_size(family, dim):
    """cuBLASLt's GELU aux matrix (pre) has rows a multiple of 8 elements apart: the library
    versions say so and are checked at the odd test sizes that keep it; version 1 takes them all."""
    fam = Project(ROOT).family(family)
    assert any(s == {k: 1 for k in fam.sizes} for s in fam.test_sizes)
    naive = fam.version(1)
    assert not any(naive.unmet(s) for s in fam.test_sizes)
    library = [v for v in fam.versions if any(st.kind == "library" for st in v.steps) and v.arch != "sm_90a"]
    assert {v.precision for v in library} == {"fp32", "bf16"}
    for v in library:
        assert list(v.preconditions) == [f"{dim} % 8 == 0"]
        accepted = [s for s in fam.test_sizes if not v.unmet(s)]
        assert len(accepted) >= 4 and not v.unmet(fam.default_sizes)
        assert any(s["B"] * s["T"] % 2 and s[{"C": "OC", "OC": "C"}[dim]] % 4 for s in accepted), "odd N and other dim"


@pytest.mark.parametrize("number", [7, 8, 9, 10, 11, 12, 13, 14, 15])
def test_the_tma_gemm_is_checked_past_every_edge_of_its_tiles(number):
    """matmul_forward_gelu 7-13 (TMA boxes of 128 rows x 64 k, 192 or 128 output columns a tile)
    need C and OC multiples of 8 (the TMA's 16-byte rows, their 16-byte stores); the test sizes they
    accept must still end a tile's rows, columns and k-steps part-way, hold fewer than 8 rows, and
    have an odd count of 128-row blocks (version 8 takes them in pairs)."""
    fam = Project(ROOT).family("matmul_forward_gelu")
    v = fam.version(number)
    assert list(v.preconditions) == ["C % 8 == 0", "OC % 8 == 0"] and v.arch == "sm_90a"
    accepted = [s for s in fam.test_sizes if not v.unmet(s)]
    assert len(accepted) >= 3 and not v.unmet(fam.default_sizes)
    rows = [s["B"] * s["T"] for s in accepted]
    assert any(n % 128 and n > 128 for n in rows) and any(n < 8 for n in rows)
    assert any(-(-n // 128) % 2 for n in rows)  # version 8's pairs: one whose second tile is past N's rows
    assert any(s["C"] % 64 and s["C"] > 64 for s in accepted)
    assert any(s["OC"] % 192 and s["OC"] > 192 for s in accepted)


@pytest.mark.parametrize("number", [8, 9, 10])
def test_the_dgelu_gemm_is_checked_past_every_edge_of_its_tiles_and_with_tiles_in_turn(number):
    """matmul_backward_dgelu 8 and 9 (our ping-pong GEMM: TMA boxes of 128 rows x 64 k, 128 x 128 tiles,
    the weight transposed into scratch) needs C and OC multiples of 8; the test sizes it accepts
    must end a tile's rows, columns and k-steps part-way, hold fewer than 8 rows, and have more than
    two tiles a block on 132 SMs, so that its second warpgroup and the turns between the two run."""
    fam = Project(ROOT).family("matmul_backward_dgelu")
    v = fam.version(number)
    assert list(v.preconditions) == ["C % 8 == 0", "OC % 8 == 0"] and v.arch == "sm_90a"
    accepted = [s for s in fam.test_sizes if not v.unmet(s)]
    assert len(accepted) >= 3 and not v.unmet(fam.default_sizes)
    rows = [s["B"] * s["T"] for s in accepted]
    assert any(n % 128 and n > 128 for n in rows) and any(n < 8 for n in rows)
    assert any(s["C"] % 128 and s["C"] > 128 for s in accepted)
    assert any(s["OC"] % 64 and s["OC"] > 64 for s in accepted)
    tiles = [-(-s["B"] * s["T"] // 128) * -(-s["C"] // 128) for s in accepted]
    assert max(tiles) > 2 * 132


# -- gemm_lt's epilogue for its options --------------------------------------------------------------
NONE = dict(bias=0, gelu=False, aux=0, dgelu=False, bias_grad=0)


@pytest.mark.parametrize("options, want", [
    (dict(), ("DEFAULT", [])),
    (dict(bias=8), ("BIAS", [("BIAS_POINTER", 8)])),
    (dict(gelu=True), ("GELU", [])),
    (dict(bias=8, gelu=True), ("GELU_BIAS", [("BIAS_POINTER", 8)])),
    (dict(gelu=True, aux=16), ("GELU_AUX", [("EPILOGUE_AUX_POINTER", 16)])),
    (dict(bias=8, gelu=True, aux=16), ("GELU_AUX_BIAS", [("BIAS_POINTER", 8), ("EPILOGUE_AUX_POINTER", 16)])),
    (dict(dgelu=True, aux=16), ("DGELU", [("EPILOGUE_AUX_POINTER", 16)])),
    (dict(dgelu=True, aux=16, bias_grad=24), ("DGELU_BGRAD", [("EPILOGUE_AUX_POINTER", 16), ("BIAS_POINTER", 24)])),
])
def test_gemm_lt_picks_the_epilogue_and_its_pointers(options, want):
    assert _epilogue(**{**NONE, **options}) == want


@pytest.mark.parametrize("options, message", [
    (dict(dgelu=True), "dgelu needs aux"),
    (dict(dgelu=True, aux=16, bias=8), "takes no bias"),
    (dict(bias_grad=24), "needs dgelu"),
    (dict(aux=16), "needs gelu"),
])
def test_gemm_lt_refuses_epilogue_options_that_do_not_go_together(options, message):
    with pytest.raises(ContractError, match=message):
        _epilogue(**{**NONE, **options})


# -- the naive versions on the emulator -------------------------------------------------------------
@pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
@pytest.mark.parametrize("family", FAMILIES)
def test_the_naive_versions_on_the_emulator(family):
    sys.path.insert(0, str(ROOT / "tests" / "gpu_emu"))
    import runner
    fam = Project(ROOT).family(family)
    for sizes, seed in ((fam.test_sizes[0], 0), (fam.test_sizes[1], 1), (fam.test_sizes[4], 2)):
        for r in runner.emulate(fam.version(1), sizes, seed=seed, block_size=64):
            assert r.ok, f"{fam.format_sizes(sizes)} {r.name}: {r.bad} of {r.total} wrong"


def test_gelu_of_the_reference_is_gelu_forwards():
    x = np.linspace(-6, 6, 101)
    got = matmul_forward_gelu(x.reshape(1, -1, 1), np.ones((1, 1)), np.zeros(1))
    np.testing.assert_allclose(got["out"].ravel(), gelu_forward(x)["out"], rtol=0, atol=0)


def _bf16(values):
    return from_storage(to_storage(np.asarray(values, dtype=np.float32), "bf16"), "bf16").astype(np.float64)


def test_dpre_bias_at_bf16_admits_the_sum_of_dpre_as_written_and_rejects_a_lost_row():
    """At bf16 a version sums dpre as it wrote it, rounded to bf16 (the unfused trainer's order:
    gelu_backward writes bf16, matmul_backward_bias sums that): N roundings that the family's
    1e-2 cannot absorb where a column sums to near zero. Its own atol takes that at the default
    sizes, every seed, and still fails a version that loses one row of the N."""
    fam = Project(ROOT).family("matmul_backward_dgelu")
    arg = fam.arg("dpre_bias")
    atol, rtol = fam.tolerance(arg, "bf16")  # at the default sizes, N = 8192
    assert (round(atol, 4), rtol) == (0.0299, 1e-2) and fam.tolerance(fam.arg("dpre"), "bf16") == (1e-2, 1e-2)
    assert fam.tolerance(arg, "fp32") == (1e-3, 1e-4)
    for seed in fam.seeds:
        case = make_case(fam, fam.default_sizes, seed, "bf16")
        ref, dpre = case.expected["dpre_bias"], case.expected["dpre"]
        rows = _bf16(dpre).reshape(-1, dpre.shape[-1])
        start = from_storage(case.inputs["dpre_bias"], "bf16").astype(np.float64)

        def passes(got):
            return bool(np.all(np.abs(_bf16(got) - ref) <= atol + rtol * np.abs(ref)))
        assert not passes(start), "a version that adds nothing passes"
        assert passes(start + rows.sum(axis=0)), seed
        assert not passes(start + rows[1:].sum(axis=0)), (seed, "a lost row passes")
        with pytest.raises(AssertionError):  # the family-wide atol alone would not take it
            assert np.all(np.abs(_bf16(start + rows.sum(axis=0)) - ref) <= 1e-2 + rtol * np.abs(ref))


def test_dpre_bias_atol_grows_as_the_walk_of_n_roundings():
    """The walk of N roundings grows as sqrt(N): the trainer's B = 16 (N = 16384) gets sqrt(2)
    times the default sizes' atol, B = 32 twice it; the smallest N its floor. At the family's
    test sizes the sum of dpre as written passes and, where a row carries weight (OC > 1), a lost
    row fails."""
    fam = Project(ROOT).family("matmul_backward_dgelu")
    arg = fam.arg("dpre_bias")
    at = lambda b, t=1024: fam.tolerance(arg, "bf16", {"B": b, "T": t, "C": 3072, "OC": 768})[0]
    assert at(16) == pytest.approx(at(8) * 2 ** 0.5) and at(32) == pytest.approx(2 * at(8))
    assert at(1, 1) == 2e-3 and fam.tolerance(arg, "fp32", {"B": 32, "T": 1024, "C": 3072, "OC": 768}) == (1e-3, 1e-4)
    for sizes, seed in ((fam.test_sizes[1], 0), (fam.test_sizes[6], 1)):
        case = make_case(fam, sizes, seed, "bf16")
        ref, dpre = case.expected["dpre_bias"], case.expected["dpre"]
        rows = _bf16(dpre).reshape(-1, sizes["C"])
        start = from_storage(case.inputs["dpre_bias"], "bf16").astype(np.float64)
        atol, rtol = fam.tolerance(arg, "bf16", sizes)
        bad = lambda got: int(np.sum(np.abs(_bf16(got) - ref) > atol + rtol * np.abs(ref)))
        assert bad(start + rows.sum(axis=0)) == 0, sizes
        assert bad(start + rows[1:].sum(axis=0)) > 0, (sizes, "a lost row passes")


def test_an_own_atol_expression_names_only_sizes(tmp_path):
    src = Project(ROOT).family("matmul_backward_dgelu").path
    toml = project_with(tmp_path, src.name) / "family.toml"
    toml.write_text(toml.read_text().replace('"max(2e-3, 3.3e-4 * sqrt(N))"', '"3e-4 * sqrt(Q)"'))
    with pytest.raises(ContractError, match=r"tolerance.dpre_bias: atol '3e-4 \* sqrt\(Q\)' uses unknown name\(s\) Q"):
        Project(tmp_path).family(src.name)


def test_an_own_tolerance_is_only_for_an_output_the_precision_changes(tmp_path):
    src = Project(ROOT).family("matmul_backward_dgelu").path
    for bad, what in (("dout = { atol = 1.0, rtol = 1.0 }", "dout"), ("nosuch = { atol = 1.0, rtol = 1.0 }", "nosuch"),
                      ("dpre = 1.0", "dpre")):
        root = tmp_path / what
        toml = project_with(root, src.name) / "family.toml"
        toml.write_text(toml.read_text().replace('dpre_bias = { atol = "max(2e-3, 3.3e-4 * sqrt(N))", rtol = 1e-2 }', bad))
        with pytest.raises(ContractError, match=f"tolerance.{what}: only an output this precision changes"):
            Project(root).family(src.name)
