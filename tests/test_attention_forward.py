"""The attention_forward family, without a GPU.

* the bf16 contract: qkv and out rounded, lse kept in fp32; the reference at bf16;
* the tensor-core versions 7 (TF32) and 8 (bf16): precision and tolerance, exactly one launch
  step at every size, and their fragment index maps checked against a model of the PTX
  instructions (mma.sync, ldmatrix) as the PTX ISA documents their layouts;
* version 10 (bf16: 32 query rows a warp, P V a tile behind, one barrier a tile): its header
  (bf16 at the family's tolerance, exactly one kernel at every size, the grid and the shared
  memory that two blocks an SM need); on the CPU SIMT emulator (tests/gpu_emu) beyond its
  [[emulate]] cases (tests/test_emulator.py: the family's test sizes and sizes that run the
  steady-state loop for several tiles, exact tile multiples, a padded 128 head, warps wholly
  past T): PV_LAG 0 (P V in the same iteration as its scores, the other setting of the
  version's switch), and the softmax's lazy reference point (it moves only when a tile's maximum
  passes it by more than RESCALE_SLACK = 8, in log2 units): with slack 0 (o rescaled on every
  increase of a row's maximum), and at the real slack on scores that grow along the keys, so that
  rows move their reference point many times in late tiles (with normal(0, 1) inputs it almost
  never moves after the first tile).

Its NumPy reference (at the end): against PyTorch's causal SDPA and logsumexp in float64 at odd
sizes; it does not look ahead. The tests that call PyTorch skip themselves where it is not
installed.
"""

import functools
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from references.attention_forward import attention_forward
from workbench import expr
from workbench.check import Case, from_storage, make_case, make_inputs, run_reference, to_storage
from workbench.family import Project

from conftest import ROOT
from references_helpers import (ATTENTION_SHAPES, needs_torch, packed, torch, torch_causal_scores,
                                torch_sdpa_packed)

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402
from runner import emulate  # noqa: E402


FAMILY = Project(ROOT).family("attention_forward")
NUMBER = 10  # the two-tile bf16 version
VERSION = FAMILY.version(NUMBER)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def test_bf16_contract_rounds_qkv_and_out_and_keeps_lse_fp32():
    p = FAMILY.precisions["bf16"]
    assert set(p.args) == {"out", "qkv"}
    assert (p.atol, p.rtol) == (1e-2, 1e-2)
    args = {a.name: a.dtype for a in FAMILY.args_for("bf16")}
    assert args == {"out": "bf16", "lse": "f32", "qkv": "bf16"}


@pytest.mark.parametrize("sizes", FAMILY.test_sizes, ids=FAMILY.format_sizes)
def test_reference_runs_at_bf16(sizes):
    case = make_case(FAMILY, sizes, 0, "bf16")
    assert case.inputs["qkv"].dtype == np.uint16
    assert np.isfinite(case.expected["out"]).all() and np.isfinite(case.expected["lse"]).all()


def test_versions_7_and_8_are_fp32_tf32_and_bf16():
    v7, v8 = FAMILY.version(7), FAMILY.version(8)
    assert v7.precision == "fp32" and v8.precision == "bf16"
    # TF32 needs its own, looser tolerance than the family's fp32 one, and stays well under bf16's.
    assert 1e-4 < v7.atol <= 5e-3 and 1e-3 < v7.rtol <= 5e-3
    assert v8.atol is None and v8.rtol is None  # the family's bf16 tolerance


@pytest.mark.parametrize("number", [7, 8])
@pytest.mark.parametrize("sizes", [FAMILY.default_sizes, *FAMILY.test_sizes,
                                   {"B": 1, "T": 1, "NH": 1, "HS": 128}, {"B": 1, "T": 1, "NH": 1, "HS": 72},
                                   {"B": 1, "T": 1, "NH": 1, "HS": 99}], ids=FAMILY.format_sizes)
def test_exactly_one_kernel_runs_at_every_size(number, sizes):
    v = FAMILY.version(number)
    assert not v.unmet(sizes), "the tensor-core versions handle every head size up to 128"
    env = FAMILY.env(sizes)
    chosen = [s for s in v.steps if expr.evaluate(s.when, env)]
    assert len(chosen) == 1, [s.name for s in chosen]
    hsp = 64 if sizes["HS"] <= 64 else 128
    assert chosen[0].name.startswith(f"attention_forward{number}_hs{hsp}")
    assert chosen[0].name.endswith("_any") == (sizes["HS"] % (8 if number == 8 else 4) != 0)


