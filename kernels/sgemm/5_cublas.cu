/*
title = "cuBLAS SGEMM (the baseline)"
builds_on = 0  # starts afresh
changed = "The same product through cublasGemmStridedBatchedEx with FP32 compute (TF32 only if tf32 = 1)."
why = """
The bar the hand-written versions are measured against: NVIDIA's FP32 kernels, tuned per
architecture with larger warp tiles, deeper software pipelines and SASS-level scheduling. The
course's target is for the best own version to reach a large fraction of it (>= 60% here).
"""
preconditions = []

[[launch]]
library = "gemm"
a = "A"
b = "B"
c = "C"
m = "M"
n = "N"
k = "K"
tf32 = "tf32"
*/
