"""The layernorm_forward family, without a GPU: version 10 (bf16), the memory-bound version built to
close the last few percent to a copy's speed, takes the trainer's sizes (C = 768..1600, T <= 1024,
B <= 32), its grid is one resident wave at the default sizes and every warp gets the two rows the
header says; version 9 serves GPT-2 and GPT-2 XL. (Version 10 on the CPU SIMT emulator: its
header's [[emulate]] tables, tests/test_emulator.py.)

Its NumPy reference (at the end): against PyTorch's layer_norm in float64 at odd sizes, rstd
included. The tests that call PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

import memory_bound
from references.layernorm_forward import layernorm_forward
from workbench.family import Project

from conftest import ROOT
from references_helpers import F, needs_torch, torch


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


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 37), (1, 7, 1600)])
def test_layernorm_forward_matches_torch(shape):
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape)
    w, b = rng.normal(1, 0.1, size=shape[-1]), rng.normal(0, 0.1, size=shape[-1])
    ref = layernorm_forward(x, w, b)
    t = F.layer_norm(torch.from_numpy(x), (shape[-1],), torch.from_numpy(w), torch.from_numpy(b), 1e-5)
    np.testing.assert_allclose(ref["out"], t.numpy(), atol=1e-12, rtol=1e-10)
    var = x.var(axis=-1)
    np.testing.assert_allclose(ref["rstd"], 1 / np.sqrt(var + 1e-5), rtol=1e-12)
