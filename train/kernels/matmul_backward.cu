/*
title = "Two cuBLAS SGEMMs"
changed = "The starting point: dinp = dout @ weight and dweight = 1 * dout^T @ inp + 1 * dweight as two cuBLAS calls."
why = """
Both are large GEMMs (2*N*C*OC FLOPs each), compute-bound, which cuBLAS runs near the FP32 peak.
Neither needs a transpose copy: weight (OC x C) is already the right operand for dinp, and
dout^T is dout read with trans_a. beta = 1 makes the accumulation into dweight part of the GEMM
epilogue, so dweight crosses memory once, with no separate add kernel.
"""
preconditions = []

[[launch]]
library = "gemm"
a = "dout"
b = "weight"
c = "dinp"
m = "N"
n = "C"
k = "OC"
tf32 = "tf32"

[[launch]]
library = "gemm"
a = "dout"
b = "inp"
c = "dweight"
m = "OC"
n = "C"
k = "N"
trans_a = true
beta = 1.0
tf32 = "tf32"
*/
