"""The qkv projection's bias gradient under softmax attention (kernels/qkv_bias_backward/family.toml):

    dbias[0:C]   += column sums of dqkv[..., 0:C] over the rows   (query: summed as usual)
    dbias[C:2C]  += 0                                             (key: softmax ignores it)
    dbias[2C:3C]  = dproj_bias @ proj_weight                      (value: through attproj)

The key and value identities are what tests/test_qkv_bias_identity.py checks on a real attention
backward; this function is the contract the kernels are held to.
"""

import numpy as np


def qkv_bias_backward(dbias, dqkv, dproj_bias, proj_weight):
    C = proj_weight.shape[0]
    out = np.array(dbias, copy=True)
    out[:C] += dqkv.reshape(-1, 3 * C)[:, :C].sum(axis=0)
    out[2 * C:] = dproj_bias @ proj_weight
    return {"dbias": out}
