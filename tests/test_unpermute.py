"""The unpermute family, without a GPU: version 4 (fp32), the input-order kernel
(kernels/common/permute_units.cuh), takes the trainer's sizes and refuses what 32-bit indexing
cannot reach. (On the CPU SIMT emulator, bit for bit against the reference: its header's
[[emulate]] tables, tests/test_emulator.py.)

Its NumPy reference (at the end): it inverts permute's head split, at odd sizes. The tests that call
PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

import sys
from pathlib import Path

from references.permute import permute
from references.unpermute import unpermute
from workbench.family import Project

from conftest import ROOT
from references_helpers import ATTENTION_SHAPES, packed

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu_emu"))
import runner  # noqa: E402


FAMILY = Project(ROOT).family("unpermute")


def test_version_4_takes_the_trainers_sizes_and_refuses_what_32_bits_cannot_index():
    v = FAMILY.version(4)
    assert v.precision == "fp32"
    for NH in (12, 16, 20, 25):
        assert not v.unmet({"B": 32, "T": 1024, "NH": NH, "HS": 64})
    assert v.unmet({"B": 256, "T": 4096, "NH": 32, "HS": 64})  # N = 2^31
    assert v.unmet({"B": 1, "T": 4, "NH": 2, "HS": 6})
    assert len({FAMILY.format_sizes(s) for s, _ in runner.cases(v)}) >= 6


# -- the reference ---------------------------------------------------------------------------------
@pytest.mark.parametrize("B, T, NH, HS", ATTENTION_SHAPES)
def test_unpermute_inverts_the_head_split(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS, seed=10)
    heads = permute(qkv, NH)
    C = NH * HS
    for i, name in enumerate("qkv"):
        np.testing.assert_array_equal(unpermute(heads[name])["out"], qkv[..., i * C:(i + 1) * C])
