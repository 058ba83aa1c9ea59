/*
title = "bf16, 16-byte loads of eight values, the row in registers, per-warp fp32 column sums"
builds_on = 5
precision = "bf16"
changed = "Version 5's structure in bf16: each lane loads its Pack8 share of dout, inp and dinp once, all up front, and keeps them in registers; per-warp fp32 column sums in shared memory; fp32 per-block partials and the reduce kernel as in version 6."
why = """
Version 6 moves 2-byte values (64 bytes per warp load), reads each row twice and reduces with
the whole block. Here a warp owns a row: its 32 lanes load eight values per 16-byte access, a
warp's load moves 512 bytes, and each lane issues all of its loads of the three rows it needs
(dout, inp and the dinp it adds to: C/256 packs each) before it waits on any, so dout and inp
cross the memory bus once and dinp once each way: the minimum, at half of version 5's bytes
(version 5 loads dinp only in its second loop; here its 16-byte loads are in flight with the
others, which the halved register cost of a bf16 row affords). weight is read per row with
16-byte loads that hit L1: every warp of the SM reads the same 2*C bytes.
Column sums stay fp32 (see version 6): each warp adds its rows' dout and dout * xhat into a
private fp32 row of shared memory, in which each lane owns its columns (no races, row order);
a pack's eight columns are kept as two float4 in two separate arrays, so a warp's 32 float4
accesses are consecutive, conflict-free. The block then sums its warps in warp order into one
fp32 partial, and the reduce kernel adds the partials in a fixed order and rounds into dweight
and dbias once: bitwise reproducible. Two instantiations (rows up to 1024 and up to 2048); the
launch bounds keep them resident at the grid's 512 and 256 threads per SM.
"""
# Pack8 rows need C % 8 == 0 (16-byte aligned rows: true for cudaMalloc'd buffers when
# C % 8 == 0); registers hold at most 2048 values a row, and the warps' fp32 slices take
# block_size/32 * 8*C bytes of shared memory (128 KB at C = 2048 and 256 threads).
preconditions = ["C % 8 == 0", "C <= 2048"]
block_sizes = [64, 128, 256]

[derived]
groups = "min(cdiv(N, block_size // 32), SMS * cdiv(512 if C <= 1024 else 256, block_size))"  # one wave at most

[scratch]
partial = "2 * C * groups"

[[launch]]
kernel = "layernorm_backward7_c1024"
when = "C <= 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "partial", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward7_c2048"
when = "C > 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "partial", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward_reduce_bf16"
grid = "cdiv(C, 32)"
block = [32, 32]
args = ["dweight", "dbias", "partial", "groups", "C"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
when = "B * T * C <= 20000"
runs = ["seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE order=3"]
*/

#include "layernorm_bf16.cuh"  // Pack8 loads, unpack8/pack8, warp_sum, the partials' reduce

// a + v[4h .. 4h+4)
__device__ __forceinline__ float4 plus4(float4 a, const float (&v)[8], int h) {
    return make_float4(a.x + v[4 * h], a.y + v[4 * h + 1], a.z + v[4 * h + 2], a.w + v[4 * h + 3]);
}

