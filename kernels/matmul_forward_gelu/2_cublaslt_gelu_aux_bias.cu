/*
title = "cuBLASLt with bias and GELU in the epilogue, the GELU's input kept as aux"
builds_on = 1
changed = "One cuBLASLt matmul with the GELU_AUX_BIAS epilogue: each output tile gets the bias, is written to pre (cuBLASLt's aux output), then goes through the tanh GELU and is written to out, all from registers."
why = """
matmul_forward 5 followed by gelu_forward 2 writes pre (N*OC floats), reads it back and writes
out: 3 * 4 * N * OC bytes and two launches. Here the product crosses memory twice (pre and out,
both needed: out by the next layer, pre by the backward) and once fewer is read, 4 * N * OC bytes
(100 MB at the classic sizes) and a launch saved. cuBLAS documents its GELU as the tanh
approximation GPT-2 uses. The aux matrix has pre's row-major layout, and cuBLASLt wants its rows a
multiple of 8 elements apart, hence the precondition on OC.
"""
preconditions = ["OC % 8 == 0"]

[[launch]]
library = "gemm_lt"
a = "inp"
b = "weight"
d = "out"
m = "N"
n = "OC"
k = "C"
trans_b = true
bias = "bias"
gelu = true
aux = "pre"
tf32 = "tf32"
*/
