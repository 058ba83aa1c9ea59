"""The permute family, without a GPU: versions 4 (fp32) and 5 (bf16), the input-order kernels
(kernels/common/permute_units.cuh), take the trainer's sizes and refuse what 32-bit indexing cannot
reach. (On the CPU SIMT emulator, bit for bit against the reference: their headers' [[emulate]]
tables, tests/test_emulator.py.)

Its NumPy reference (at the end): it splits the heads as PyTorch's view and permute do, at odd
sizes. The tests that call PyTorch skip themselves where it is not installed.
"""

import numpy as np
import pytest

from references.permute import permute
from workbench.family import Project

from conftest import ROOT
from references_helpers import ATTENTION_SHAPES, needs_torch, packed, torch_heads


FAMILY = Project(ROOT).family("permute")


def test_the_input_order_versions_take_the_trainers_sizes_and_refuse_what_32_bits_cannot_index():
    for number, precision in ((4, "fp32"), (5, "bf16")):
        v = FAMILY.version(number)
        assert v.precision == precision
        for NH, HS in ((12, 64), (16, 64), (20, 64), (25, 64)):
            assert not v.unmet({"B": 32, "T": 1024, "NH": NH, "HS": HS})
        assert v.unmet({"B": 256, "T": 4096, "NH": 25, "HS": 64})  # 3N > 2^31
        assert v.unmet({"B": 1, "T": 4, "NH": 2, "HS": 6})           # a head row is not whole units


# -- the reference ---------------------------------------------------------------------------------
@needs_torch
@pytest.mark.parametrize("B, T, NH, HS", ATTENTION_SHAPES)
def test_permute_splits_heads_like_torch(B, T, NH, HS):
    qkv, _ = packed(B, T, NH, HS, seed=9)
    ref = permute(qkv, NH)
    q, k, v = torch_heads(qkv, NH)
    for name, t in zip("qkv", (q, k, v)):
        np.testing.assert_array_equal(ref[name], t.numpy())
        assert ref[name].shape == (B, NH, T, HS)
