/*
title = "bf16: the input gradient through cuBLASLt with no workspace (no memset before it)"
builds_on = 2
precision = "bf16"
changed = "dinp = dout @ weight goes through cuBLASLt given no workspace, whose kernel needs no counter zeroed before its launch (version 2's cuBLAS call put a memset in front of it); dweight stays version 2's cuBLAS call, which splits the long N over its workspace."
why = """
cuBLAS routes version 2's input-gradient GEMM to a persistent cuBLASLt kernel that zeroes a
counter in the workspace with a memset before each launch: in the trainer's captured step on an
H200 a graph node and ~2 us each (results/h200-session12-2026-12-01/call2), and cuBLAS keeps the
memset even with its workspace set to none. Through cuBLASLt with workspace = 0 the same shape
(16384 x 768 x 2304, qkv's) ran alone, captured, in 77.5 us against 80.1 (call 3, memset_probe).
The weight gradient is left to cuBLAS: its K = N = B*T is long and the few output tiles are
split over K in the workspace (a second, reduce kernel, no memset); without a workspace
attproj's (768 x 768 x 16384) ran 41.0 us against 39.4.
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
