"""Backward of the tanh-approximated GELU: dinp = gelu'(inp) * dout (written, not accumulated)."""

import numpy as np

GELU_SCALE = np.sqrt(2.0 / np.pi)
GELU_CUBIC = 0.044715


def gelu_backward(inp, dout):
    u = GELU_SCALE * (inp + GELU_CUBIC * inp**3)
    th = np.tanh(u)
    du = GELU_SCALE * (1.0 + 3.0 * GELU_CUBIC * inp**2)
    grad = 0.5 * (1.0 + th) + 0.5 * inp * (1.0 - th * th) * du
    return {"dinp": grad * dout}


def torch_gelu_backward(inp, dout):
    """PyTorch's equivalent: the kernel autograd runs for F.gelu(x, approximate="tanh")'s backward
    (called directly, so the forward is not timed with it)."""
    import torch
    return torch.ops.aten.gelu_backward(dout, inp, approximate="tanh")
