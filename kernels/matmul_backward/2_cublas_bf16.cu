/*
title = "bf16: two cuBLAS GEMMs on the tensor cores"
builds_on = 1
precision = "bf16"
changed = "Version 1's two calls with bf16 operands and fp32 accumulation: dinp = dout @ weight, dweight = dout^T @ inp + dweight (the += in the epilogue, in fp32, rounded to bf16 once)."
why = """
The same two GEMMs on the bf16 tensor cores, with half the bytes: the backward's matmuls are the
bulk of a training step's FLOPs (twice the forward's), so this is where bf16 pays most.
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
dtype = "bf16"

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
dtype = "bf16"
*/
