/*
title = "cuBLAS + a warp-per-row online softmax: scale fused in, only t2 <= t read, float4"
builds_on = 3
changed = "The first GEMM no longer scales (alpha = 1); the softmax kernel applies scale * log2(e) itself and uses exp2. A warp owns a row and finds (max, sum) in one pass over the causal part with float4 loads, merging the lanes' (max, sum) pairs with shuffles; the write pass stores float4s of probabilities and of zeros."
why = """
Version 3's softmax reads each row twice before writing it, a block per row leaves most threads
idle on short (early) rows, and its block reductions need three barriers each. Here one read
pass yields both statistics (when a lane's max grows, its sum is rescaled by 2^(m - m')), a warp
combines them without shared memory, and only the causal part of the row (t2 <= t, half the
matrix on average) is read; the write pass re-reads it from cache. float4 accesses cut the
instruction count by four. Folding scale * log2(e) into the exponent turns each exp into one
multiply-add and an ex2. The GEMMs are unchanged.
"""
preconditions = ["T % 4 == 0"]   # rows of the score matrix start 16-byte aligned
block_sizes = [64, 128, 256, 512]

[scratch]
qkvp = "3 * B * NH * T * HS"
att = "B * NH * T * T"
y = "B * NH * T * HS"

[[launch]]
kernel = "attention_permute4"
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
batch = "B * NH"
stride_a = "T * HS"
stride_b = "T * HS"
stride_c = "T * T"
tf32 = "tf32"

[[launch]]
kernel = "attention_softmax4"
grid = "cdiv(B * NH * T, block_size // 32)"
block = "block_size"
args = ["att", "lse", "B * NH * T", "T", "1.4426950408889634 / sqrt(HS)"]

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
kernel = "attention_unpermute4"
grid = ["cdiv(T * HS, block_size)", "B * NH"]
block = "block_size"
args = ["out", "y", "B", "T", "NH", "HS"]
*/

#include <float.h>
#include "attention_glue.cuh"  // permute_qkv, unpermute_heads: as in version 3

extern "C" __global__ void attention_permute4(float* qkvp, const float* qkv, int B, int T, int NH, int HS) {
    permute_qkv(qkvp, qkv, B, T, NH, HS);
}

extern "C" __global__ void attention_unpermute4(float* out, const float* y, int B, int T, int NH, int HS) {
    unpermute_heads(out, y, B, T, NH, HS);
}

// A warp per row of raw scores q.k: probabilities in place (zeros above the diagonal) and lse.
// Work is in base 2: y = x * scale * log2(e), p = 2^(y - m) / sum, lse = (m + log2(sum)) ln 2.
extern "C" __global__ void attention_softmax4(float* att, float* lse, int rows, int T, float scale_log2e) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;  // whole warps leave together
    int t = row % T;
    float4* x = reinterpret_cast<float4*>(att + (size_t)row * T);
    int n4 = t / 4 + 1;  // float4s holding columns 0..t (the last one partly)
    // -FLT_MAX, not -inf, marks "no element yet": merging two empty lanes then computes
    // 2^(-FLT_MAX - -FLT_MAX) = 1 times a zero sum, where -inf would give inf - inf = NaN.
    float m = -FLT_MAX, s = 0.0f;
    for (int i = lane; i < n4; i += 32) {
        float4 v = x[i];
        float y[4] = {v.x * scale_log2e, v.y * scale_log2e, v.z * scale_log2e, v.w * scale_log2e};
        float cm = m;
#pragma unroll
        for (int c = 0; c < 4; c++)
            if (4 * i + c <= t) cm = fmaxf(cm, y[c]);
        s *= exp2f(m - cm);
#pragma unroll
        for (int c = 0; c < 4; c++)
            if (4 * i + c <= t) s += exp2f(y[c] - cm);
        m = cm;
    }
    for (int o = 16; o > 0; o /= 2) {
        float m2 = __shfl_xor_sync(0xffffffff, m, o);
        float s2 = __shfl_xor_sync(0xffffffff, s, o);
        float mn = fmaxf(m, m2);
        s = s * exp2f(m - mn) + s2 * exp2f(m2 - mn);
        m = mn;
    }
    float inv = 1.0f / s;
    for (int i = lane; i < T / 4; i += 32) {
        float4 p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < n4) {
            float4 v = x[i];
            int c = 4 * i;
            p.x = c <= t ? exp2f(v.x * scale_log2e - m) * inv : 0.0f;
            p.y = c + 1 <= t ? exp2f(v.y * scale_log2e - m) * inv : 0.0f;
            p.z = c + 2 <= t ? exp2f(v.z * scale_log2e - m) * inv : 0.0f;
            p.w = c + 3 <= t ? exp2f(v.w * scale_log2e - m) * inv : 0.0f;
        }
        x[i] = p;
    }
    if (lane == 0) lse[row] = (m + log2f(s)) * 0.6931471805599453f;
}
