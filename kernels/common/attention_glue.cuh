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
