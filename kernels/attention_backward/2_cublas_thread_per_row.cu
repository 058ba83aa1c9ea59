/*
title = "cuBLAS GEMMs + a causal softmax backward with one thread per row"
builds_on = 1
changed = "The five matmuls go to cuBLAS strided-batched GEMMs over the B*NH heads (q, k, v, dout permuted into per-head blocks first, the gradients permuted back). Between them one kernel, one thread per row, turns scores into P = exp(s - lse) and dP into dS = P (dP - D)."
why = """
The matmuls are ~95% of the work and cuBLAS runs them near the FP32 ceiling instead of version
1's uncoalesced dot products and column walks. The softmax backward is fused into one pass pair
per row (P and D in the first, dS in the second), written in place over the GEMM outputs, with
zeros above the diagonal because the following GEMMs read whole rows. One thread per row is the
obvious first mapping, and a poor one: neighbouring threads walk rows T floats apart, so no load
coalesces, and there are only B*NH*T threads, each with a T-long serial loop.
"""
block_sizes = [64, 128, 256, 512]

[scratch]
qkvp = "3 * B * NH * T * HS"   # q, k, v as (B*NH, T, HS) blocks
dop = "B * NH * T * HS"        # dout as (B*NH, T, HS)
att = "B * NH * T * T"         # scaled scores, then P
datt = "B * NH * T * T"        # dP, then dS
dqkvp = "3 * B * NH * T * HS"  # dq, dk, dv as (B*NH, T, HS) blocks

[[launch]]
kernel = "attention_backward_permute2"
grid = ["cdiv(T * HS, block_size)", "B * NH"]
block = "block_size"
args = ["qkvp", "dop", "qkv", "dout", "B", "T", "NH", "HS"]

[[launch]]
library = "gemm"     # att = scale q k^T (the full square: cuBLAS cannot skip the upper triangle)
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
library = "gemm"     # datt = dout v^T
a = "dop"
b = "qkvp[2 * B * NH * T * HS]"
c = "datt"
m = "T"
n = "T"
k = "HS"
trans_b = true
batch = "B * NH"
stride_a = "T * HS"
stride_b = "T * HS"
stride_c = "T * T"
tf32 = "tf32"

[[launch]]
kernel = "attention_softmax_backward2"
grid = "cdiv(B * NH * T, block_size)"
block = "block_size"
args = ["att", "datt", "lse", "B * NH * T", "T"]

[[launch]]
library = "gemm"     # dv = P^T dout
a = "att"
b = "dop"
c = "dqkvp[2 * B * NH * T * HS]"
m = "T"
n = "HS"
k = "T"
trans_a = true
batch = "B * NH"
stride_a = "T * T"
stride_b = "T * HS"
stride_c = "T * HS"
tf32 = "tf32"

[[launch]]
library = "gemm"     # dq = scale dS k
a = "datt"
b = "qkvp[B * NH * T * HS]"
c = "dqkvp"
m = "T"
n = "HS"
k = "T"
alpha = "1.0 / sqrt(HS)"
batch = "B * NH"
stride_a = "T * T"
stride_b = "T * HS"
stride_c = "T * HS"
tf32 = "tf32"

[[launch]]
library = "gemm"     # dk = scale dS^T q
a = "datt"
b = "qkvp"
c = "dqkvp[B * NH * T * HS]"
m = "T"
n = "HS"
k = "T"
trans_a = true
alpha = "1.0 / sqrt(HS)"
batch = "B * NH"
stride_a = "T * T"
stride_b = "T * HS"
stride_c = "T * HS"
tf32 = "tf32"

[[launch]]
kernel = "attention_backward_unpermute2"
grid = ["cdiv(T * HS, block_size)", "B * NH"]
block = "block_size"
args = ["dqkv", "dqkvp", "B", "T", "NH", "HS"]
*/

#include "attention_glue.cuh"  // permute_qkv, permute_heads, unpermute_qkv

// qkv (B, T, 3, NH, HS) -> qkvp (3, B*NH, T, HS) and dout (B, T, NH, HS) -> dop (B*NH, T, HS)
extern "C" __global__ void attention_backward_permute2(float* qkvp, float* dop, const float* qkv,
                                                        const float* dout, int B, int T, int NH, int HS) {
    permute_qkv(qkvp, qkv, B, T, NH, HS);
    permute_heads(dop, dout, B, T, NH, HS);
}

// dqkvp (3, B*NH, T, HS) -> dqkv (B, T, 3, NH, HS)
extern "C" __global__ void attention_backward_unpermute2(float* dqkv, const float* dqkvp, int B, int T,
                                                          int NH, int HS) {
    unpermute_qkv(dqkv, dqkvp, B, T, NH, HS);
}

// One thread per row: att <- P = exp(s - lse) (0 above the diagonal), datt <- dS = P (dP - D).
extern "C" __global__ void attention_softmax_backward2(float* att, float* datt, const float* lse, int rows,
                                                       int T) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    int t = row % T;
    float* p = att + (size_t)row * T;
    float* g = datt + (size_t)row * T;
    float L = lse[row];
    float D = 0.0f;
    for (int i = 0; i <= t; i++) {
        float pi = expf(p[i] - L);
        p[i] = pi;
        D = fmaf(pi, g[i], D);
    }
    for (int i = 0; i < T; i++) {
        if (i <= t) {
            g[i] = p[i] * (g[i] - D);
        } else {
            p[i] = 0.0f;
            g[i] = 0.0f;
        }
    }
}
