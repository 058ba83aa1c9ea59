/*
title = "bf16: version 2's DGELU_BGRAD matmul and dweight GEMM on the tensor cores"
builds_on = 2
precision = "bf16"
changed = "Version 2's three steps with bf16 operands and fp32 accumulation: cuBLASLt's epilogue writes dpre and the column sums in bf16 (the bias gradient takes the output's type), the sums are added into dpre_bias in fp32 and rounded once, and dweight += dout^T @ inp runs as matmul_backward 2's bf16 GEMM."
why = """
The backward's two GEMMs on the bf16 tensor cores with the GELU's backward and the fc bias
gradient folded into the first one's epilogue. Unfused, gelu_backward 4 and matmul_backward_bias 8
take 56 + 25 us at the classic sizes on an H100, beside the two GEMMs' 112 us; fused, the
epilogue reads pre and writes dpre once where the input gradient and dpre were each written and
read back: 3 * 2 * N * C bytes (150 MB) less, and two launches.
"""
preconditions = ["C % 8 == 0"]

[scratch]
bgrad = { size = "C", dtype = "bf16" }

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
bias_grad = "bgrad"
dtype = "bf16"

[[launch]]
kernel = "accumulate_bf16"
grid = "cdiv(C, 256)"
block = "256"
args = ["dpre_bias", "bgrad", "C"]

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
#include "bf16.cuh"  // bf16, to_float/to_bf16

// dst[i] += src[i] in fp32, rounded to bf16 once.
extern "C" __global__ void accumulate_bf16(bf16* dst, const bf16* src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = to_bf16(to_float(dst[i]) + to_float(src[i]));
}
