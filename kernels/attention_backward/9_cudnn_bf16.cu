/*
title = "cuDNN's fused attention backward (bf16), through the cuDNN frontend"
builds_on = 0  # starts afresh
variant = "cudnn"  # promoted as the family's @cudnn entry: train --attention cudnn
precision = "bf16"
changed = "No kernel of ours: cuDNN's SDPA backward graph recomputes P from q, k and the forward's log-sum-exp and writes dq, dk, dv straight into the packed dqkv."
why = """
The library baseline for our own tensor-core flash backward: the same recomputation as version 5
(no T x T matrix), with every product on the tensor cores in bf16 and fp32 accumulation.
"""
preconditions = ["HS % 8 == 0", "HS <= 128"]

[[launch]]
library = "sdpa_backward_cudnn"
q = "qkv"
k = "qkv[C]"
v = "qkv[2 * C]"
out = "out"
dout = "dout"
lse = "lse"
dq = "dqkv"
dk = "dqkv[C]"
dv = "dqkv[2 * C]"
B = "B"
T = "T"
NH = "NH"
HS = "HS"
*/
