/*
title = "bf16 through cuBLASLt, the algorithm chosen by timing: the fastest of 8 candidates at the call's shape"
builds_on = 7
precision = "bf16"
changed = "Version 7's call with tune = 8: cuBLASLt's heuristic lists up to 8 algorithms (all it offers at these shapes) for the product and its bias epilogue, each is timed at this call's shape on random scratch operands, and the fastest runs (remembered per device in the cache's gemm_tune.json)."
why = """
cuBLASLt's heuristic ranks its algorithms by a model of the device; its first pick is a good
guess, not a measurement. Timed alone on an H200 at the trainer's B = 16 shapes, the best of its
first eight ran faster than the first at most of them: qkv's 16384 x 2304 x 768 106.7 us against
114.1, the lm head's 16384 x 50304 x 768 1763 against 2001 (results/h200-session12-2026-12-01/
call2, gemm_algos). Timing the candidates once, where the call is planned, costs well under a
second a shape and nothing after: the pick is kept on disk, so the next run (and a resumed one)
launches the same kernel and gets the same bits. Still no workspace, so no memset before it.
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
tune = 8
*/
