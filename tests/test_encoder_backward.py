"""encoder_backward's one-launch token-partition versions (5: fp32, 6: bf16), without a GPU.

* the versions: precision, determinism, one kernel launch and no scratch, every test size met;
* the kernels on the CPU SIMT emulator (tests/gpu_emu): every output element within tolerance at
  every test size (two seeds, one warp racing ahead: PRIORITY, which exposes a missing barrier);
* the bits: the same at every block size with warps in step (SHUFFLE) or not (the sum order is
  set by the data alone), and the paths for positions that do not fit in shared memory (windows
  of tokens and streamed tokens, forced with a small capacity) give the same bits as the path
  that holds them all;
* a skewed batch (one token holding most positions), as real text has;
* the bits against a float32 NumPy model of the header's formula (a token's rows in position
  order, dealt to 8 running sums when more than 8, the sums added in order, the total added to
  the gradient row; bf16: widened, and rounded once at the end): equal, bit for bit.

The versions' warp votes (__ballot_sync, __match_any_sync, an int __shfl_up_sync, __popc) are
emu.h's.
"""

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench import expr
from workbench.check import Case, from_storage, make_case, make_inputs, run_reference, to_storage
from workbench.family import Project

from conftest import ROOT

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

FAMILY = Project(ROOT).family("encoder_backward")
PARTITION = (5, 6)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def emulate(version, sizes, **kw):
    """(reports, outputs): the emulator's per-output reports and the outputs' values."""
    outputs = {}
    reports = runner.emulate(version, sizes, outputs=outputs, **kw)
    return reports, outputs


def assert_ok(reports):
    for r in reports:
        assert r.ok, f"{r.name}: {r.bad} of {r.total} wrong, e.g. {[m.__dict__ for m in r.first]}"


def same_bits(a: dict, b: dict):
    for name in a:
        x, y = np.asarray(a[name]), np.asarray(b[name])
        assert x.tobytes() == y.tobytes(), f"{name}: {int((x != y).sum())} elements differ"


def skewed_case(version, sizes, seed, share, token=0):
    """A case in which `token` holds about `share` of the positions (the rest uniform)."""
    fam = version.family
    inputs = make_inputs(fam, sizes, seed, version.precision)
    rng = np.random.default_rng(seed + 100)
    inp = inputs["inp"]
    inp[rng.random(inp.shape) < share] = token
    return Case(dict(sizes), seed, inputs, run_reference(fam, sizes, inputs, version.precision), version.precision)


def with_capacity(tmp_path, number, cap, G=None):
    """A copy of version `number` holding `cap` positions at once (and G token blocks if given),
    in a project of its own: the paths for positions that do not fit, at small sizes."""
    src = FAMILY.version(number).path
    fam_dir = tmp_path / "kernels" / "encoder_backward"
    fam_dir.mkdir(parents=True)
    shutil.copy(FAMILY.path / "family.toml", fam_dir)
    shutil.copytree(ROOT / "references", tmp_path / "references")
    shutil.copytree(ROOT / "kernels" / "common", tmp_path / "kernels" / "common")
    for helper in FAMILY.path.glob("*.cuh"):  # the family's own helpers
        shutil.copy(helper, fam_dir)
    text = re.sub(r"^builds_on = .*\n", "", src.read_text(), flags=re.M)  # the copy holds no other version
    text, n = re.subn(r"constexpr int CAP = \d+;", f"constexpr int CAP = {cap};", text)
    assert n == 1
    if G is not None:
        text, n = re.subn(r'^G = ".*"$', f'G = "{G}"', text, flags=re.M)
        assert n == 1
    (fam_dir / src.name).write_text(text)
    return Project(tmp_path).family("encoder_backward").version(number)


# ---- the versions ------------------------------------------------------------------------------
def test_the_versions():
    fp32, bf16 = (FAMILY.version(n) for n in PARTITION)
    assert fp32.precision == "fp32" and fp32.deterministic
    assert bf16.precision == "bf16" and bf16.deterministic
    for v in (fp32, bf16):
        assert not v.scratch
        for sizes in [FAMILY.default_sizes, *FAMILY.test_sizes]:
            assert not v.unmet(sizes), (v.path.name, sizes)
            env = FAMILY.env(sizes, v.block_sizes[0])
            steps = [s for s in v.steps if s.when is None or expr.evaluate(s.when, env)]
            assert len(steps) == 1 and steps[0].kind == "kernel", (v.path.name, sizes)


# ---- the kernels on the emulator ---------------------------------------------------------------
EMULATED = [(n, s) for n in PARTITION for s in FAMILY.test_sizes]


@needs_gxx
@pytest.mark.parametrize("number, sizes", EMULATED, ids=[f"{n}-{FAMILY.format_sizes(s)}" for n, s in EMULATED])
def test_every_test_size_on_the_emulator(number, sizes):
    version = FAMILY.version(number)
    for seed in (0, 1):
        reports, _ = emulate(version, sizes, seed=seed, block_size=version.block_sizes[0], sched="PRIORITY")
        assert_ok(reports)


