"""A linear layer: out = inp @ weight^T + bias, weight in PyTorch's (out features, in features) layout."""


def matmul_forward(inp, weight, bias):
    return {"out": inp @ weight.T + bias}
