"""attention_forward's tensor-core versions (7: TF32, 8: bf16): the contract at bf16, the launch
steps they choose per size, and their fragment index maps checked against a model of the PTX
instructions (mma.sync, ldmatrix) as the PTX ISA documents their layouts."""

import numpy as np
import pytest

from workbench import expr
from workbench.check import make_case
from workbench.family import Project

from conftest import ROOT

FAMILY = Project(ROOT).family("attention_forward")


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


# ---- A model of the warp-level instructions, from the PTX ISA's fragment layouts --------------
# Lane l: g = l // 4, t = l % 4. 16-bit registers hold (low, high) pairs, modelled as tuples.

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
