"""LayerNorm backward that also takes the column sums of the dinp it leaves: in GPT-2's backward
the residual stream's gradient, after a layernorm's backward has added into it, is the output
gradient of the projection that wrote that stretch of the stream (attproj or the previous layer's
fcproj), whose bias gradient is its sum over the rows. Per row of C channels, as layernorm_backward:

    dinp       += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat))
    dweight    += sum over rows of dout * xhat
    dbias      += sum over rows of dout
    dproj_bias += sum over rows of dinp (the new dinp, after the add)

Unfused this is layernorm_backward, then matmul_backward_bias reading dinp back.
"""

from references.layernorm_backward import layernorm_backward, prepare, torch_layernorm_backward

__all__ = ["layernorm_backward_proj_bias", "prepare", "torch_layernorm_backward_proj_bias"]


def layernorm_backward_proj_bias(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd):
    out = layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd)
    rows = tuple(range(dout.ndim - 1))
    return {**out, "dproj_bias": dproj_bias + out["dinp"].sum(axis=rows)}


def torch_layernorm_backward_proj_bias(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd):
    """PyTorch's equivalent: layernorm_backward's (aten's LayerNorm backward), then the column sums."""
    dx, dw, db = torch_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd)
    return dx, dw, db, dproj_bias + dx.reshape(-1, dx.shape[-1]).sum(0)
