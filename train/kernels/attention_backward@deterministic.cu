/*
title = "cuBLAS GEMMs + a block per row for the softmax backward, the row cached in shared memory, float4"
changed = "The softmax-backward kernel gives each row to a block. Its threads read the row's scores and dP once with float4 loads, keep P and dP in shared memory, reduce D across warps, and write P and dS once."
why = """
Version 3 reads every element twice (the second pass hits L2 for rows longer than L1 keeps) and
does scalar accesses. Here global memory sees exactly one float4 read and one float4 write per
element of both matrices: the row (2 x 4 KB at T = 1024) is too long for registers that cannot
be indexed dynamically, so it waits in shared memory between the two passes. A block per row
also puts 4-16 warps' worth of loads in flight for one row, where a warp per row had one. D
crosses warps through shared memory (a shuffle reduction per warp, then one across warps).
"""
preconditions = ["T % 4 == 0", "T <= 16384"]   # float4 rows; 2 x T floats of shared memory
block_sizes = [64, 128, 256, 512]

[scratch]
qkvp = "3 * B * NH * T * HS"   # q, k, v as (B*NH, T, HS) blocks
dop = "B * NH * T * HS"        # dout as (B*NH, T, HS)
att = "B * NH * T * T"         # scaled scores, then P
datt = "B * NH * T * T"        # dP, then dS
dqkvp = "3 * B * NH * T * HS"  # dq, dk, dv as (B*NH, T, HS) blocks

[[launch]]
kernel = "attention_backward_permute4"
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
kernel = "attention_softmax_backward4"
grid = "B * NH * T"
block = "block_size"
shared = "8 * T"
args = ["att", "datt", "lse", "T"]

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
kernel = "attention_backward_unpermute4"
grid = ["cdiv(T * HS, block_size)", "B * NH"]
block = "block_size"
args = ["dqkv", "dqkvp", "B", "T", "NH", "HS"]
*/
// ---- begin attention_glue.cuh ----
// attention_glue.cuh: the layout copies around the cuBLAS attention versions.
//
// Shared because attention_forward 3-4 and attention_backward 2-4 carried the same permutes word
// for word. Strided-batched GEMMs need a uniform stride between heads, which the packed
// qkv (B, T, 3, NH, HS) lacks, so q, k, v (and dout) are copied into per-head blocks
// (B*NH, T, HS) first and the results copied back. Each version keeps its own extern "C" kernels
// (their names are in its launch header); their bodies call these.
//
// Every function is one thread per (t, d) of head blockIdx.y: the grid is
// [cdiv(T * HS, blockDim.x), B * NH], and threads past T * HS return.

#ifndef KERNELS_COMMON_ATTENTION_GLUE_CUH
#define KERNELS_COMMON_ATTENTION_GLUE_CUH

// qkv (B, T, 3, NH, HS) -> qkvp (3, B*NH, T, HS): q, k and v blocks one after the other.
__device__ __forceinline__ void permute_qkv(float* qkvp, const float* qkv, int B, int T, int NH, int HS) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)T * HS) return;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int t = i / HS, d = i % HS;
    size_t C = (size_t)NH * HS, N = (size_t)B * NH * T * HS;
    size_t src = ((size_t)b * T + t) * 3 * C + (size_t)h * HS + d;
    size_t dst = (size_t)bh * T * HS + i;
    qkvp[dst] = qkv[src];
    qkvp[N + dst] = qkv[src + C];
    qkvp[2 * N + dst] = qkv[src + 2 * C];
}

// x (B, T, NH, HS) -> xp (B*NH, T, HS), e.g. dout for the backward GEMMs.
__device__ __forceinline__ void permute_heads(float* xp, const float* x, int B, int T, int NH, int HS) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)T * HS) return;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int t = i / HS, d = i % HS;
    xp[(size_t)bh * T * HS + i] = x[((size_t)b * T + t) * NH * HS + (size_t)h * HS + d];
}

// yp (B*NH, T, HS) -> y (B, T, NH, HS), e.g. the attention output.
__device__ __forceinline__ void unpermute_heads(float* y, const float* yp, int B, int T, int NH, int HS) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)T * HS) return;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int t = i / HS, d = i % HS;
    y[((size_t)b * T + t) * NH * HS + (size_t)h * HS + d] = yp[(size_t)bh * T * HS + i];
}

// dqkvp (3, B*NH, T, HS) -> dqkv (B, T, 3, NH, HS): the inverse of permute_qkv.
__device__ __forceinline__ void unpermute_qkv(float* dqkv, const float* dqkvp, int B, int T, int NH, int HS) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)T * HS) return;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int t = i / HS, d = i % HS;
    size_t C = (size_t)NH * HS, N = (size_t)B * NH * T * HS;
    size_t dst = ((size_t)b * T + t) * 3 * C + (size_t)h * HS + d;
    size_t src = (size_t)bh * T * HS + i;
    dqkv[dst] = dqkvp[src];
    dqkv[dst + C] = dqkvp[N + src];
    dqkv[dst + 2 * C] = dqkvp[2 * N + src];
}

