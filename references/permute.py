"""Split a packed qkv (B, T, 3, NH, HS) into q, k, v, each (B, NH, T, HS) and contiguous."""

import numpy as np


def permute(inp, NH):
    B, T, C3 = inp.shape
    x = inp.reshape(B, T, 3, NH, C3 // 3 // NH).transpose(2, 0, 3, 1, 4)
    return {"q": x[0], "k": x[1], "v": x[2]}


def torch_permute(inp, NH):
    B, T, C3 = inp.shape
    x = inp.view(B, T, 3, NH, C3 // 3 // NH).permute(2, 0, 3, 1, 4)
    return x[0].contiguous(), x[1].contiguous(), x[2].contiguous()
