/*
title = "cuBLASLt's DGELU_BGRAD epilogue for dpre and its column sums, a cuBLAS GEMM for dweight"
builds_on = 1
changed = "dpre = gelu'(pre) * (dout @ weight) and its column sums come out of one cuBLASLt matmul with the DGELU_BGRAD epilogue (pre read as its aux input); the sums, which cuBLASLt writes rather than adds, land in a scratch vector that a small kernel adds into dpre_bias; dweight += dout^T @ inp is matmul_backward 1's cuBLAS call with beta = 1."
why = """
Unfused (matmul_backward 1, gelu_backward 2, matmul_backward_bias 5) the input gradient is
written, read back with pre, dpre written, then read again for the column sums: 5 * N * C floats
beyond the GEMMs' operands (500 MB at the classic sizes) and two more launches. Here the epilogue
scales each tile of the product by gelu'(pre) and sums its columns while the tile is in
registers: pre is read once and dpre written once, 300 MB less. The bias gradient must accumulate
across micro-batches like every parameter gradient, but the epilogue overwrites its output, so it
goes to scratch and a small kernel adds it in (C floats: negligible).
"""
preconditions = ["C % 8 == 0"]

[scratch]
bgrad = "C"

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
tf32 = "tf32"

[[launch]]
kernel = "accumulate"
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
tf32 = "tf32"
*/

// dst[i] += src[i]: the epilogue's column sums into the accumulated gradient.
extern "C" __global__ void accumulate(float* dst, const float* src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}
