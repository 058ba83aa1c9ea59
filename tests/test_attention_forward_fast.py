"""attention_forward 10 (bf16: 32 query rows a warp, P V a tile behind, one barrier a tile) and 11
(the same at three blocks an SM: no lag, Q read from shared memory),
without a GPU.

* the header: bf16 at the family's tolerance, exactly one kernel at every size, the grid and the
  shared memory that two blocks an SM need;
* the kernels on the CPU SIMT emulator (tests/gpu_emu): every output element of out and lse at
  every test size of the family (T not a multiple of the 64-key or 128-row tiles, HS = 64 and
  128, the small and odd heads that are zero-padded to 64 or 128), plus sizes that run the
  steady-state loop for several tiles, exact tile multiples, a padded 128 head and warps wholly
  past T; three seeds (two for the extra sizes), with copies landing late (LATE: data read before
  its wait is stale) and one warp racing ahead (PRIORITY: a missing barrier shows), and the other
  scheduler and block orders;
* PV_LAG 0 (P V in the same iteration as its scores, the other setting of the version's switch);
* the softmax's lazy reference point (it moves only when a tile's maximum passes it by more than
  RESCALE_SLACK = 8, in log2 units): with slack 0 (o rescaled on every increase of a row's
  maximum), and at the real slack on scores that grow along the keys, so that rows move their
  reference point many times in late tiles (with normal(0, 1) inputs it almost never moves
  after the first tile).
"""

import functools
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import expr
from workbench.check import Case, from_storage, make_inputs, run_reference, to_storage
from workbench.family import Project

from conftest import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402
from runner import emulate  # noqa: E402

FAMILY = Project(ROOT).family("attention_forward")
NUMBER = 10
VERSION = FAMILY.version(NUMBER)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")

# Beyond the family's test sizes: several full key tiles before the diagonal (the steady-state
# step) for both head paddings; T an exact multiple of the tiles; a 128 head padded from 96; a
# block whose last warps lie wholly past T (T = 140: rows 128..255, warps 1-3 empty).
EXTRA = [
    {"B": 1, "T": 300, "NH": 1, "HS": 64},
    {"B": 1, "T": 256, "NH": 2, "HS": 32},
    {"B": 1, "T": 200, "NH": 1, "HS": 128},
    {"B": 2, "T": 128, "NH": 1, "HS": 64},
    {"B": 1, "T": 70, "NH": 2, "HS": 96},
    {"B": 1, "T": 140, "NH": 1, "HS": 24},
]
SIZES = [*FAMILY.test_sizes, *EXTRA]


def _ids(sizes):
    return FAMILY.format_sizes(sizes)


def test_the_header():
    assert VERSION.precision == "bf16" and VERSION.deterministic
    assert VERSION.atol is None and VERSION.rtol is None  # the family's bf16 tolerance
    assert list(VERSION.preconditions) == ["HS <= 128"]


@pytest.mark.parametrize("sizes", [FAMILY.default_sizes, *SIZES,
                                   {"B": 4, "T": 1024, "NH": 12, "HS": 64}, {"B": 32, "T": 1024, "NH": 25, "HS": 64},
                                   {"B": 1, "T": 1, "NH": 1, "HS": 128}, {"B": 1, "T": 1, "NH": 1, "HS": 99}],
                         ids=_ids)
def test_exactly_one_kernel_runs_at_every_size(sizes):
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


RUNS = [(0, "LATE", "PRIORITY", 0), (1, "EARLY", "SHUFFLE", 0), (2, "LATE", "SHUFFLE", 5)]


@needs_gxx
@pytest.mark.parametrize("sizes", SIZES, ids=_ids)
def test_every_element_on_the_emulator(sizes):
    """Seed 0 with late copies and a racing warp; seed 1 with warps in step and early copies;
    seed 2 late again, with the blocks run in a shuffled order (the extra sizes: the first two)."""
    for seed, mode, sched, order in RUNS if sizes in FAMILY.test_sizes else RUNS[:2]:
        reports = emulate(VERSION, sizes, seed=seed, mode=mode, sched=sched, sched_seed=seed + 1, block_order=order)
        assert {r.name for r in reports} == {"out", "lse"}
        for r in reports:
            first = [m.__dict__ for m in r.first]
            assert r.ok, f"seed {seed} {mode}/{sched}: {r.name}: {r.bad} of {r.total} wrong, e.g. {first}"


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


@needs_gxx
@pytest.mark.parametrize("sizes", [*FAMILY.test_sizes, EXTRA[0], EXTRA[5]], ids=_ids)
def test_version_11_on_the_emulator(sizes):
    for r in emulate(V11, sizes, seed=0, mode="LATE", sched="PRIORITY", sched_seed=1):
        assert r.ok, f"{r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


@needs_gxx
@pytest.mark.parametrize("sizes", [{"B": 1, "T": 300, "NH": 1, "HS": 64}, {"B": 1, "T": 67, "NH": 2, "HS": 12}],
                         ids=_ids)
def test_version_11_with_the_lag(sizes):
    """HS64_LAG 1 (version 10's lag inside version 11's kernel) is correct too."""
    for r in with_define("HS64_LAG 1")(V11, sizes, seed=6, mode="LATE", sched="PRIORITY"):
        assert r.ok, f"{r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"
