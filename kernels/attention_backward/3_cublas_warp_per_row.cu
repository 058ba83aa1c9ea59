/*
title = "cuBLAS GEMMs + a warp per row for the softmax backward"
builds_on = 2
changed = "The softmax-backward kernel gives each row to a warp: its 32 lanes take consecutive columns, reduce D with shuffles, then write dS."
why = """
Version 2's threads each walked a row T floats away from their neighbours' rows: every load was
its own memory transaction. With a warp per row, the 32 lanes read 32 consecutive floats (one
128-byte transaction), the row is split 32 ways (a T/32-long loop per lane instead of T), and
D is combined with five shuffles, no shared memory. The second pass re-reads P and dP, which
are still in L1/L2. The GEMMs are unchanged.
"""
block_sizes = [64, 128, 256, 512]

[scratch]
qkvp = "3 * B * NH * T * HS"   # q, k, v as (B*NH, T, HS) blocks
dop = "B * NH * T * HS"        # dout as (B*NH, T, HS)
att = "B * NH * T * T"         # scaled scores, then P
datt = "B * NH * T * T"        # dP, then dS
dqkvp = "3 * B * NH * T * HS"  # dq, dk, dv as (B*NH, T, HS) blocks

[[launch]]
kernel = "attention_backward_permute3"
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
kernel = "attention_softmax_backward3"
grid = "cdiv(B * NH * T, block_size // 32)"
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
kernel = "attention_backward_unpermute3"
grid = ["cdiv(T * HS, block_size)", "B * NH"]
block = "block_size"
args = ["dqkv", "dqkvp", "B", "T", "NH", "HS"]
*/

#include "attention_glue.cuh"  // permute_qkv, permute_heads, unpermute_qkv
#include "reduce.cuh"          // warp_sum: every lane gets the warp's total

// qkv (B, T, 3, NH, HS) -> qkvp (3, B*NH, T, HS) and dout (B, T, NH, HS) -> dop (B*NH, T, HS)
extern "C" __global__ void attention_backward_permute3(float* qkvp, float* dop, const float* qkv,
                                                        const float* dout, int B, int T, int NH, int HS) {
    permute_qkv(qkvp, qkv, B, T, NH, HS);
    permute_heads(dop, dout, B, T, NH, HS);
}

// dqkvp (3, B*NH, T, HS) -> dqkv (B, T, 3, NH, HS)
extern "C" __global__ void attention_backward_unpermute3(float* dqkv, const float* dqkvp, int B, int T,
                                                          int NH, int HS) {
    unpermute_qkv(dqkv, dqkvp, B, T, NH, HS);
}

extern "C" __global__ void attention_softmax_backward3(float* att, float* datt, const float* lse, int rows,
                                                       int T) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;  // whole warps leave together: the shuffles below see 32 lanes
    int t = row % T;
    float* p = att + (size_t)row * T;
    float* g = datt + (size_t)row * T;
    float L = lse[row];
    float D = 0.0f;
    for (int i = lane; i < T; i += 32) {
        float pi = i <= t ? expf(p[i] - L) : 0.0f;
        p[i] = pi;
        D = fmaf(pi, i <= t ? g[i] : 0.0f, D);
    }
    D = warp_sum(D);
    for (int i = lane; i < T; i += 32) g[i] = i <= t ? p[i] * (g[i] - D) : 0.0f;
}
