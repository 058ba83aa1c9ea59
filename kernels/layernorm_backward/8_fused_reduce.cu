/*
title = "Version 5 with the column sums in the same launch: the last block of each team reduces"
builds_on = 5
changed = "Version 5's row work and per-block partial rows, unchanged; the reduce kernel is gone. Blocks form teams of ceil(sqrt(G)) consecutive blocks; after writing its partial row a block takes a ticket (atomicAdd) on its team's counter, and the block that takes the team's last ticket sums the team's rows in block order into a team row; then a ticket on a global counter, and the block that takes the last one sums the team rows in team order into dweight and dbias. A memset step zeroes the counters before the kernel."
why = """
Version 5 finishes with a second kernel, and that kernel is most of what separates it from a
plain copy: a grid of C/32 = 24 blocks on a GPU of 132 SMs, each walking all G partial rows of its
32 columns, none starting before the main kernel's slowest block has ended. Here the reduction
joins the main kernel, using the "last block done" pattern.

The pattern. The G blocks form teams of ceil(sqrt(G)) consecutive blocks, and scratch holds one
int counter per team plus a global one. A block writes its partial row, then one thread takes a
ticket: atomicAdd(&counter, 1) returns the value before the add, so exactly one block of the team
gets the last ticket, and it knows every other member has written its row. It sums the team's rows
into a team row and takes a ticket on the global counter; the last of those sums the team rows
into dweight and dbias. Nobody waits for anybody, so any block order works. Every thread fences
(__threadfence) after its stores and a __syncthreads orders the fences before the ticket: without
it the last block could count a ticket whose row is still on its way. The winner fences again and
reads the rows with __ldcg (L2; L1 is not coherent across SMs). A memset zeroes the counters.

Determinism: the tickets decide which block does a sum, never what it adds or in which order (block
order within a team, team order across teams), so the result depends only on G and the team size.
No float atomics: the atomics count tickets. The code is
kernels/common/last_block_reduce.cuh, shared with version 9 (bf16).

Measured, the fold did not pay: the team sums run while the rest of the GPU has nothing left to
do, which costs about what the second launch did. Kept as the lesson: a launch saved is only a win
when the work it moves overlaps other work. The numbers: results/notes/layernorm_backward.md.
"""
preconditions = ["C % 4 == 0", "C <= 2048"]
block_sizes = [64, 128, 256]

[derived]
groups = "min(cdiv(N, block_size // 32), SMS * cdiv(512 if C <= 1024 else 256, block_size))"  # blocks: one wave at most
team_size = "int(sqrt(groups - 1)) + 1"  # ceil(sqrt(groups)) blocks per team
teams = "cdiv(groups, team_size)"

[scratch]
partial = "2 * C * groups"       # a row of 2*C floats per block: [0, C) its dbias, [C, 2C) its dweight
team_sums = "2 * C * teams"      # the same, summed over a team
tickets = { size = "teams + 1", dtype = "i32" }  # [0, teams) a counter per team, [teams] the global one

[[launch]]
memset = "tickets"

[[launch]]
kernel = "layernorm_backward8_c1024"
when = "C <= 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "dweight", "dbias", "partial", "team_sums", "tickets", "dout", "inp", "weight", "mean", "rstd", "N", "C", "team_size"]

[[launch]]
kernel = "layernorm_backward8_c2048"
when = "C > 1024"
grid = "groups"
block = "block_size"
shared = "block_size * C // 4"
args = ["dinp", "dweight", "dbias", "partial", "team_sums", "tickets", "dout", "inp", "weight", "mean", "rstd", "N", "C", "team_size"]

[[emulate]]
runs = ["bs=64 seed=0 PRIORITY", "bs=64 seed=1 SHUFFLE", "bs=128 seed=0 PRIORITY", "bs=128 seed=1 SHUFFLE",
  "bs=256 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE"]
*/

#include "last_block_reduce.cuh"  // the tickets and the in-order sums of the partial rows
#include "reduce.cuh"             // warp_sum: every lane gets the warp's total

// ---- version 5's work, unchanged --------------------------------------------------------------
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

// ---- the reduction, in the same launch (last_block_reduce.cuh) ---------------------------------
// Teams of team_size blocks and their tickets (zeroed by the memset step): last_block_reduce.cuh.
template <int VEC>
__device__ void layernorm_backward_fused(float* dinp, float* dweight, float* dbias, float* partial,
                                         float* team_sums, int* tickets, const float* dout,
                                         const float* inp, const float* weight, const float* mean,
                                         const float* rstd, int N, int C, int team_size) {
    layernorm_backward_rows<VEC>(dinp, partial, dout, inp, weight, mean, rstd, N, C);

    // The last team's last block adds each float4 of column totals into the gradients: float4
    // e < C/4 is dbias's, the rest dweight's.
    float4* db4 = reinterpret_cast<float4*>(dbias);
    float4* dw4 = reinterpret_cast<float4*>(dweight);
    int C4 = C / 4;
    reduce_partials_last_block(partial, team_sums, tickets, C, team_size, [&](int e, float4 total) {
        float4* grad = e < C4 ? db4 + e : dw4 + (e - C4);
        *grad = add4(*grad, total);
    });
}

extern "C" __global__ void layernorm_backward8_c1024(float* dinp, float* dweight, float* dbias,
                                                     float* partial, float* team_sums, int* tickets,
                                                     const float* dout, const float* inp,
                                                     const float* weight, const float* mean,
                                                     const float* rstd, int N, int C, int team_size) {
    layernorm_backward_fused<8>(dinp, dweight, dbias, partial, team_sums, tickets, dout, inp,
                                weight, mean, rstd, N, C, team_size);
}

extern "C" __global__ void layernorm_backward8_c2048(float* dinp, float* dweight, float* dbias,
                                                     float* partial, float* team_sums, int* tickets,
                                                     const float* dout, const float* inp,
                                                     const float* weight, const float* mean,
                                                     const float* rstd, int N, int C, int team_size) {
    layernorm_backward_fused<16>(dinp, dweight, dbias, partial, team_sums, tickets, dout, inp,
                                 weight, mean, rstd, N, C, team_size);
}