// VEC: packs per lane, so rows up to 256 * VEC values fit in registers.
// A warp's slice: four arrays of C/8 float4, [0] and [1] the dbias of columns 8i..8i+3 and
// 8i+4..8i+7 of pack i, [2] and [3] the same for dweight.
// partial: gridDim.x rows of 2*C floats, [0, C) the block's dbias, [C, 2C) its dweight.
template <int VEC>
__device__ void layernorm_backward_rows_bf16(bf16* dinp, float* partial, const bf16* dout,
                                             const bf16* inp, const bf16* weight, const float* mean,
                                             const float* rstd, int N, int C) {
    extern __shared__ float4 slices4[];  // warps x 4 * C/8 float4
    int C8 = C / 8;
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int i = threadIdx.x; i < warps * 4 * C8; i += blockDim.x) slices4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    __syncthreads();
    float4* acc = slices4 + (size_t)warp * 4 * C8;

    const Pack8 zero = {};

    // The loop bound is the same for all lanes of a warp, so the shuffles see all 32 lanes.
    for (int row = blockIdx.x * warps + warp; row < N; row += gridDim.x * warps) {
        size_t offset = (size_t)row * C;
        Pack8 gp[VEC], xp[VEC], dp[VEC];  // dout, inp, dinp: every load issued before any use
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int i = k * 32 + lane;
            gp[k] = i < C8 ? load8_stream(dout + offset + 8 * i) : zero;
            xp[k] = i < C8 ? load8_stream(inp + offset + 8 * i) : zero;
            dp[k] = i < C8 ? load8_stream(dinp + offset + 8 * i) : zero;
        }
        float m = mean[row], s = rstd[row];

        float sum_dn = 0.0f, sum_dnx = 0.0f;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            if (k * 32 + lane < C8) {
                float g[8], x[8], w[8];
                unpack8(gp[k], g);
                unpack8(xp[k], x);
                unpack8(load8(weight + 8 * (k * 32 + lane)), w);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float dn = w[j] * g[j];
                    sum_dn += dn;
                    sum_dnx += dn * ((x[j] - m) * s);
                }
            }
        }
        float mean_dn = warp_sum(sum_dn) / C;
        float mean_dnx = warp_sum(sum_dnx) / C;

#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int i = k * 32 + lane;
            if (i < C8) {
                float g[8], x[8], w[8], d[8], gx[8];
                unpack8(gp[k], g);
                unpack8(xp[k], x);
                unpack8(load8(weight + 8 * i), w);
                unpack8(dp[k], d);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    float xhat = (x[j] - m) * s;
                    d[j] += s * (w[j] * g[j] - mean_dn - xhat * mean_dnx);
                    gx[j] = g[j] * xhat;
                }
                store8_stream(dinp + offset + 8 * i, pack8(d));
                acc[i] = plus4(acc[i], g, 0);
                acc[C8 + i] = plus4(acc[C8 + i], g, 1);
                acc[2 * C8 + i] = plus4(acc[2 * C8 + i], gx, 0);
                acc[3 * C8 + i] = plus4(acc[3 * C8 + i], gx, 1);
            }
        }
    }
    __syncthreads();  // every warp's slice is final

    // Sum the warps' slices in warp order; array a's float4 i holds columns 8i + 4(a%2) .. +3
    // of dbias (a < 2) or dweight: float4 (a/2) * C/4 + 2i + a%2 of the partial row.
    float4* mine = reinterpret_cast<float4*>(partial) + (size_t)blockIdx.x * 4 * C8;
    for (int e = threadIdx.x; e < 4 * C8; e += blockDim.x) {
        float4 sum = slices4[e];
        for (int w = 1; w < warps; w++) {
            float4 t = slices4[(size_t)w * 4 * C8 + e];
            sum = make_float4(sum.x + t.x, sum.y + t.y, sum.z + t.z, sum.w + t.w);
        }
        int a = e / C8, i = e % C8;
        mine[(a / 2) * 2 * C8 + 2 * i + a % 2] = sum;
    }
}

// The grid assumes 512 (c1024) and 256 (c2048) resident threads per SM: the launch bounds hold
// the registers to 128 and 255 so that they are.
extern "C" __global__ void __launch_bounds__(256, 2)
layernorm_backward7_c1024(bf16* dinp, float* partial, const bf16* dout, const bf16* inp,
                          const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_rows_bf16<4>(dinp, partial, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(256, 1)
layernorm_backward7_c2048(bf16* dinp, float* partial, const bf16* dout, const bf16* inp,
                          const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward_rows_bf16<8>(dinp, partial, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void layernorm_backward_reduce_bf16(bf16* dweight, bf16* dbias,
                                                          const float* partial, int G, int C) {
    layernorm_backward_reduce_partials(dweight, dbias, partial, G, C);
}
