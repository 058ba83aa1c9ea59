"""Causal self-attention forward, heads split from a packed qkv (B, T, 3, NH, HS) tensor.

out = softmax(q k^T / sqrt(HS), masked to t2 <= t) @ v, returned as (B, T, C);
lse (B, NH, T) = log sum_{t2 <= t} exp(q_t . k_t2 / sqrt(HS)), the softmax's normaliser in log form.
The loop over the batch keeps the (NH, T, T) score matrix to one sequence at a time.
"""

import numpy as np


def split_heads(qkv, NH):
    """(B, T, 3C) -> q, k, v each (B, NH, T, HS)."""
    B, T, C3 = qkv.shape
    HS = C3 // 3 // NH
    x = qkv.reshape(B, T, 3, NH, HS).transpose(2, 0, 3, 1, 4)
    return x[0], x[1], x[2]


def heads(x, NH):
    """(B, T, C) -> (B, NH, T, HS)."""
    B, T, C = x.shape
    return x.reshape(B, T, NH, C // NH).transpose(0, 2, 1, 3)


def merge_heads(y):
    """(B, NH, T, HS) -> (B, T, NH * HS)."""
    B, NH, T, HS = y.shape
    return y.transpose(0, 2, 1, 3).reshape(B, T, NH * HS)


def attention_forward(qkv, NH):
    q, k, v = split_heads(qkv, NH)
    B, _, T, HS = q.shape
    causal = np.tril(np.ones((T, T), dtype=bool))
    out = np.empty_like(q)
    lse = np.empty((B, NH, T))
    for b in range(B):
        s = np.where(causal, q[b] @ k[b].swapaxes(-1, -2) / np.sqrt(HS), -np.inf)
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - m)
        total = e.sum(axis=-1, keepdims=True)
        out[b] = (e / total) @ v[b]
        lse[b] = (m + np.log(total))[..., 0]
    return {"out": merge_heads(out), "lse": lse}


def torch_attention(qkv, NH):
    """PyTorch's causal SDPA on the same packed layout (the `torch` baseline); returns out."""
    import torch.nn.functional as F
    B, T, C3 = qkv.shape
    q, k, v = qkv.view(B, T, 3, NH, C3 // 3 // NH).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(B, T, C3 // 3)