#endif  // KERNELS_COMMON_ATTENTION_GLUE_CUH

// ---- end attention_glue.cuh ----  // permute_qkv, permute_heads, unpermute_qkv
// ---- begin reduce.cuh ----
// reduce.cuh: warp and block reductions of floats (sum and max).
//
// Shared because the same five-shuffle butterfly and the same two-level block reduction were
// written out in more than a dozen versions across seven families. The versions whose lesson is
// the reduction itself (layernorm_forward 5, softmax_forward 3 and 4, reduce 5, and
// matmul_backward_bias 2's inline loop) still write it out; every other version includes this
// header.
//
// warp_sum<LANES>(v), warp_max<LANES>(v)
//   An xor butterfly over aligned groups of LANES lanes (LANES a power of two <= 32; the default
//   is the whole warp). Every lane of a group gets the group's result. The shuffles use the full
//   mask: all 32 lanes of the warp must make the call (a warp may only leave early as a whole).
//
// block_sum(v), block_max(v)
//   Over every thread of the block: each warp reduces with warp_sum/warp_max, one shared slot per
//   warp, then warp 0 reduces the slots. Every thread gets the result.
//   * blockDim.x must be a multiple of 32 (full warps), at most 1024; every thread must call
//     (there are __syncthreads() inside: never call under a condition that splits the block).
//   * 33 floats of static shared memory (32 warp slots and the result), one buffer for both
//     functions; no dynamic shared memory, so a launch's `shared` does not change.
//   * The barrier after the warp step also orders every thread's earlier shared-memory writes
//     before anything after the call; the last barrier frees the slots, so calls may follow
//     each other directly.

#ifndef KERNELS_COMMON_REDUCE_CUH
#define KERNELS_COMMON_REDUCE_CUH

template <int LANES = 32>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

template <int LANES = 32>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

// The two-level block reduction behind block_sum and block_max (is_max is a constant at every
// call site, so the unused branches compile away).
__device__ __forceinline__ float block_reduce(float v, bool is_max) {
    __shared__ float slots[33];  // [0, 32): one per warp; [32]: the result
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) slots[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? slots[lane] : (is_max ? -INFINITY : 0.0f);
        w = is_max ? warp_max(w) : warp_sum(w);
        if (lane == 0) slots[32] = w;
    }
    __syncthreads();
    float result = slots[32];
    __syncthreads();  // the slots are free for the next call
    return result;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, false); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, true); }

#endif  // KERNELS_COMMON_REDUCE_CUH

// ---- end reduce.cuh ----          // block_sum: every thread gets the total

// qkv (B, T, 3, NH, HS) -> qkvp (3, B*NH, T, HS) and dout (B, T, NH, HS) -> dop (B*NH, T, HS)
extern "C" __global__ void attention_backward_permute4(float* qkvp, float* dop, const float* qkv,
                                                        const float* dout, int B, int T, int NH, int HS) {
    permute_qkv(qkvp, qkv, B, T, NH, HS);
    permute_heads(dop, dout, B, T, NH, HS);
}

// dqkvp (3, B*NH, T, HS) -> dqkv (B, T, 3, NH, HS)
extern "C" __global__ void attention_backward_unpermute4(float* dqkv, const float* dqkvp, int B, int T,
                                                          int NH, int HS) {
    unpermute_qkv(dqkv, dqkvp, B, T, NH, HS);
}

extern "C" __global__ void attention_softmax_backward4(float* att, float* datt, const float* lse, int T) {
    extern __shared__ float4 cache[];  // T/4 float4s of P, then T/4 of dP
    float4* P4 = cache;
    float4* G4 = cache + T / 4;
    size_t row = blockIdx.x;
    int t = row % T;
    float4* s4 = reinterpret_cast<float4*>(att + row * T);
    float4* g4 = reinterpret_cast<float4*>(datt + row * T);
    float L = lse[row];
    int n4 = t / 4 + 1;  // float4s holding columns 0..t
    float D = 0.0f;
    for (int i = threadIdx.x; i < T / 4; i += blockDim.x) {
        float4 p = make_float4(0.f, 0.f, 0.f, 0.f), g = p;
        if (i < n4) {
            float4 x = s4[i];
            g = g4[i];
            int c = 4 * i;
            p.x = c <= t ? expf(x.x - L) : 0.0f;
            p.y = c + 1 <= t ? expf(x.y - L) : 0.0f;
            p.z = c + 2 <= t ? expf(x.z - L) : 0.0f;
            p.w = c + 3 <= t ? expf(x.w - L) : 0.0f;
            D += p.x * g.x + p.y * g.y + p.z * g.z + p.w * g.w;  // masked entries have p = 0
        }
        s4[i] = p;  // P is final already
        P4[i] = p;
        G4[i] = g;
    }
    D = block_sum(D);  // its first barrier also publishes the row cache written above
    for (int i = threadIdx.x; i < T / 4; i += blockDim.x) {
        float4 p = P4[i], g = G4[i];
        g4[i] = make_float4(p.x * (g.x - D), p.y * (g.y - D), p.z * (g.z - D), p.w * (g.w - D));
    }
}
