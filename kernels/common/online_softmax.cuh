// online_softmax.cuh: the online softmax's running (max, sum) pair, its updates and its merges.
//
// Shared because softmax_forward 7-8 and fused_classifier 1-4 all carried the same copies.
// softmax_forward 6, the version that introduces the pair merge, still writes these out (with the
// same names); later versions include this header.
//
// A pair (m, s) stands for s = sum of exp(x - m) over the values x seen so far. (-FLT_MAX, 0) is
// the empty pair: -FLT_MAX rather than -inf, so that merging two empty pairs computes
// exp(-FLT_MAX - -FLT_MAX) = 1 times a zero sum, where -inf would give exp(inf - inf) = NaN.
// Pairs merge associatively, (m, s) + (m2, s2) = (M, s exp(m - M) + s2 exp(m2 - M)) with
// M = max(m, m2), so threads, warps and blocks may combine theirs in any tree.
//
// online_update(m, s, x), online_update4(m, s, v)
//   Fold one value, or a float4 (one rescale for the four), into a thread's running pair.
// online_merge(m, s, m2, s2)
//   (m, s) <- (m, s) + (m2, s2).
// warp_online_merge(m, s)
//   Xor butterfly over the warp: every lane gets the warp's pair. All 32 lanes must call.
// block_online_merge<WARPS>(m, s)
//   Every thread gets the block's pair. blockDim.x a multiple of 32, every thread calls. WARPS is
//   the block's warp count when it is a compile-time constant (kernels templated on the block
//   size); 0, the default, reads blockDim.x. 66 floats of static shared memory; no dynamic shared
//   memory. Its two barriers also order every thread's reads before the call against writes after
//   it. It does not end with a barrier: call it once per kernel (or put a __syncthreads() between
//   two calls).

#ifndef KERNELS_COMMON_ONLINE_SOFTMAX_CUH
#define KERNELS_COMMON_ONLINE_SOFTMAX_CUH

#include <cfloat>

__device__ __forceinline__ void online_update(float& m, float& s, float x) {
    float mm = fmaxf(m, x);
    s = s * expf(m - mm) + expf(x - mm);
    m = mm;
}

__device__ __forceinline__ void online_update4(float& m, float& s, float4 v) {
    float mm = fmaxf(m, fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)));
    s = s * expf(m - mm) + ((expf(v.x - mm) + expf(v.y - mm)) + (expf(v.z - mm) + expf(v.w - mm)));
    m = mm;
}

__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

__device__ __forceinline__ void warp_online_merge(float& m, float& s) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
        float m2 = __shfl_xor_sync(0xffffffff, m, offset);
        float s2 = __shfl_xor_sync(0xffffffff, s, offset);
        online_merge(m, s, m2, s2);
    }
}

template <int WARPS = 0>
__device__ __forceinline__ void block_online_merge(float& m, float& s) {
    __shared__ float warp_m[32], warp_s[32];
    __shared__ float row_m, row_s;
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    int warps = WARPS > 0 ? WARPS : blockDim.x / 32;
    warp_online_merge(m, s);
    if (lane == 0) {
        warp_m[wid] = m;
        warp_s[wid] = s;
    }
    __syncthreads();
    if (wid == 0) {
        float wm = lane < warps ? warp_m[lane] : -FLT_MAX;
        float ws = lane < warps ? warp_s[lane] : 0.0f;
        warp_online_merge(wm, ws);
        if (lane == 0) {
            row_m = wm;
            row_s = ws;
        }
    }
    __syncthreads();
    m = row_m;
    s = row_s;
}

#endif  // KERNELS_COMMON_ONLINE_SOFTMAX_CUH
