"""Gradients of out = inp @ weight^T + bias for inp (written) and weight (accumulated)."""


def matmul_backward(dweight, dout, inp, weight):
    oc, c = weight.shape
    rows_dout = dout.reshape(-1, oc)
    rows_inp = inp.reshape(-1, c)
    dinp = dout @ weight                            # (B, T, OC) @ (OC, C)
    dweight = dweight + rows_dout.T @ rows_inp      # += sum over the B*T rows
    return {"dinp": dinp, "dweight": dweight}
