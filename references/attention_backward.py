"""Causal self-attention backward: dqkv from dout, given the forward's out and lse.

The softmax is recomputed from lse (P = exp(scale q.k - lse) on t2 <= t) instead of being stored:
    dv = P^T dout,  dP = dout v^T,  dS = P * (dP - D) with D_t = dout_t . out_t (= sum_t2 P dP),
    dq = scale dS k,  dk = scale dS^T q,   packed back as (B, T, 3, NH, HS).
"""

import numpy as np

try:
    from .attention_forward import (attention_forward, heads, merge_heads, split_heads,
                                   torch_attention)
except ImportError:  # loaded as a plain file (a project outside this repository)
    from references.attention_forward import (attention_forward, heads, merge_heads, split_heads,
                                              torch_attention)


def attention_backward(dout, qkv, out, lse, NH):
    q, k, v = split_heads(qkv, NH)
    B, _, T, HS = q.shape
    do, o = heads(dout, NH), heads(out, NH)
    scale = 1.0 / np.sqrt(HS)
    causal = np.tril(np.ones((T, T), dtype=bool))
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    for b in range(B):
        p = np.where(causal, np.exp(q[b] @ k[b].swapaxes(-1, -2) * scale - lse[b][..., None]), 0.0)
        dp = do[b] @ v[b].swapaxes(-1, -2)
        d = (do[b] * o[b]).sum(axis=-1, keepdims=True)
        ds = p * (dp - d)
        dv[b] = p.swapaxes(-1, -2) @ do[b]
        dq[b] = scale * ds @ k[b]
        dk[b] = scale * ds.swapaxes(-1, -2) @ q[b]
    return {"dqkv": np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)}


def forward_outputs(qkv, NH):
    """`prepare`: out and lse consistent with the drawn qkv, from the forward reference."""
    fwd = attention_forward(np.asarray(qkv, dtype=np.float64), NH)
    return {"out": fwd["out"], "lse": fwd["lse"]}


_graph = {}


def torch_grad_of(forward, dout, qkv, NH):
    """dqkv of PyTorch's `forward(qkv, NH)` by autograd (a `torch` baseline). The forward is run
    once per input and kept, so repeated calls time the backward alone."""
    import torch
    key = (forward, qkv.data_ptr(), tuple(qkv.shape), qkv.dtype, NH)
    if key not in _graph:
        _graph.clear()
        x = qkv.detach().clone().requires_grad_(True)
        _graph[key] = (x, forward(x, NH))
    x, y = _graph[key]
    (dqkv,) = torch.autograd.grad(y, x, dout, retain_graph=True)
    return dqkv


def torch_attention_backward(dout, qkv, NH):
    """The gradient of PyTorch's causal SDPA."""
    return torch_grad_of(torch_attention, dout, qkv, NH)
