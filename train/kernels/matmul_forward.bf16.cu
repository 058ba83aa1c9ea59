/*
title = "bf16 through cuBLASLt, tuned, and without the bias epilogue where the call says its bias is zero"
builds_on = 8
precision = "bf16"
changed = "Version 8's call, and a second library step that is the same GEMM without the bias: which one runs is chosen by the family's zero_bias param (when = ...), 0 by default. A call whose bias is all zeros (GPT-2's lm head has none; the trainer binds it to a zero vector) passes zero_bias = 1 and gets the plain GEMM."
why = """
Adding a zero bias costs nothing in arithmetic, but it changes which kernel cuBLASLt runs. At the
lm head's shape in the B = 32 step (32768 x 50304 x 768, tune 8 both) the GEMM with the bias
epilogue took 4077.5 us and the same GEMM without it 3344.4 (757 TFLOP/s, the rate of the lm
head's two backward GEMMs of the same FLOPs), timed interleaved on an H100 (results/
h100-session23-2026-12-06/call7). The caller knows its bias is zero; the library cannot. The
check runs the bias step (zero_bias = 0, the default); the other is a plain tuned GEMM.
"""
preconditions = []

[[launch]]
library = "gemm_lt"
when = "zero_bias == 0"
a = "inp"
b = "weight"
d = "out"
m = "N"
n = "OC"
k = "C"
trans_b = true
bias = "bias"
dtype = "bf16"
workspace = 0
tune = 8

[[launch]]
library = "gemm_lt"
when = "zero_bias == 1"
a = "inp"
b = "weight"
d = "out"
m = "N"
n = "OC"
k = "C"
trans_b = true
dtype = "bf16"
workspace = 0
tune = 8
*/
