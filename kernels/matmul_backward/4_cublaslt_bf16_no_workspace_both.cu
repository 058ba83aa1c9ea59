/*
title = "bf16: both GEMMs through cuBLASLt with no workspace (no memset, no split-K reduce)"
builds_on = 3
precision = "bf16"
changed = "Version 3 with the weight gradient through cuBLASLt given no workspace too: dweight = dout^T @ inp + dweight (beta = 1, the += in the epilogue) in one kernel, where cuBLAS split the N-long reduction over its workspace and added the parts in a second kernel."
why = """
With the workspace, cuBLAS splits the weight gradient's long K (N = B*T rows) into parts summed by
a splitKreduce kernel: two launches a call. cuBLASLt given no workspace cannot split K that way
and picks a kernel that walks all of K itself. Which is faster depends on the shape: captured
alone on an H200 at B = 16 (results/h200-session12-2026-12-01/call3, memset_probe), fc's weight
gradient (3072 x 768 x 16384) took 99.2 us against cuBLAS's 111.6, attproj's (768 x 768 x 16384)
41.0 against 39.4. The trainer calls it at four shapes a layer and the lm head's; its step says
which version wins.
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
workspace = 0
*/
