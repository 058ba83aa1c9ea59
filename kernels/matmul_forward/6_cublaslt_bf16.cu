/*
title = "bf16 through cuBLASLt: tensor cores, fp32 accumulation, the bias fused"
builds_on = 5
precision = "bf16"
changed = "Version 5's call with every operand in bf16: the products run on the bf16 tensor cores, accumulate in fp32, and the bias is added in the epilogue before out is rounded to bf16 once."
why = """
Half the bytes of every operand, and the bf16 tensor cores: on an H100 about 790 TFLOP/s dense
against 49 for FP32 on CUDA cores. At the classic sizes (38.7 GFLOP) the FP32 GEMM needs ~0.8 ms;
bf16 needs ~0.05 ms plus its 68 MB of memory traffic.
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
dtype = "bf16"
*/
