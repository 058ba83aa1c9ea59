"""The qkv_bias_backward family, without a GPU: the two identities its contract stands on, checked
on a real causal attention (the float64 references), and where they stop holding.

Through qkv (B,T,3C) -> attention -> atty -> attproj (datty = dres @ W_attproj), the qkv bias
gradient is the column sums of dqkv. Its key third is zero and its value third is attproj's bias
gradient (the column sums of dres) times W_attproj; the query third is what the family sums.
"""

import numpy as np
import pytest

from references.attention_backward import attention_backward
from references.attention_forward import attention_forward
from references.qkv_bias_backward import qkv_bias_backward
from references.relu_attention_backward import relu_attention_backward
from workbench.family import Project

from conftest import ROOT


def attention_branch(B, T, NH, HS, seed, backward="softmax"):
    """dqkv and dres of one attention branch ending in attproj, on drawn qkv, dres and W_attproj."""
    rng = np.random.default_rng(seed)
    C = NH * HS
    qkv = rng.normal(0, 1, (B, T, 3 * C))
    dres = rng.normal(0, 1, (B, T, C))
    w = rng.normal(0, 0.2, (C, C))
    datty = dres @ w  # attproj's input gradient (out = atty @ w^T + b)
    if backward == "relu":
        return relu_attention_backward(datty, qkv, NH)["dqkv"], dres, w
    fwd = attention_forward(qkv, NH)
    return attention_backward(datty, qkv, fwd["out"], fwd["lse"], NH)["dqkv"], dres, w


@pytest.mark.parametrize("B, T, NH, HS, seed", [(2, 7, 2, 4, 0), (1, 33, 3, 8, 1), (3, 2, 1, 5, 2)])
def test_the_key_third_is_zero_and_the_value_third_is_the_projections_bias_gradient_times_its_weight(
        B, T, NH, HS, seed):
    dqkv, dres, w = attention_branch(B, T, NH, HS, seed)
    C = NH * HS
    sums = dqkv.reshape(-1, 3 * C).sum(axis=0)  # the qkv bias gradient, unfused
    scale = np.abs(sums[:C]).max()
    assert scale > 1e-2  # the query third is not zero: the test is about the other two
    np.testing.assert_allclose(sums[C:2 * C], 0.0, atol=1e-12 * max(scale, 1.0))
    dproj_bias = dres.reshape(-1, C).sum(axis=0)
    np.testing.assert_allclose(sums[2 * C:], dproj_bias @ w, rtol=1e-10, atol=1e-12)
    # so the family's contract, from zero, is the unfused sums
    got = qkv_bias_backward(np.zeros(3 * C), dqkv, dproj_bias, w)["dbias"]
    np.testing.assert_allclose(got, sums, rtol=1e-10, atol=1e-11 * max(scale, 1.0))


def test_relu_attention_breaks_both_identities():
    """ReLU attention's rows do not sum to one and it has no softmax: the family would be wrong
    there, which is why the trainer only uses it with the softmax kinds."""
    dqkv, dres, w = attention_branch(2, 9, 2, 4, 3, backward="relu")
    C = 8
    sums = dqkv.reshape(-1, 3 * C).sum(axis=0)
    assert np.abs(sums[C:2 * C]).max() > 1e-3
    assert np.abs(sums[2 * C:] - dres.reshape(-1, C).sum(axis=0) @ w).max() > 1e-3


def test_the_query_third_adds_the_key_third_stays_and_the_value_third_is_set():
    rng = np.random.default_rng(4)
    C = 5
    dbias = rng.normal(0, 1, 3 * C)
    dqkv = rng.normal(0, 1, (2, 3, 3 * C))
    dproj_bias, w = rng.normal(0, 1, C), rng.normal(0, 1, (C, C))
    got = qkv_bias_backward(dbias, dqkv, dproj_bias, w)["dbias"]
    np.testing.assert_allclose(got[:C], dbias[:C] + dqkv.reshape(6, 3 * C)[:, :C].sum(0))
    np.testing.assert_array_equal(got[C:2 * C], dbias[C:2 * C])
    np.testing.assert_allclose(got[2 * C:], dproj_bias @ w)
    assert got is not dbias and not np.shares_memory(got, dbias)


def test_the_bf16_version_needs_c_a_multiple_of_8():
    fam = Project(ROOT).family("qkv_bias_backward")
    assert fam.version(2).unmet({"B": 2, "T": 3, "C": 37}) == ["C % 8 == 0"]
    assert fam.version(1).unmet({"B": 2, "T": 3, "C": 37}) == []
