"""Causal ReLU attention forward: the softmax replaced by a ReLU with an explicit 1/T normaliser.

att[t, t2] = relu(q_t . k_t2 / sqrt(HS)) / T on t2 <= t, 0 above the diagonal; out = att @ v,
returned as (B, T, C). Unlike softmax rows, att rows do not sum to one: the 1/T keeps out bounded.
"""

import numpy as np

try:
    from .attention_forward import merge_heads, split_heads
except ImportError:  # loaded as a plain file (a project outside this repository)
    from references.attention_forward import merge_heads, split_heads


def relu_attention_forward(qkv, NH):
    q, k, v = split_heads(qkv, NH)
    B, _, T, HS = q.shape
    causal = np.tril(np.ones((T, T), dtype=bool))
    out = np.empty_like(q)
    for b in range(B):  # one sequence's (NH, T, T) scores at a time
        att = np.where(causal, np.maximum(q[b] @ k[b].swapaxes(-1, -2) / np.sqrt(HS), 0.0), 0.0) / T
        out[b] = att @ v[b]
    return {"out": merge_heads(out)}


def torch_relu_attention(qkv, NH):
    """The same op in PyTorch (the `torch` baseline)."""
    import torch
    B, T, C3 = qkv.shape
    HS = C3 // 3 // NH
    q, k, v = qkv.view(B, T, 3, NH, HS).permute(2, 0, 3, 1, 4)
    causal = torch.ones(T, T, dtype=torch.bool, device=qkv.device).tril()
    att = torch.relu(q @ k.transpose(-1, -2) * HS ** -0.5).masked_fill(~causal, 0.0) / T
    return (att @ v).transpose(1, 2).reshape(B, T, C3 // 3)
