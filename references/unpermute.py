"""Merge heads back: (B, NH, T, HS) -> (B, T, NH, HS), i.e. (B, T, C) with C = NH * HS."""

import numpy as np


def unpermute(inp):
    B, NH, T, HS = inp.shape
    return {"out": np.ascontiguousarray(inp.transpose(0, 2, 1, 3)).reshape(B, T, NH * HS)}


def torch_unpermute(inp):
    B, NH, T, HS = inp.shape
    return inp.transpose(1, 2).reshape(B, T, NH * HS)
