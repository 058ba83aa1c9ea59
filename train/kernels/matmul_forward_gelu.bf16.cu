/*
title = "bf16 through cuBLASLt: tensor cores, fp32 accumulation, bias and GELU in the epilogue"
builds_on = 2
precision = "bf16"
changed = "Version 2's call with every operand in bf16: the products run on the bf16 tensor cores and accumulate in fp32; the epilogue adds the bias, writes pre rounded to bf16, applies the GELU to the fp32 value and writes out rounded to bf16."
why = """
The fc layer's product on the bf16 tensor cores (matmul_forward 6) with gelu_forward 4's separate
pass folded in. Unfused, the GEMM writes pre (2 * N * OC bytes) and the GELU pass reads it back
and writes out (42 us at the classic sizes on an H100, beside the GEMM's 67 us); fused, pre and
out are both written from the epilogue and the read of pre is gone: 50 MB, ~17 us at the copy
ceiling, and a launch.
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
dtype = "bf16"
*/
