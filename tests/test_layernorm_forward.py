"""The layernorm_forward family, without a GPU: version 10 (bf16), the memory-bound version built to
close the last few percent to a copy's speed, takes the trainer's sizes (C = 768..1600, T <= 1024,
B <= 32), its grid is one resident wave at the default sizes and every warp gets the two rows the
header says; version 9 serves GPT-2 and GPT-2 XL. (Version 10 on the CPU SIMT emulator: its
header's [[emulate]] tables, tests/test_emulator.py.)
"""

import memory_bound
from workbench.family import Project

from conftest import ROOT


FAMILY = Project(ROOT).family("layernorm_forward")


def test_version_10s_header():
    v = FAMILY.version(10)
    assert v.precision == "bf16" and v.deterministic
    memory_bound.assert_takes_the_trainers_sizes(v)


def test_at_the_default_sizes_version_10s_grid_is_one_resident_wave():
    memory_bound.assert_one_resident_wave(FAMILY.version(10))


def test_at_the_default_sizes_version_10_gives_every_warp_exactly_two_rows():
    memory_bound.assert_every_warp_gets_two_rows(FAMILY.version(10))


def test_the_fast_layernorm_forward_serves_gpt2_and_gpt2_xl():
    v = FAMILY.version(9)
    for C in (768, 1600):
        assert not v.unmet({"B": 8, "T": 1024, "C": C})
