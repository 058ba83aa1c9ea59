/*
title = "cuBLAS strided-batched GEMMs for q k^T and att @ v, a block-per-row softmax between them"
builds_on = 1
changed = "The two matmuls go to cuBLAS (one batched call each over the B*NH heads); q, k, v are first permuted into per-head blocks and the result permuted back. The softmax is a block per row with shared-memory reductions."
why = """
The matmuls are 95% of the FLOPs, and cuBLAS runs them near the FP32 FMA ceiling (~45-49 TFLOP/s
on an H100) where versions 1 and 2 are latency-bound. Batching needs a uniform stride between
heads, which qkv's packed layout lacks, hence the permute (and the unpermute of the output).
The price: cuBLAS cannot skip the upper triangle (twice the useful FLOPs), and the full
(B, NH, T, T) scores go through memory three times (GEMM writes, softmax reads and writes,
second GEMM reads: ~1.2 GB at the default sizes). The softmax needs the whole row (zeros above
the diagonal included) because the second GEMM reads it all.
"""
block_sizes = [64, 128, 256, 512]

[scratch]
qkvp = "3 * B * NH * T * HS"   # q, k, v as (B*NH, T, HS) blocks, one after the other
att = "B * NH * T * T"
y = "B * NH * T * HS"

[[launch]]
kernel = "attention_permute3"
grid = ["cdiv(T * HS, block_size)", "B * NH"]
block = "block_size"
args = ["qkvp", "qkv", "B", "T", "NH", "HS"]

[[launch]]
library = "gemm"
a = "qkvp"
b = "qkvp[B * NH * T * HS]"
c = "att"
m = "T"
n = "T"
k = "HS"
trans_b = true
alpha = "1.0 / sqrt(HS)"
batch = "B * NH"
stride_a = "T * HS"
stride_b = "T * HS"
stride_c = "T * T"
tf32 = "tf32"

[[launch]]
kernel = "attention_softmax3"
grid = "B * NH * T"
block = "block_size"
args = ["att", "lse", "T"]

[[launch]]
library = "gemm"
a = "att"
b = "qkvp[2 * B * NH * T * HS]"
c = "y"
m = "T"
n = "HS"
k = "T"
batch = "B * NH"
stride_a = "T * T"
stride_b = "T * HS"
stride_c = "T * HS"
tf32 = "tf32"

[[launch]]
kernel = "attention_unpermute3"
grid = ["cdiv(T * HS, block_size)", "B * NH"]
block = "block_size"
args = ["out", "y", "B", "T", "NH", "HS"]
*/

#include "attention_glue.cuh"  // permute_qkv, unpermute_heads
#include "reduce.cuh"          // block_max, block_sum: every thread gets the result

// qkv (B, T, 3, NH, HS) -> qkvp (3, B, NH, T, HS); one thread per (t, d) of head blockIdx.y.
extern "C" __global__ void attention_permute3(float* qkvp, const float* qkv, int B, int T, int NH, int HS) {
    permute_qkv(qkvp, qkv, B, T, NH, HS);
}

// y (B, NH, T, HS) -> out (B, T, NH, HS)
extern "C" __global__ void attention_unpermute3(float* out, const float* y, int B, int T, int NH, int HS) {
    unpermute_heads(out, y, B, T, NH, HS);
}

// A block per row of scaled scores: softmax over t2 <= t, zeros above, lse of the row.
extern "C" __global__ void attention_softmax3(float* att, float* lse, int T) {
    size_t row = blockIdx.x;
    int t = row % T;
    float* x = att + row * T;
    float m = -INFINITY;
    for (int i = threadIdx.x; i <= t; i += blockDim.x) m = fmaxf(m, x[i]);
    m = block_max(m);
    float sum = 0.0f;
    for (int i = threadIdx.x; i <= t; i += blockDim.x) sum += expf(x[i] - m);
    sum = block_sum(sum);
    float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < T; i += blockDim.x) x[i] = i <= t ? expf(x[i] - m) * inv : 0.0f;
    if (threadIdx.x == 0) lse[row] = m + logf(sum);
}
