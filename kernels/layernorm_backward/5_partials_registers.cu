/*
title = "Version 4 with the row held in registers: one pass over memory"
builds_on = 4
changed = "Each lane loads its float4 share of dout and inp into registers once, up front; both the row means and the gradients are computed from registers."
why = """
Version 4 reads every row twice, the second time hoping to hit L1; when several blocks share an
SM their rows compete for L1 with the shared-memory slices, and misses go to L2 or DRAM. Here
each lane issues all of its loads of the row at once (C/128 float4 per array: up to 16 loads of
16 bytes in flight per lane, before any arithmetic waits on them) and keeps them in registers, so
dout and inp cross the memory bus exactly once, and the loads of dinp for the second half are
issued together too. The register array needs a compile-time size, so there are two
instantiations (rows up to 1024 and up to 2048 floats) and the launch picks one; the wider one
holds 128 floats per lane (about 175 registers), so it gets half the blocks per SM and the grid
is halved to match (one wave either way). The column sums, the partials and the
deterministic reduce kernel are version 4's.
"""
preconditions = ["C % 4 == 0", "C <= 2048"]
block_sizes = [64, 128, 256]

[derived]
groups = "min(cdiv(N, block_size // 32), SMS * cdiv(512 if C <= 1024 else 256, block_size))"  # blocks of the first kernel: one wave at most

[scratch]
partial = "2 * C * groups"

[[launch]]
kernel = "layernorm_backward5_c1024"
when = "C <= 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "partial", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward5_c2048"
when = "C > 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "partial", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward_reduce"
grid = "cdiv(C, 32)"
block = [32, 32]
args = ["dweight", "dbias", "partial", "groups", "C"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = [{ B = 2, T = 3, C = 36 }, { B = 1, T = 70, C = 300 }]
runs = ["bs=64 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE order=3"]
*/

#include "reduce.cuh"  // warp_sum: every lane gets the warp's total

// VEC: float4 slots per lane, so rows up to 128 * VEC floats fit in registers.
// partial: gridDim.x rows of 2*C floats, [0, C) the block's dbias, [C, 2C) its dweight.
template <int VEC>
__device__ void layernorm_backward_rows(float* dinp, float* partial, const float* dout,
                                        const float* inp, const float* weight, const float* mean,
                                        const float* rstd, int N, int C) {
    extern __shared__ float4 slices4[];  // warps x 2*C/4: each warp's private dbias then dweight
    int C4 = C / 4;
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = threadIdx.x; i < warps * 2 * C4; i += blockDim.x) slices4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    __syncthreads();
    float4* acc_db = slices4 + (size_t)warp * 2 * C4;
    float4* acc_dw = acc_db + C4;
    const float4* w4 = reinterpret_cast<const float4*>(weight);
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);

    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        const float4* dy4 = reinterpret_cast<const float4*>(dout + (size_t)row * C);
        const float4* x4 = reinterpret_cast<const float4*>(inp + (size_t)row * C);
        float4* dx4 = reinterpret_cast<float4*>(dinp + (size_t)row * C);
        float m = mean[row], s = rstd[row];

        float4 g[VEC], xh[VEC];
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int i = k * 32 + lane;
            g[k] = i < C4 ? __ldcs(dy4 + i) : zero;
            xh[k] = i < C4 ? __ldcs(x4 + i) : zero;
        }
        float sum_dn = 0.0f, sum_dnx = 0.0f;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int i = k * 32 + lane;
            if (i < C4) {
                float4 w = w4[i];
                xh[k] = make_float4((xh[k].x - m) * s, (xh[k].y - m) * s, (xh[k].z - m) * s, (xh[k].w - m) * s);
                float dn0 = w.x * g[k].x, dn1 = w.y * g[k].y, dn2 = w.z * g[k].z, dn3 = w.w * g[k].w;
                sum_dn += (dn0 + dn1) + (dn2 + dn3);
                sum_dnx += (dn0 * xh[k].x + dn1 * xh[k].y) + (dn2 * xh[k].z + dn3 * xh[k].w);
            }
        }
        float mean_dn = warp_sum(sum_dn) / C;
        float mean_dnx = warp_sum(sum_dnx) / C;

#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int i = k * 32 + lane;
            if (i < C4) {
                float4 w = w4[i], d = __ldcs(dx4 + i);
                d.x += s * (w.x * g[k].x - mean_dn - xh[k].x * mean_dnx);
                d.y += s * (w.y * g[k].y - mean_dn - xh[k].y * mean_dnx);
                d.z += s * (w.z * g[k].z - mean_dn - xh[k].z * mean_dnx);
                d.w += s * (w.w * g[k].w - mean_dn - xh[k].w * mean_dnx);
                __stcs(dx4 + i, d);
                float4 db = acc_db[i], dw = acc_dw[i];
                db.x += g[k].x; db.y += g[k].y; db.z += g[k].z; db.w += g[k].w;
                dw.x += g[k].x * xh[k].x; dw.y += g[k].y * xh[k].y;
                dw.z += g[k].z * xh[k].z; dw.w += g[k].w * xh[k].w;
                acc_db[i] = db;
                acc_dw[i] = dw;
            }
        }
    }
    __syncthreads();  // every warp's slice is final

    const float* slices = reinterpret_cast<const float*>(slices4);
    float* mine = partial + (size_t)blockIdx.x * 2 * C;
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < warps; w++) sum += slices[(size_t)w * 2 * C + i];
        mine[i] = sum;
    }
}

extern "C" __global__ void layernorm_backward5_c1024(float* dinp, float* partial, const float* dout,
                                                     const float* inp, const float* weight,
                                                     const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_rows<8>(dinp, partial, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void layernorm_backward5_c2048(float* dinp, float* partial, const float* dout,
                                                     const float* inp, const float* weight,
                                                     const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_rows<16>(dinp, partial, dout, inp, weight, mean, rstd, N, C);
}

// Column c = blockIdx.x * 32 + threadIdx.x. Thread (x, y) sums partial rows y, y + blockDim.y,
// ...; then row 0 of the block adds the blockDim.y sums in y order: a fixed order, no atomics.
// The partials were just written, so they come from L2; with 32 rows of threads per column and
// four loads in flight each, a few hundred partials take a handful of L2 round trips.
extern "C" __global__ void layernorm_backward_reduce(float* dweight, float* dbias,
                                                     const float* partial, int G, int C) {
    __shared__ float sums[2][32][32];  // blockDim.y <= 32
    int x = threadIdx.x, y = threadIdx.y;
    int c = blockIdx.x * 32 + x;
    float db = 0.0f, dw = 0.0f;
    if (c < C) {
#pragma unroll 4
        for (int g = y; g < G; g += blockDim.y) {  // unrolled: four independent loads in flight
            db += partial[(size_t)g * 2 * C + c];
            dw += partial[(size_t)g * 2 * C + C + c];
        }
    }
    sums[0][y][x] = db;
    sums[1][y][x] = dw;
    __syncthreads();
    if (y == 0 && c < C) {
        for (int k = 1; k < blockDim.y; k++) {
            db += sums[0][k][x];
            dw += sums[1][k][x];
        }
        dbias[c] += db;
        dweight[c] += dw;
    }
}
