"""The backward of a linear layer whose input went through a GELU, and the GELU's own backward,
in one: for out = inp @ weight^T + bias with inp = gelu(pre),

    dpre       = gelu'(pre) * (dout @ weight)        written
    dpre_bias += dpre summed over the B*T rows        accumulated (the bias gradient of the layer
                                                       whose output pre is)
    dweight   += dout^T @ inp                         accumulated

This layer's own bias gradient (the column sums of dout) stays matmul_backward_bias's.
"""

from references.gelu_backward import gelu_backward


def matmul_backward_dgelu(dpre_bias, dweight, dout, inp, pre, weight):
    oc, c = weight.shape
    dpre = gelu_backward(pre, dout @ weight)["dinp"]  # (B, T, OC) @ (OC, C), times gelu'(pre)
    return {"dpre": dpre,
            "dpre_bias": dpre_bias + dpre.reshape(-1, c).sum(axis=0),
            "dweight": dweight + dout.reshape(-1, oc).T @ inp.reshape(-1, c)}


def torch_matmul_backward_dgelu(dpre_bias, dweight, dout, inp, pre, weight):
    """PyTorch's equivalent, unfused: the input-gradient GEMM, aten's GELU backward, the column
    sums and the weight-gradient GEMM."""
    import torch
    n, oc = dout.shape[0] * dout.shape[1], weight.shape[0]
    dpre = torch.ops.aten.gelu_backward(dout @ weight, pre, approximate="tanh")
    return (dpre, dpre_bias + dpre.reshape(n, -1).sum(0),
            dweight + dout.reshape(n, oc).t() @ inp.reshape(n, -1))
