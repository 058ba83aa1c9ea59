/*
title = "A block per row: warp shuffles, then shared memory across warps"
builds_on = 3
changed = "A whole block (up to 32 warps) shares a row: each warp reduces with shuffles, the warps' partial sums meet in shared memory."
why = """
With a warp per row, each lane walks C/32 elements one after another; for wide rows that is a
long serial chain per lane with few loads in flight. A block per row spreads the row over
block_size threads, so each thread issues only C/block_size loads and many more are in flight
at once. The reduction becomes two levels: shuffles inside each warp (no shared memory), then
one shared-memory slot per warp and a final shuffle by the first warp.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "layernorm_forward5"
grid = "N"
block = "block_size"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]

[[emulate]]
sizes = [{ B = 2, T = 3, C = 37 }, { B = 1, T = 5, C = 1100 }]
runs = ["bs=32 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE"]
*/

// Written out on purpose: the two-level block reduction is this version's lesson. Later
// versions and other families include warp_sum and block_sum from kernels/common/reduce.cuh.
__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

// Sum over the whole block; every thread gets the total.
__device__ float block_sum(float v) {
    __shared__ float per_warp[32];
    __shared__ float total;
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
    v = warp_sum(v);
    if (lane == 0) per_warp[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float w = lane < warps ? per_warp[lane] : 0.0f;
        w = warp_sum(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    float result = total;
    __syncthreads();  // the slots are reused by the next call
    return result;
}

extern "C" __global__ void layernorm_forward5(float* out, float* mean, float* rstd,
                                              const float* inp, const float* weight,
                                              const float* bias, int N, int C, float eps) {
    int row = blockIdx.x;
    const float* x = inp + (size_t)row * C;
    float sum = 0.0f, sumsq = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float xi = x[i];
        sum += xi;
        sumsq += xi * xi;
    }
    sum = block_sum(sum);
    sumsq = block_sum(sumsq);
    float m = sum / C;
    float s = rsqrtf(fmaxf(sumsq / C - m * m, 0.0f) + eps);
    if (threadIdx.x == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
    float* o = out + (size_t)row * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float n = s * (__ldcs(x + i) - m);
        __stcs(o + i, n * weight[i] + bias[i]);
    }
}
