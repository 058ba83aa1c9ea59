/*
title = "bf16: version 5 with both GEMMs' algorithms chosen by timing (the fastest of 8 candidates each)"
builds_on = 5
precision = "bf16"
changed = "Version 5's DGELU GEMM (with its workspace) and its weight gradient, now through cuBLASLt with the workspace, each with tune = 8: cuBLASLt's candidates timed at the call's shape on random scratch operands and the fastest kept (remembered per device). The column sums are version 5's own kernels, included from its file."
why = """
The DGELU GEMM runs at ~490 TFLOP/s in the trainer's B = 32 step on an H200 where plain GEMMs of
its size reach 740-770; alone at B = 16 the fourth of cuBLASLt's first eight candidates took 160.6
us against the first pick's 171.3 (results/h200-session12-2026-12-01/call2, gemm_algos). The
weight gradient's best algorithm (split-K over the workspace or not) changes with the shape (see
matmul_backward 5). Both are measured once per shape and device where the call is planned.
"""
preconditions = ["C % 8 == 0"]

[derived]
SLICES = "max(1, min(cdiv(N, 32), SMS * 4 // cdiv(C, 256)))"  # four blocks of 256 columns per SM, >= 32 rows each
ROWS = "cdiv(N, SLICES)"

[scratch]
partial = "SLICES * C"

[[launch]]
library = "gemm_lt"
a = "dout"
b = "weight"
d = "dpre"
m = "N"
n = "C"
k = "OC"
dgelu = true
aux = "pre"
dtype = "bf16"
tune = 8

[[launch]]
kernel = "dgelu_column_partials5"
grid = ["cdiv(C, 256)", "SLICES"]
block = 256
args = ["partial", "dpre", "N", "C", "ROWS"]

[[launch]]
kernel = "dgelu_bias_add5"
grid = "cdiv(C, 256)"
block = 256
args = ["dpre_bias", "partial", "C", "SLICES"]

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
// The column sums (dgelu_column_partials5, dgelu_bias_add5): version 5's kernels, unchanged.
#include "5_cublaslt_dgelu_bf16_column_sums_at_copy_speed.cu"
