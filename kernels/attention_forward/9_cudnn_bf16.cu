/*
title = "cuDNN's fused attention (bf16), through the cuDNN frontend on our own buffers"
builds_on = 0  # starts afresh
variant = "cudnn"  # promoted as the family's @cudnn entry: train --attention cudnn
precision = "bf16"
changed = "No kernel of ours: one call of cuDNN's scaled-dot-product attention graph (causal, bf16 in and out, fp32 softmax statistics) reading q, k and v where they sit in the packed qkv."
why = """
The library baseline for our own tensor-core flash attention. cuDNN runs a FlashAttention-2
style kernel tuned for this GPU: q, k, v tiles through shared memory into the tensor cores, the
online softmax in registers, no T x T matrix in memory, the causal triangle skipped. Strides tell
it where each head lives inside (B, T, 3, NH, HS), so nothing is permuted first. The graph is
built once, when the launch plan is made; a launch is one cudnnBackendExecute.
"""
preconditions = ["HS % 8 == 0", "HS <= 128"]

[[launch]]
library = "sdpa_cudnn"
q = "qkv"
k = "qkv[C]"
v = "qkv[2 * C]"
out = "out"
lse = "lse"
B = "B"
T = "T"
NH = "NH"
HS = "HS"
*/
