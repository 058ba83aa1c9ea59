"""Causal ReLU attention backward: dqkv from dout (the forward is recomputed from qkv).

With s = q.k / sqrt(HS) and att = relu(s) / T on t2 <= t:
    dv = att^T dout,  datt = dout v^T,  dpreatt = scale / T * datt * [s > 0] (the true ReLU
    derivative, 0 above the diagonal),  dq = dpreatt k,  dk = dpreatt^T q.
"""

import numpy as np

try:
    from .attention_backward import torch_grad_of
    from .attention_forward import heads, merge_heads, split_heads
    from .relu_attention_forward import torch_relu_attention
except ImportError:  # loaded as a plain file (a project outside this repository)
    from references.attention_backward import torch_grad_of
    from references.attention_forward import heads, merge_heads, split_heads
    from references.relu_attention_forward import torch_relu_attention


def relu_attention_backward(dout, qkv, NH):
    q, k, v = split_heads(qkv, NH)
    do = heads(dout, NH)
    B, _, T, HS = q.shape
    scale = 1.0 / np.sqrt(HS)
    causal = np.tril(np.ones((T, T), dtype=bool))
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    for b in range(B):  # one sequence's (NH, T, T) matrices at a time
        s = q[b] @ k[b].swapaxes(-1, -2) * scale
        att = np.where(causal, np.maximum(s, 0.0), 0.0) / T
        dpreatt = np.where(causal & (s > 0), do[b] @ v[b].swapaxes(-1, -2), 0.0) * scale / T
        dq[b], dk[b] = dpreatt @ k[b], dpreatt.swapaxes(-1, -2) @ q[b]
        dv[b] = att.swapaxes(-1, -2) @ do[b]
    return {"dqkv": np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)}


def torch_relu_attention_backward(dout, qkv, NH):
    """Autograd through torch_relu_attention (the forward is kept per input)."""
    return torch_grad_of(torch_relu_attention, dout, qkv, NH)
