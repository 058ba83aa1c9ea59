/*
title = "bf16, version 7 with the column sums in the same launch: the last block of each team reduces"
builds_on = 7
precision = "bf16"
changed = "Version 7's row work and fp32 per-block partial rows, unchanged; the reduce kernel is gone, replaced by version 8's tickets: teams of ceil(sqrt(G)) blocks, the last block of a team (atomicAdd on the team's counter) sums the team's fp32 rows in block order, the last team's last block sums the team rows in team order and adds them into the bf16 dweight and dbias in fp32, rounding once. A memset step zeroes the counters."
why = """
Nsight Compute splits version 7 into a main kernel that runs at about a copy's time and a second
kernel, layernorm_backward_reduce_bf16 (C/32 = 24 blocks adding the G partial rows), that keeps
24 of 132 SMs busy after the real work is done. Version 8 explains the remedy in fp32; here it is
in bf16, and only the last step differs.

Recap of the pattern. A block writes its fp32 partial row, fences (__threadfence: its stores reach
the whole GPU before its ticket does), waits for its whole block (__syncthreads), and one thread
takes a ticket with atomicAdd on its team's counter. The block holding the last ticket of its team
knows all the team's rows are written: it fences again, sums them with __ldcg loads (from L2, never
a stale L1 line) in block order, writes the team row, and takes a ticket on the global counter the
same way; the last of those sums the team rows in team order. The other blocks just exit. A memset
step zeroes the counters before every launch. The code is version 8's, in
kernels/common/last_block_reduce.cuh; this file passes it the bf16 last step.

Precision and determinism, as in version 7: the sums stay fp32 all the way (partial rows, team
rows, the final column sum), and the bf16 dweight and dbias are widened, added to in fp32 and
rounded once. The tickets choose which block adds, never the order of the additions, so the result
is bitwise the same on every run.

Measured slower than version 7, for version 8's reason (the team and final sums run when the rest
of the GPU is idle). The numbers: results/notes/layernorm_backward.md.
"""
# As version 7: Pack8 rows (C % 8 == 0), at most 2048 values a row in registers.
preconditions = ["C % 8 == 0", "C <= 2048"]
block_sizes = [64, 128, 256]

[derived]
groups = "min(cdiv(N, block_size // 32), SMS * cdiv(512 if C <= 1024 else 256, block_size))"  # blocks: one wave at most
team_size = "int(sqrt(groups - 1)) + 1"  # ceil(sqrt(groups)) blocks per team
teams = "cdiv(groups, team_size)"

[scratch]
partial = "2 * C * groups"       # fp32, a row of 2*C per block: [0, C) its dbias, [C, 2C) its dweight
team_sums = "2 * C * teams"      # fp32, the same summed over a team
tickets = { size = "teams + 1", dtype = "i32" }  # [0, teams) a counter per team, [teams] the global one

[[launch]]
memset = "tickets"

[[launch]]
kernel = "layernorm_backward9_c1024"
when = "C <= 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "dweight", "dbias", "partial", "team_sums", "tickets", "dout", "inp", "weight", "mean", "rstd", "N", "C", "team_size"]

[[launch]]
kernel = "layernorm_backward9_c2048"
when = "C > 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "dweight", "dbias", "partial", "team_sums", "tickets", "dout", "inp", "weight", "mean", "rstd", "N", "C", "team_size"]

[[emulate]]
runs = ["bs=64 seed=0 PRIORITY", "bs=64 seed=1 SHUFFLE", "bs=128 seed=0 PRIORITY", "bs=128 seed=1 SHUFFLE",
  "bs=256 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE"]
*/

#include "last_block_reduce.cuh"  // version 8's tickets and in-order sums of the partial rows
#include "layernorm_bf16.cuh"     // Pack8 loads, unpack8/pack8, warp_sum

// ---- version 7's work, unchanged ---------------------------------------------------------------
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

// ---- the reduction, in the same launch: version 8's (last_block_reduce.cuh), a bf16 last step ---
// Teams of team_size blocks and their tickets (zeroed by the memset step): last_block_reduce.cuh.
template <int VEC>
__device__ void layernorm_backward_fused_bf16(bf16* dinp, bf16* dweight, bf16* dbias, float* partial,
                                              float* team_sums, int* tickets, const bf16* dout,
                                              const bf16* inp, const bf16* weight, const float* mean,
                                              const float* rstd, int N, int C, int team_size) {
    layernorm_backward_rows_bf16<VEC>(dinp, partial, dout, inp, weight, mean, rstd, N, C);

    // The last team's last block: each column's fp32 total (the team rows in team order) is
    // added to the widened bf16 gradient in fp32 and rounded once. Float4 e < C/4 is dbias's
    // columns 4e .. 4e+3, the rest dweight's.
    int C4 = C / 4;
    reduce_partials_last_block(partial, team_sums, tickets, C, team_size, [&](int e, float4 total) {
        bf16* grad = e < C4 ? dbias + 4 * e : dweight + 4 * (e - C4);
        grad[0] = to_bf16(to_float(grad[0]) + total.x);
        grad[1] = to_bf16(to_float(grad[1]) + total.y);
        grad[2] = to_bf16(to_float(grad[2]) + total.z);
        grad[3] = to_bf16(to_float(grad[3]) + total.w);
    });
}

// The grid assumes 512 (c1024) and 256 (c2048) resident threads per SM: the launch bounds hold
// the registers to 128 and 255 so that they are.
extern "C" __global__ void __launch_bounds__(256, 2)
layernorm_backward9_c1024(bf16* dinp, bf16* dweight, bf16* dbias, float* partial, float* team_sums,
                          int* tickets, const bf16* dout, const bf16* inp, const bf16* weight,
                          const float* mean, const float* rstd, int N, int C, int team_size) {
    layernorm_backward_fused_bf16<4>(dinp, dweight, dbias, partial, team_sums, tickets, dout, inp,
                                     weight, mean, rstd, N, C, team_size);
}

extern "C" __global__ void __launch_bounds__(256, 1)
layernorm_backward9_c2048(bf16* dinp, bf16* dweight, bf16* dbias, float* partial, float* team_sums,
                          int* tickets, const bf16* dout, const bf16* inp, const bf16* weight,
                          const float* mean, const float* rstd, int N, int C, int team_size) {
    layernorm_backward_fused_bf16<8>(dinp, dweight, dbias, partial, team_sums, tickets, dout, inp,
                                     weight, mean, rstd, N, C, team_size);
}
