"""A linear layer and the GELU after it, in one: pre = inp @ weight^T + bias, out = gelu(pre).

pre (the GELU's input) is an output too: the backward (matmul_backward_dgelu) needs it.
"""

from references.gelu_forward import gelu_forward


def matmul_forward_gelu(inp, weight, bias):
    pre = inp @ weight.T + bias
    return {"out": gelu_forward(pre)["out"], "pre": pre}


def torch_matmul_forward_gelu(inp, weight, bias):
    """PyTorch's equivalent, unfused: F.linear, then the tanh GELU; (out, pre)."""
    import torch.nn.functional as F
    pre = F.linear(inp, weight, bias)
    return F.gelu(pre, approximate="tanh"), pre
