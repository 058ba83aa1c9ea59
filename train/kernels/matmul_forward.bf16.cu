/*
title = "bf16 through cuBLASLt with no workspace: the same GEMM without the memset before it"
builds_on = 6
precision = "bf16"
changed = "Version 6's call with cuBLASLt given no workspace (workspace = 0): its heuristic then picks kernels that need no counter zeroed before the launch, so the memset that came before every call is gone."
why = """
Given a workspace, cuBLASLt's persistent Hopper kernels (nvjet) zero a 4-byte counter in it with a
memset before each launch. In the trainer's captured bf16 step on an H200 that was 125 memset
nodes a step, each ~0.8 us with ~1.4 us more of idle before the kernel after it (traced: results/
h200-session12-2026-12-01/call2). Given none, the heuristic's first choice at the trainer's
shapes is the same kind of kernel without the counter: captured alone, qkv's (16384 x 2304 x 768)
took 88.7 us against 90.8, attproj's (16384 x 768 x 768) 33.4 against 34.9 (call 3,
memset_probe). Prediction: ~2 us a call, 5 calls a layer's forward and the lm head: ~0.13 ms a
step at B = 16.
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
workspace = 0
*/
