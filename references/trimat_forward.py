"""Causal Q.K^T: the lower triangle of the attention scores, heads split from a packed qkv.

preatt[b, h, t, t2] = q_t . k_t2 / sqrt(HS) for t2 <= t. Above the diagonal the reference holds
-inf: the check skips non-finite reference entries, so versions need not write there.
"""

import numpy as np

try:
    from .attention_forward import split_heads
except ImportError:  # loaded as a plain file (a project outside this repository)
    from references.attention_forward import split_heads


def trimat_forward(qkv, NH):
    q, k, _ = split_heads(qkv, NH)
    T, HS = q.shape[2], q.shape[3]
    causal = np.tril(np.ones((T, T), dtype=bool))
    return {"preatt": np.where(causal, q @ k.swapaxes(-1, -2) / np.sqrt(HS), -np.inf)}


def torch_trimat(qkv, NH):
    """PyTorch's full product (the upper triangle is computed too, and not compared)."""
    B, T, C3 = qkv.shape
    HS = C3 // 3 // NH
    q, k, _ = qkv.view(B, T, 3, NH, HS).permute(2, 0, 3, 1, 4)
    return (q @ k.transpose(-1, -2)) * HS ** -0.5
