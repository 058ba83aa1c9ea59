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
    """PyTorch's equivalent: aten's LayerNorm backward and the add, then the column sums of the new
    dinp, every step in fp32 and each result rounded once to the storage type. With bf16 tensors
    that costs PyTorch the conversions; fed bf16, aten rounds its dx to bf16, and the sums of the
    rounded dinp then missed the contract's 1e-2 in 44-84 of 768 columns (max error 1.01-1.33
    against sums of ~90 at B = 8, T = 1024 on an H200; see family.toml)."""
    import torch
    f32 = torch.float32
    new, dw, db = torch_layernorm_backward(*(x.to(f32) for x in (dinp, dweight, dbias, dout, inp, weight, mean, rstd)))
    sums = dproj_bias.to(f32) + new.reshape(-1, new.shape[-1]).sum(0)
    return new.to(dinp.dtype), dw.to(dweight.dtype), db.to(dbias.dtype), sums.to(dproj_bias.dtype)