def lanes():
    return [(l, l // 4, l % 4) for l in range(32)]


def ldmatrix_x4(smem, rows, trans=False):
    """rows[l] = (r, c): lane l's row address (8 elements from smem[r, c:c+8]); returns the 4
    registers of every lane as pairs."""
    regs = [[None] * 32 for _ in range(4)]
    for i in range(4):
        mat = np.array([smem[r, c:c + 8] for r, c in rows[8 * i:8 * i + 8]])  # 8 x 8
        for l, g, t in lanes():
            regs[i][l] = (mat[2 * t, g], mat[2 * t + 1, g]) if trans else (mat[g, 2 * t], mat[g, 2 * t + 1])
    return regs


def mma_16816(a, b0, b1):
    """a: 4 registers of pairs, b0/b1: registers of pairs (per lane); returns D (16 x 8)."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for l, g, t in lanes():
        for e in range(2):
            A[g, 2 * t + e], A[g + 8, 2 * t + e] = a[0][l][e], a[1][l][e]
            A[g, 2 * t + 8 + e], A[g + 8, 2 * t + 8 + e] = a[2][l][e], a[3][l][e]
            B[2 * t + e, g], B[2 * t + 8 + e, g] = b0[l][e], b1[l][e]
    return A @ B


def mma_1688(a, b0, b1):
    """TF32: a: 4 registers (one value per lane), b0, b1 likewise; returns D (16 x 8)."""
    A, B = np.zeros((16, 8)), np.zeros((8, 8))
    for l, g, t in lanes():
        A[g, t], A[g + 8, t], A[g, t + 4], A[g + 8, t + 4] = a[0][l], a[1][l], a[2][l], a[3][l]
        B[t, g], B[t + 4, g] = b0[l], b1[l]
    return A @ B


def c_fragment(D):
    """A 16 x 8 result as the 4 accumulators of every lane."""
    return [[D[g + 8 * (e // 2), 2 * t + e % 2] for l, g, t in lanes()] for e in range(4)]


def accumulators(n_tiles):
    return [[np.zeros(32) for _ in range(4)] for _ in range(n_tiles)]


def accumulate(acc, D):
    for e, values in enumerate(c_fragment(D)):
        acc[e] += values


def assert_holds(acc, M):
    """acc (n-tiles of 8 columns, in the C layout) holds the 16 x 8n matrix M."""
    for n, tile in enumerate(acc):
        for e, want in enumerate(c_fragment(M[:, 8 * n:8 * n + 8])):
            np.testing.assert_allclose(tile[e], want, atol=1e-9)


def test_version_8_fragment_maps_compute_q_kT_and_p_v():
    rng = np.random.default_rng(0)
    HSP, BC = 64, 64
    Q, K, V = rng.normal(size=(16, HSP)), rng.normal(size=(BC, HSP)), rng.normal(size=(BC, HSP))
    # S = Q K^T: s[j][e] for 8-key n-tile j, from the version's ldmatrix row addresses.
    s = accumulators(BC // 8)
    for kk in range(HSP // 16):
        qf = ldmatrix_x4(Q, [(l % 16, 16 * kk + 8 * (l // 16)) for l in range(32)])
        for p in range(BC // 16):
            kb = ldmatrix_x4(K, [(16 * p + l % 8 + 8 * (l // 16), 16 * kk + 8 * (l // 8 % 2)) for l in range(32)])
            accumulate(s[2 * p], mma_16816(qf, kb[0], kb[1]))
            accumulate(s[2 * p + 1], mma_16816(qf, kb[2], kb[3]))
    S = Q @ K.T
    assert_holds(s, S)
    # O = P V with P's A fragment taken from the score accumulators (P = S here: the map is linear).
    o = accumulators(HSP // 8)
    for kk in range(BC // 16):
        pa = [[(s[2 * kk + h][2 * r][l], s[2 * kk + h][2 * r + 1][l]) for l in range(32)]
              for h in range(2) for r in range(2)]  # order: (n-tile 2kk: rows g, g+8), (2kk+1: g, g+8)
        for p in range(HSP // 16):
            vb = ldmatrix_x4(V, [(16 * kk + l % 16, 16 * p + 8 * (l // 16)) for l in range(32)], trans=True)
            accumulate(o[2 * p], mma_16816(pa, vb[0], vb[1]))
            accumulate(o[2 * p + 1], mma_16816(pa, vb[2], vb[3]))
    assert_holds(o, S @ V)


def test_version_7_renumbered_k_maps_compute_q_kT_and_p_v():
    rng = np.random.default_rng(1)
    HSP, BC = 64, 64
    Q, K, V = rng.normal(size=(16, HSP)), rng.normal(size=(BC, HSP)), rng.normal(size=(BC, HSP))
    s = accumulators(BC // 8)
    for kk in range(HSP // 8):
        c = [8 * kk + 2 * t for l, g, t in lanes()]
        qf = [[Q[g, c[l]] for l, g, t in lanes()], [Q[g + 8, c[l]] for l, g, t in lanes()],
              [Q[g, c[l] + 1] for l, g, t in lanes()], [Q[g + 8, c[l] + 1] for l, g, t in lanes()]]
        for n in range(BC // 8):
            b0 = [K[8 * n + g, c[l]] for l, g, t in lanes()]       # the float2's .x
            b1 = [K[8 * n + g, c[l] + 1] for l, g, t in lanes()]   # and .y
            accumulate(s[n], mma_1688(qf, b0, b1))
    S = Q @ K.T
    assert_holds(s, S)
    o = accumulators(HSP // 8)
    for kk in range(BC // 8):
        pa = [s[kk][0], s[kk][2], s[kk][1], s[kk][3]]
        for n in range(HSP // 8):
            b0 = [V[8 * kk + 2 * t, 8 * n + g] for l, g, t in lanes()]
            b1 = [V[8 * kk + 2 * t + 1, 8 * n + g] for l, g, t in lanes()]
            accumulate(o[n], mma_1688(pa, b0, b1))
    assert_holds(o, S @ V)


# ---- version 10 ----------------------------------------------------------------------------------
# Beyond the family's test sizes, as its header's [[emulate]] lists them: several full key tiles
# before the diagonal (the steady-state step) for both head paddings; T an exact multiple of the
# tiles; a 128 head padded from 96; a block whose last warps lie wholly past T (T = 140: rows
# 128..255, warps 1-3 empty).
EXTRA = [s for table in VERSION.emulate for s in table.sizes]
SIZES = [*FAMILY.test_sizes, *EXTRA]


def _ids(sizes):
    return FAMILY.format_sizes(sizes)


def test_version_10s_header():
    assert VERSION.precision == "bf16" and VERSION.deterministic
    assert VERSION.atol is None and VERSION.rtol is None  # the family's bf16 tolerance
    assert list(VERSION.preconditions) == ["HS <= 128"]


@pytest.mark.parametrize("sizes", [FAMILY.default_sizes, *SIZES,
                                   {"B": 4, "T": 1024, "NH": 12, "HS": 64}, {"B": 32, "T": 1024, "NH": 25, "HS": 64},
                                   {"B": 1, "T": 1, "NH": 1, "HS": 128}, {"B": 1, "T": 1, "NH": 1, "HS": 99}],
                         ids=_ids)
def test_version_10_runs_exactly_one_kernel_at_every_size(sizes):
    assert not VERSION.unmet(sizes)
    env = FAMILY.env(sizes)
    chosen = [s for s in VERSION.steps if expr.evaluate(s.when, env)]
    assert len(chosen) == 1, [s.name for s in chosen]
    (step,) = chosen
    hsp, rows = (64, 128) if sizes["HS"] <= 64 else (128, 64)
    assert step.name.startswith(f"attention_forward10_hs{hsp}")
    assert step.name.endswith("_any") == (sizes["HS"] % 8 != 0)
    grid = [expr.evaluate_int(g, env, "grid") for g in step.grid]
    assert grid == [sizes["B"] * sizes["NH"], -(-sizes["T"] // rows)]
    # Q (rows) + K and V stages of 64 rows, rows of HSP + 8 bf16: two blocks must fit an SM's
    # 227 KB (the register budget, 255 a thread at 2 x 128 threads, allows two).
    stages = 3 if hsp == 64 else 2
    shared = expr.evaluate_int(step.shared, env, "shared")
    assert shared == 2 * (rows + 2 * stages * 64) * (hsp + 8)
    assert 2 * shared <= 227 * 1024


def with_define(define):
    """runner.emulate with the driver defining `define` before it includes the version."""
    return functools.partial(runner.emulate, extra_source=f"#define {define}")


@pytest.fixture
def slack_zero():
    return with_define("RESCALE_SLACK 0.0f")


@pytest.fixture
def no_lag():
    return with_define("PV_LAG 0")


@needs_gxx
@pytest.mark.parametrize("sizes", [{"B": 1, "T": 300, "NH": 1, "HS": 64}, {"B": 1, "T": 200, "NH": 1, "HS": 128},
                                   {"B": 1, "T": 67, "NH": 2, "HS": 12}, {"B": 1, "T": 140, "NH": 1, "HS": 24}],
                         ids=_ids)
def test_without_the_lag(no_lag, sizes):
    """PV_LAG 0 (P V of tile j in iteration j, as in version 8) is correct too."""
    for r in no_lag(VERSION, sizes, seed=5, mode="LATE", sched="PRIORITY"):
        assert r.ok, f"{r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


@needs_gxx
@pytest.mark.parametrize("sizes", [{"B": 1, "T": 260, "NH": 2, "HS": 64}, {"B": 1, "T": 130, "NH": 2, "HS": 128},
                                   {"B": 2, "T": 100, "NH": 3, "HS": 16}], ids=_ids)
def test_rescaling_on_every_new_maximum(slack_zero, sizes):
    for r in slack_zero(VERSION, sizes, seed=4, mode="LATE", sched="PRIORITY"):
        assert r.ok, f"{r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


def growing_scores_case(sizes, seed):
    """The family's draw, with q x 3 and key t's k x (1 + t / 16): a row's scores grow along the
    keys, its running maximum passes the reference point by more than 8 (log2) again and again."""
    inputs = make_inputs(FAMILY, sizes, seed, "bf16")
    B, T, NH, HS = (sizes[k] for k in ("B", "T", "NH", "HS"))
    qkv = from_storage(inputs["qkv"], "bf16").reshape(B, T, 3, NH, HS).copy()
    qkv[:, :, 0] *= 3.0
    qkv[:, :, 1] *= (1.0 + np.arange(T) / 16.0)[None, :, None, None]
    inputs["qkv"] = to_storage(qkv.reshape(B, T, 3 * NH * HS).astype(np.float32), "bf16")
    return Case(dict(sizes), seed, inputs, run_reference(FAMILY, sizes, inputs, "bf16"), "bf16")


@needs_gxx
@pytest.mark.parametrize("sizes", [{"B": 1, "T": 300, "NH": 1, "HS": 64}, {"B": 1, "T": 200, "NH": 1, "HS": 128},
                                   {"B": 1, "T": 150, "NH": 2, "HS": 20}], ids=_ids)
def test_growing_scores_move_the_reference_point(sizes):
    case = growing_scores_case(sizes, 3)
    lse = case.expected["lse"]
    # The premise: late rows' log-sum-exp (~ their maximum score) is far above early rows'.
    assert lse[..., -1].min() - lse[..., 0].max() > 8 * np.log(2) * 4
    for r in emulate(VERSION, sizes, case=case, mode="LATE", sched="PRIORITY"):
        assert r.ok, f"{r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


# ---- version 11: version 10 at three blocks an SM (no lag, Q read from shared memory) ----------
# (its emulator cases are its header's [[emulate]] tables; with version 10's lag built in, below)
V11 = FAMILY.version(11)


@pytest.mark.parametrize("sizes", [FAMILY.default_sizes, {"B": 1, "T": 1, "NH": 1, "HS": 99},
                                   {"B": 2, "T": 100, "NH": 3, "HS": 12}], ids=_ids)
def test_version_11_launches_three_blocks_an_sm_at_hs64(sizes):
    assert V11.precision == "bf16" and V11.deterministic and list(V11.preconditions) == ["HS <= 128"]
    env = FAMILY.env(sizes)
    (step,) = [s for s in V11.steps if expr.evaluate(s.when, env)]
    hsp = 64 if sizes["HS"] <= 64 else 128
    assert step.name.startswith(f"attention_forward11_hs{hsp}")
    shared = expr.evaluate_int(step.shared, env, "shared")
    # an SM's 228 KB less 1 KB reserved a block: three blocks at HSP 64, two at 128
    assert (3 if hsp == 64 else 2) * (shared + 1024) <= 228 * 1024


@pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")
@pytest.mark.parametrize("sizes", [{"B": 1, "T": 300, "NH": 1, "HS": 64}, {"B": 1, "T": 67, "NH": 2, "HS": 12}],
                         ids=_ids)
def test_version_11_with_the_lag(sizes):
    """HS64_LAG 1 (version 10's lag inside version 11's kernel) is correct too."""
    for r in with_define("HS64_LAG 1")(V11, sizes, seed=6, mode="LATE", sched="PRIORITY"):
        assert r.ok, f"{r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("B, T, NH, HS", ATTENTION_SHAPES)
def test_attention_forward_matches_torch_sdpa(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS)
    ref = attention_forward(qkv, NH)
    out = torch_sdpa_packed(torch.from_numpy(qkv), NH)
    np.testing.assert_allclose(ref["out"], out.numpy(), atol=1e-12, rtol=1e-10)
    lse = torch.logsumexp(torch_causal_scores(qkv, NH), dim=-1)
    np.testing.assert_allclose(ref["lse"], lse.numpy(), atol=1e-12, rtol=1e-10)


def test_attention_forward_does_not_look_ahead():
    qkv, _ = packed(2, 9, 3, 4)
    later = qkv.copy()
    later[:, 5:] += 1.0  # change only tokens 5..8
    a, b = attention_forward(qkv, 3), attention_forward(later, 3)
    np.testing.assert_array_equal(a["out"][:, :5], b["out"][:, :5])
    np.testing.assert_array_equal(a["lse"][:, :, :5], b["lse"][:, :, :5])
    assert not np.allclose(a["out"][:, 5:], b["out"][:, 5:])
