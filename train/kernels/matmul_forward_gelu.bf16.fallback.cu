/*
title = "bf16 through cuBLASLt, the fused GELU GEMM's algorithm chosen by timing (the fastest of 8 candidates)"
builds_on = 4
precision = "bf16"
changed = "Version 4's call with tune = 8: the GELU_AUX_BIAS algorithms cuBLASLt's heuristic lists are timed at this call's shape on random scratch operands and the fastest runs (remembered per device)."
why = """
The fused GELU GEMM is the step's slowest for its FLOPs: ~490-500 TFLOP/s in the trainer's B = 32
profile on an H200 where the plain GEMMs of the same size reach 740-770, its epilogue writing the
GELU's input and output. The heuristic's first pick is its model's guess; which of its candidates
hides that epilogue best is a measurement, made once at the call's shape (see matmul_forward 8).
No workspace, as in version 4.
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
workspace = 0
tune = 8
*/
