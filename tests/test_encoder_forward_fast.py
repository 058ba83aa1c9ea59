"""encoder_forward's later versions on the CPU SIMT emulator (tests/gpu_emu).

* 10 (fp32) and 11 (bf16): version 3's and 5's grids with the ids asked of L2 at the start and the
  wpe load issued before the token (the emulator checks the bulk prefetch's range: inside inp,
  16-byte units); 12 (fp32): version 10 with two float4 a thread, a grid's width apart (the second
  item's bounds are what can go wrong).
* 13 (fp32) and 14 (bf16): the rows gathered into a ring of tiles in shared memory
  (kernels/encoder_forward/encoder_forward_bulk.cuh). On the emulator the bulk copies are plain copies by
  the producer lanes (the sm_90 path runs in the GPU tests), so what is checked is the indexing:
  each block's share of the positions, tiles cut short at its end, the ring's stages reused (one
  multiprocessor, so one or two blocks own every tile and the ring wraps many times; or 132), the
  validity flags; and that the preconditions keep the ring inside a block's shared memory.

Each at every family test size, sizes with fewer than four ids (no whole 16-byte unit to
prefetch), an id count that is not a multiple of four, every block size, both schedulers, seeds
0-2. That a token outside the vocabulary writes a NaN row, only there, is tested beside versions 6
and 7 (test_memory_bound_fast.py)."""

import shutil
import sys
from pathlib import Path

import pytest

from workbench import expr
from workbench.family import Project

from conftest import ROOT, emulator_cases

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402

PROJECT = Project(ROOT)
VERSIONS = {10: "fp32", 11: "bf16", 12: "fp32", 13: "fp32", 14: "bf16"}
RING = (13, 14)
EXTRA = [{"B": 1, "T": 3, "C": 8, "V": 7}, {"B": 3, "T": 5, "C": 16, "V": 100},
         {"B": 2, "T": 9, "C": 784, "V": 50}, {"B": 5, "T": 67, "C": 64, "V": 300}]
SHARED_PER_BLOCK = 232448  # an H100's (and the most any GPU gives a block)
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="the emulator needs g++")


def version(number):
    return PROJECT.family("encoder_forward").version(number)


def launch_names(v, sizes, sms=132):
    env = {**v.family.env(sizes, v.block_sizes[0]), "SMS": sms}
    for name, text in v.derived.items():
        env[name] = expr.evaluate(text, env)
    return env


def cases():
    return emulator_cases(PROJECT, [("encoder_forward", n) for n in VERSIONS], EXTRA)


def test_the_headers():
    for number, precision in VERSIONS.items():
        v = version(number)
        assert v.precision == precision and v.deterministic
    assert len(cases()) >= 25


@pytest.mark.parametrize("number", RING)
def test_the_preconditions_keep_the_ring_inside_a_blocks_shared_memory(number):
    """The widest rows the preconditions allow still fit (a launch asking for more fails with
    'invalid argument' on the GPU), and the ring always has two stages or more (the emulator's
    path relies on a barrier between filling a stage and reading it)."""
    v = version(number)
    per = 4 if v.precision == "fp32" else 2
    widest = max(c for c in range(8, 65536, 8) if not v.unmet({"B": 1, "T": 1, "C": c, "V": 2}))
    for c in (widest, widest // 2, 768, 64, 8):
        env = launch_names(v, {"B": 1, "T": 1, "C": c, "V": 2})
        assert env["S"] >= 2 and 1 <= env["R"] <= 32
        assert env["shared_bytes"] <= SHARED_PER_BLOCK, (c, env["shared_bytes"])
        assert env["shared_bytes"] >= env["S"] * env["R"] * c * per  # the wte rows at least
    assert v.unmet({"B": 1, "T": 1, "C": widest + 8, "V": 2})


@needs_gxx
@pytest.mark.parametrize("family, number, sizes", cases())
def test_on_the_emulator(family, number, sizes, monkeypatch):
    v = version(number)
    for i, bs in enumerate(v.block_sizes):
        sms, sched = (1, "PRIORITY") if i % 2 == 0 else (132, "SHUFFLE")
        monkeypatch.setattr(runner, "SMS", sms)  # only the ring's grid asks for it
        reports = runner.emulate(v, sizes, seed=i % 3, block_size=bs, sched=sched)
        assert reports and all(r.ok for r in reports), [(bs, sms, r.name, r.bad, r.total) for r in reports if not r.ok]
