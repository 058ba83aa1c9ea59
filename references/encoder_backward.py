"""Backward of the token + position embedding, accumulated (+=) into dwte and dwpe:
every position (b, t) adds its dout row to wte's row inp[b, t] and to wpe's row t."""

import numpy as np


def encoder_backward(dwte, dwpe, dout, inp):
    C = dout.shape[-1]
    dwte = dwte.copy()
    np.add.at(dwte, inp.reshape(-1), dout.reshape(-1, C))  # repeated tokens add up
    dwpe = dwpe + dout.sum(axis=0)
    return {"dwte": dwte, "dwpe": dwpe}


def torch_encoder_backward(dwte, dwpe, dout, inp):
    """The PyTorch baseline: index_add_ (atomics on the GPU) plus a sum over the batch, in place."""
    C = dout.shape[-1]
    dwte.index_add_(0, inp.reshape(-1), dout.reshape(-1, C))
    dwpe.add_(dout.sum(0))
    return dwte, dwpe
