"""Bias gradient of a linear layer: dbias += the column sums of dout over the B*T rows."""


def matmul_backward_bias(dbias, dout):
    return {"dbias": dbias + dout.reshape(-1, dbias.shape[0]).sum(axis=0)}
