/*
title = "Online softmax with (max, sum) pairs merged in a single reduction"
builds_on = 5
changed = "The two block reductions become one: threads, then warps, merge (max, sum) pairs with the online rule. The per-element update pays one exp unless the maximum grows."
why = """
Version 5 reduces twice (maxima, then rescaled sums): two rounds of shuffles and four
__syncthreads(). A (max, sum) pair has an associative merge, (m, s) + (m', s') = (M, s*exp(m-M) +
s'*exp(m'-M)) with M = max(m, m'), so one two-level reduction of pairs gives both. Per element,
when x <= m (almost always, after the first few elements of a slice) the update is s += exp(x - m):
one exp instead of version 5's two.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "softmax_forward6"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = [{ N = 3, V = 37 }, { N = 2, V = 1025 }]
runs = ["bs=32 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE"]
*/
#include <cfloat>

// The pair helpers are written out here on purpose: merging (max, sum) pairs is this version's
// lesson. Later versions (7-8, fused_classifier) include them from kernels/common/online_softmax.cuh.

// (m, s) <- (m, s) + (m2, s2). Empty pairs are (-FLT_MAX, 0): their terms vanish, no NaN.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

__device__ __forceinline__ void warp_online_merge(float& m, float& s) {
    for (int offset = 16; offset > 0; offset /= 2) {
        float m2 = __shfl_xor_sync(0xffffffff, m, offset);
        float s2 = __shfl_xor_sync(0xffffffff, s, offset);
        online_merge(m, s, m2, s2);
    }
}

// Every thread gets the block's merged pair; blockDim.x % 32 == 0 (full warps).
__device__ void block_online_merge(float& m, float& s) {
    __shared__ float warp_m[32], warp_s[32];
    __shared__ float row_m, row_s;
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, warps = blockDim.x / 32;
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

extern "C" __global__ void softmax_forward6(float* out, const float* inp, int N, int V) {
    int row = blockIdx.x;
    const float* x = inp + (size_t)row * V;
    float* y = out + (size_t)row * V;

    float m = -FLT_MAX, s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float xi = x[i];
        if (xi > m) {
            s = s * expf(m - xi) + 1.0f;
            m = xi;
        } else {
            s += expf(xi - m);
        }
    }
    block_online_merge(m, s);

    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < V; i += blockDim.x) y[i] = expf(x[i] - m) * inv;
}
