/*
title = "Persistent warps: the next row is loaded while this one is normalized"
builds_on = 6
changed = "The grid is sized to fill the GPU once; each warp loops over rows and issues the loads of its next row before it reduces and writes the current one."
why = """
Version 6 launches one warp per row, in about two waves: each warp loads, then reduces (memory
idle for it), then stores, then exits, and a new block must be scheduled. With a persistent grid
each warp keeps two rows of registers: while it reduces and writes row r, the loads for row
r + (number of warps) are already in flight, so the memory system never waits for arithmetic
or for block launches, and there is no tail of half-empty waves.
On the H100 it is NOT faster than version 6 (results/notes/layernorm_forward.md): a warp per
row already keeps enough loads in flight to saturate DRAM, so hiding latency buys nothing and
the second register copy of the row costs occupancy. Kept as a lesson: measure before you
believe a pipeline helps; what remains here is bandwidth, not latency.
"""
preconditions = ["C % 4 == 0", "C <= 1024"]
block_sizes = [64, 128, 256, 512]

[[launch]]
kernel = "layernorm_forward7"
grid = "min(cdiv(N, block_size // 32), SMS * (2048 // block_size))"
block = "block_size"
shared = "8 * C"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]
*/

#include "reduce.cuh"  // warp_sum: every lane gets the warp's total

#define VEC 8  // float4 slots per lane: rows up to 1024 floats

__device__ __forceinline__ void load_row(float4 (&v)[VEC], const float* inp, int row, int C4, int lane) {
    const float4* x4 = reinterpret_cast<const float4*>(inp) + (size_t)row * C4;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int i = k * 32 + lane;
        v[k] = i < C4 ? __ldcs(x4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

extern "C" __global__ void layernorm_forward7(float* out, float* mean, float* rstd,
                                              const float* inp, const float* weight,
                                              const float* bias, int N, int C, float eps) {
    extern __shared__ float4 wb[];
    int C4 = C / 4;
    for (int i = threadIdx.x; i < C4; i += blockDim.x) {
        wb[i] = reinterpret_cast<const float4*>(weight)[i];
        wb[C4 + i] = reinterpret_cast<const float4*>(bias)[i];
    }
    __syncthreads();

    int lane = threadIdx.x % 32;
    int warps = gridDim.x * (blockDim.x / 32);
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    float4 cur[VEC], nxt[VEC];
    if (row < N) load_row(cur, inp, row, C4, lane);
    for (; row < N; row += warps) {
        int next = row + warps;
        if (next < N) load_row(nxt, inp, next, C4, lane);  // in flight while we work on `cur`

        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < VEC; k++) sum += (cur[k].x + cur[k].y) + (cur[k].z + cur[k].w);
        float m = warp_sum(sum) / C;
        float sq = 0.0f;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            if (k * 32 + lane < C4) {
                float dx = cur[k].x - m, dy = cur[k].y - m, dz = cur[k].z - m, dw = cur[k].w - m;
                sq += (dx * dx + dy * dy) + (dz * dz + dw * dw);
            }
        }
        float s = rsqrtf(warp_sum(sq) / C + eps);
        if (lane == 0) {
            __stcs(mean + row, m);
            __stcs(rstd + row, s);
        }
        float4* o4 = reinterpret_cast<float4*>(out) + (size_t)row * C4;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int i = k * 32 + lane;
            if (i < C4) {
                float4 w = wb[i], b = wb[C4 + i], r;
                r.x = (cur[k].x - m) * s * w.x + b.x;
                r.y = (cur[k].y - m) * s * w.y + b.y;
                r.z = (cur[k].z - m) * s * w.z + b.z;
                r.w = (cur[k].w - m) * s * w.w + b.w;
                __stcs(o4 + i, r);
            }
            cur[k] = nxt[k];
        }
    }
}
