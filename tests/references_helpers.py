"""What several kernel families' reference tests share (each family's tests/test_<family>.py
imports what it needs; tests/test_references.py, the checks across families, too): PyTorch, when
it is installed, with the `needs_torch` mark for the tests that compare against it (the rest of a
family's file runs without it), the float64 conversion, and the inputs the groups of families
draw alike (packed attention qkv, rows, linear layers, tokens, logits).

Only the functions that call torch need it: they run only inside tests marked `needs_torch`."""

import numpy as np
import pytest

try:
    import torch
    F = torch.nn.functional
except ImportError:  # the tests that use them are skipped
    torch = F = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (CI installs a CPU build)")


def t(a):
    """a (an array, a list or a number) as a float64 torch tensor."""
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


# -- the attention families ------------------------------------------------------------------------
# (B, T, NH, HS): a single token, odd everything, HS not a multiple of 4, several heads
ATTENTION_SHAPES = [(1, 1, 1, 1), (2, 3, 3, 5), (1, 37, 2, 8), (2, 17, 4, 12)]


def packed(B, T, NH, HS, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(B, T, 3 * NH * HS)), rng.normal(size=(B, T, NH * HS))


def torch_heads(qkv, NH):
    B, T, C3 = qkv.shape
    return torch.from_numpy(qkv).view(B, T, 3, NH, C3 // 3 // NH).permute(2, 0, 3, 1, 4)


def torch_causal_scores(qkv, NH):
    q, k, _ = torch_heads(qkv, NH)
    T = q.shape[2]
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    return s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))


def torch_sdpa_packed(x, NH):
    """An independent float64 SDPA on a packed (B, T, 3C) tensor (differentiable in x)."""
    B, T, C3 = x.shape
    q, k, v = x.view(B, T, 3, NH, C3 // 3 // NH).permute(2, 0, 3, 1, 4)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C3 // 3)


def torch_relu_packed(x, NH):
    B, T, C3 = x.shape
    q, k, v = x.view(B, T, 3, NH, C3 // 3 // NH).permute(2, 0, 3, 1, 4)
    s = F.relu(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5)
    att = torch.where(torch.ones(T, T, dtype=torch.bool).tril(), s, torch.zeros_like(s)) / T
    return (att @ v).transpose(1, 2).reshape(B, T, C3 // 3)


def numerical_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        up = f(x)
        x[i] = old - eps
        down = f(x)
        x[i] = old
        g[i] = (up - down) / (2 * eps)
    return g


# -- the elementwise families ----------------------------------------------------------------------
# (B, T, C) rows: a single element, C odd, C a multiple of 4, GPT-2 XL's width
ROW_SHAPES = [(1, 1, 1), (2, 3, 37), (1, 5, 36), (1, 2, 1600)]


# -- the matmul families ---------------------------------------------------------------------------
# (B, T, C, OC): a single element, nothing a multiple of 4, OC past a 128-tile
MATMUL_SHAPES = [(1, 1, 1, 1), (2, 3, 37, 5), (1, 7, 33, 130)]


def draw(shape, seed):
    rng = np.random.default_rng(seed)
    b, tt, c, oc = shape
    return (rng.normal(size=(b, tt, c)), rng.normal(0, 0.5, size=(oc, c)),
            rng.normal(size=oc), rng.normal(size=(b, tt, oc)))


def autograd(inp, weight, bias, dout):
    x, w, b = (t(v).requires_grad_() for v in (inp, weight, bias))
    F.linear(x, w, b).backward(t(dout))
    return x.grad.numpy(), w.grad.numpy(), b.grad.numpy()


def numeric_grad(f, x, h=1e-6):
    """Central differences of the scalar f() with respect to every element of x (in place)."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        keep = x[i]
        x[i] = keep + h
        up = f()
        x[i] = keep - h
        down = f()
        x[i] = keep
        g[i] = (up - down) / (2 * h)
    return g


# -- tokens (the encoder families), logits (the softmax and cross-entropy families) ----------------
def random_tokens(rng, B, T, V):
    return rng.integers(0, V, size=(B, T))


def softmax64(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def rows_and_targets(rng, B, T, V, sigma=2.0):
    logits = rng.normal(0, sigma, size=(B, T, V))
    targets = rng.integers(0, V, size=(B, T))
    return logits, targets

