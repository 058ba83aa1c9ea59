/*
title = "cuBLASLt: the bias in the epilogue, the residual stream as the C operand (beta = 1)"
builds_on = 1
changed = "One cuBLASLt matmul, D = A B + beta C + bias with C = residual and beta = 1 (matmul_forward 5's call with a C operand): the stream's tile is read and added while the output tile is still in registers."
why = """
Unfused, the projection writes its N x OC output and the next kernel reads it back with the stream
and writes their sum: 4 * 4 * N * OC bytes around the product (out written; fused_residual_forward's
inp1 and inp2 read, its residual written). With the stream as C, the GEMM reads it once and writes
the sum once: 2 * 4 * N * OC, and the output that nothing else reads is never stored. cuBLASLt's epilogue loads C tile by tile as it stores D,
so the extra read overlaps the next tile's products when the GEMM is long enough in K.
"""
preconditions = []

[[launch]]
library = "gemm_lt"
a = "inp"
b = "weight"
c = "residual"
d = "out"
m = "N"
n = "OC"
k = "C"
trans_b = true
beta = 1.0
bias = "bias"
tf32 = "tf32"
*/
