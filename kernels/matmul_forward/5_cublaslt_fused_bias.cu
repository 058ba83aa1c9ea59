/*
title = "cuBLASLt with the bias fused into the epilogue"
builds_on = 4
changed = "One cuBLASLt matmul with the BIAS epilogue: the bias is added to each output tile while it is still in registers."
why = """
Version 4 writes the product, then reads and rewrites all N*OC outputs to add the bias: 2 * 4 *
N * OC extra bytes (200 MB at the classic sizes, ~70 us at the copy ceiling). Fusing the bias
into cuBLASLt's epilogue makes the output cross memory once, and saves a launch. The heuristic
picks the algorithm once, when the plan is built, not on every call.
"""
preconditions = []

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
tf32 = "tf32"
*/
