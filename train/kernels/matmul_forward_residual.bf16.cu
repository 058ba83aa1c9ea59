/*
title = "bf16 through cuBLASLt, the stream as C, the algorithm chosen by timing (fastest of 8)"
builds_on = 2
precision = "bf16"
changed = "Version 2's call with every operand in bf16 (products accumulated in fp32; the bias and the stream added in fp32; out rounded once), no workspace, and tune = 8: the heuristic's first eight algorithms timed at the call's shape, the fastest kept (matmul_forward 8's choice)."
why = """
At GPT-2's B = 32 shapes on an H100 (results/h100-session22-2026-12-06, call 1) the stream as C
costs the GEMM 18 us at attproj (75.0 -> 93.0, K = 768: too short to hide a 50 MB read) and 12 us
at fcproj (218.5 -> 230.5, K = 3072), while the kernel after it shrinks from fused_residual_forward
6 (77.2 us: two streams read, two written) to layernorm_forward 10 (42.4 us): ~35 us saved a site,
~17 and ~23 net, ~0.48 ms a step over 24 sites; the trainer measured 0.37 (call 4: 54.66-55.11 ms
against 55.20-55.58, interleaved). It also stops keeping the projections' outputs (2 x B*T*C bf16
a layer: 1.2 GiB at B = 32). No workspace: a persistent kernel's counter would need a memset
before each call, and these GEMMs are long enough without split-K.
"""
preconditions = []

[[launch]]
library = "gemm_lt"
a = "inp"
b = "weight"
c = "residual"
d = "out"
m = "N"
n = "OC"
k = "C"
trans_b = true
beta = 1.0
bias = "bias"
dtype = "bf16"
workspace = 0
tune = 8
*/
