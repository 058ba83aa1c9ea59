/*
title = "bf16: both GEMMs through cuBLASLt, each algorithm chosen by timing (the fastest of 8 candidates)"
builds_on = 3
precision = "bf16"
changed = "dinp as version 3 (cuBLASLt, no workspace) with tune = 8; dweight += dout^T @ inp through cuBLASLt with the 32 MiB workspace (so split-K algorithms stay candidates) and tune = 8: each call's candidates timed at its shape on random scratch operands, the fastest kept (remembered per device)."
why = """
Neither cuBLAS's default nor cuBLASLt's first pick is best at every shape: alone on an H200 at
B = 16 the best of cuBLASLt's first eight ran qkv's input gradient (16384 x 768 x 2304) in 92.0 us
against cuBLAS's 122.0, and fc's weight gradient (3072 x 768 x 16384) in 135.8 against 140.8
(results/h200-session12-2026-12-01/call2, gemm_algos). Version 4 showed that one fixed choice for
the weight gradients (no workspace, so no split-K) loses at some shapes what it wins at others;
timing each shape's candidates, split-K among them, keeps the better at each.
"""
preconditions = []

[[launch]]
library = "gemm_lt"
a = "dout"
b = "weight"
d = "dinp"
m = "N"
n = "C"
k = "OC"
dtype = "bf16"
workspace = 0
tune = 8

[[launch]]
library = "gemm_lt"
a = "dout"
b = "inp"
d = "dweight"
m = "OC"
n = "C"
k = "N"
trans_a = true
beta = 1.0
dtype = "bf16"
tune = 8
*/
