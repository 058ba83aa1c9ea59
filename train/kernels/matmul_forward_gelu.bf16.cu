/*
title = "bf16 through cuBLASLt with no workspace: the fused GELU GEMM without the memset before it"
builds_on = 3
precision = "bf16"
changed = "Version 3's call with cuBLASLt given no workspace (workspace = 0): its kernel then needs no counter zeroed before each launch, so the memset before every call is gone."
why = """
As matmul_forward 7: with a workspace, cuBLASLt's persistent kernels zero a counter in it by a
memset before each launch, a graph node and ~2 us of the trainer's step each. With none, the
heuristic's first pick at the trainer's shape (16384 x 3072 x 768, GELU_AUX_BIAS) runs alone:
captured, 148.4 us against 152.0 with the memset on an H200 (results/h200-session12-2026-12-01/
call3, memset_probe).
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
*/