@needs_gxx
@pytest.mark.parametrize("number", PARTITION)
def test_the_same_bits_at_every_block_size_and_schedule(number):
    """Within tolerance at each block size, and the same bits on every one: the sums' order is
    the data's, not the launch's."""
    version = FAMILY.version(number)
    sizes = {"B": 4, "T": 33, "C": 36, "V": 7}  # groups of ~19 rows: the long-group path
    first = None
    for block_size in version.block_sizes:
        for sched in ("SHUFFLE", "PRIORITY"):
            reports, outputs = emulate(version, sizes, seed=2, block_size=block_size, sched=sched)
            assert_ok(reports)
            if first is None:
                first = outputs
            same_bits(first, outputs)


@needs_gxx
@pytest.mark.parametrize("number", PARTITION)
def test_a_skewed_batch_on_the_emulator(number):
    """One token holds ~60% of the positions (a long group split over the 8 running sums),
    the others are spread over a large vocabulary (many blocks, many short groups)."""
    version = FAMILY.version(number)
    sizes = {"B": 2, "T": 96, "C": 264, "V": 3000}
    case = skewed_case(version, sizes, 3, 0.6, token=1234)
    reports, a = emulate(version, sizes, block_size=version.block_sizes[0], sched="PRIORITY", case=case)
    assert_ok(reports)
    reports, b = emulate(version, sizes, block_size=version.block_sizes[-1], sched="SHUFFLE", case=case)
    assert_ok(reports)
    same_bits(a, b)


@needs_gxx
@pytest.mark.parametrize("number", PARTITION)
def test_positions_that_do_not_fit_give_the_same_bits(tmp_path, number):
    """With room for 16 positions and 2 token blocks: windows of tokens rescanned (V = 50) and
    streamed tokens (V = 3, over 16 positions each, in several batches) at several block
    sizes, against the version as shipped, which holds them all."""
    small = with_capacity(tmp_path, number, 16, G=2)
    version = FAMILY.version(number)
    for sizes in ({"B": 2, "T": 40, "C": 40, "V": 50}, {"B": 3, "T": 21, "C": 37, "V": 3}):
        case = make_case(FAMILY, sizes, 4, version.precision)
        reports, want = emulate(version, sizes, block_size=version.block_sizes[0], case=case)
        assert_ok(reports)
        for block_size, sched in ((small.block_sizes[0], "PRIORITY"), (small.block_sizes[1], "SHUFFLE")):
            reports, got = emulate(small, sizes, block_size=block_size, sched=sched, case=case)
            assert_ok(reports)
            same_bits(want, got)


# ---- the bits are the formula's ----------------------------------------------------------------
def formula(case, sizes, precision):
    """dwte and dwpe as the header's formula gives them, in float32 (bf16: rounded once)."""
    def value(name):
        return from_storage(case.inputs[name], "bf16" if precision == "bf16" and name != "inp" else "f32")
    C, T = sizes["C"], sizes["T"]
    dwte = value("dwte").astype(np.float32).reshape(-1, C).copy()
    dwpe = value("dwpe").astype(np.float32).reshape(T, C).copy()
    dout = value("dout").astype(np.float32).reshape(-1, C)
    inp = case.inputs["inp"].reshape(-1)
    for v in np.unique(inp):
        rows = dout[np.flatnonzero(inp == v)]  # in position order
        total = np.zeros(C, np.float32)
        if len(rows) <= 8:
            for row in rows:
                total += row
        else:
            for r in range(8):
                lane = np.zeros(C, np.float32)
                for row in rows[r::8]:
                    lane += row
                total += lane
        dwte[v] += total
    per_t = np.zeros((T, C), np.float32)
    for row in dout.reshape(-1, T, C):
        per_t += row
    dwpe += per_t
    if precision == "bf16":
        dwte, dwpe = (from_storage(to_storage(x, "bf16"), "bf16") for x in (dwte, dwpe))
    return {"dwte": dwte, "dwpe": dwpe}


@needs_gxx
@pytest.mark.parametrize("number", PARTITION)
def test_the_bits_are_the_formulas(number):
    version = FAMILY.version(number)
    for sizes in ({"B": 4, "T": 33, "C": 36, "V": 7}, {"B": 2, "T": 3, "C": 37, "V": 5},
                  {"B": 3, "T": 64, "C": 768, "V": 16}):
        case = make_case(FAMILY, sizes, 1, version.precision)
        reports, got = emulate(version, sizes, block_size=version.block_sizes[1], sched="SHUFFLE", case=case)
        assert_ok(reports)
        want = formula(case, sizes, version.precision)
        for name in ("dwte", "dwpe"):
            same_bits({name: want[name].reshape(-1)}, {name: np.asarray(got[name], np.float32).reshape(-1)})
