"""A linear layer whose output joins the residual stream: out = residual + inp @ weight^T + bias.

In GPT-2 each block's two projections (attproj, fcproj) end this way: the product and its bias are
added to the stream that entered the branch, and only the sum is kept. Unfused, the projection
writes its output and fused_residual_forward reads it back beside the stream.
"""


def matmul_forward_residual(inp, weight, bias, residual):
    return {"out": residual + (inp @ weight.T + bias)}
