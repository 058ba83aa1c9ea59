/*
title = "Version 5 with the column sums in the same launch: the last block of each team reduces"
changed = "Version 5's row work and per-block partial rows, unchanged; the reduce kernel is gone. Blocks form teams of ceil(sqrt(G)) consecutive blocks; after writing its partial row a block takes a ticket (atomicAdd) on its team's counter, and the block that takes the team's last ticket sums the team's rows in block order into a team row; then a ticket on a global counter, and the block that takes the last one sums the team rows in team order into dweight and dbias. A memset step zeroes the counters before the kernel."
why = """
Version 5 finishes with a second kernel, and that kernel is most of what separates it from a
plain copy. Measured on the H100 at B=8, T=1024, C=768, version 5 takes 51.5 us where a copy of
the family's bytes takes 43 us. Nsight Compute splits its bf16 twin, version 7, which has the same
two kernels: its main kernel runs in ~26 us, as long as a copy of its bf16 bytes (26 us), and its
reduce kernel adds the G per-block partial rows in another 8.4 us (G = 264, blocks of 256) to
19.7 us (G = 1056, blocks of 64). That reduce kernel is a grid of C/32 = 24 blocks on a GPU of 132
SMs: most of the machine idles while each of the 24 walks all G rows of its 32 columns, and none
of it can start before the slowest block of the main kernel has ended. Here the reduction joins
the main kernel, using the "last block done" pattern.

The pattern. The G blocks form teams of team_size = ceil(sqrt(G)) consecutive blocks, and scratch
holds one int counter per team plus a global one. A block writes its partial row, then one of its
threads takes a ticket: atomicAdd(&counter, 1) returns the value before the add, so exactly one
block of the team gets the last ticket (members - 1), and that block knows every other member has
already written its row. It alone goes on: it sums the team's rows into a team row, then takes a
ticket on the global counter; the block that gets the last of those sums the team rows into dweight
and dbias. Every other block simply exits. Nobody waits for anybody (no spinning on a flag), so the
pattern is correct whatever order the blocks run in and however many are resident at once.

Why __threadfence() before the ticket. The partial row's stores and the ticket's atomic go to
memory by different paths, and the GPU does not promise that another SM sees them in program
order: without a fence the last block could count a ticket whose row is still on its way and sum
stale data. So every thread fences after its stores (its writes become visible to the whole GPU
before anything it does next), a __syncthreads() makes the whole block's fences come before the
ticket, and only then does one thread take it. The block that wins fences again before it reads,
and reads the other blocks' rows with __ldcg (cached in L2 only): L1 is per SM and not kept
coherent with other SMs' writes, L2 is where every block's stores meet. __syncthreads_or hands
the one thread's verdict ("mine was the last ticket") to the whole block in the same barrier. The
counters must start at zero on every launch, and scratch arrives holding garbage: the memset step
before the kernel zeroes them.

Why it stays deterministic. The tickets decide which block does a sum, never what it adds or in
which order: each column is summed over the team's rows in block order, then over the team rows
in team order, ((r0 + r1) + r2) + ..., whichever block does the work. The float result depends only
on G and team_size (the sizes, the block size and the SM count), so it is bitwise the same on every
run. No float atomics anywhere: the atomics count tickets, integers.

Why it should beat a second launch. A team's sum starts as soon as its last member is done, in
that block's own place on its SM, while the rest of the grid may still be working, and the teams'
sums run in parallel on up to ceil(sqrt(G)) SMs. What is left after the last row of the
main work is at most two sums by one block: its team's rows and the team rows, about 2 sqrt(G)
rows (33 rows of 6 KB at G = 264, 65 at G = 1056) instead of 24 blocks walking all G, and no
second launch to wait for. Each thread keeps eight rows' loads in flight before it adds them in
order. How much of the team work really overlaps depends on how unevenly the blocks finish: this
grid is one wave of equal blocks, so they finish close together and much of the gain may be the
shorter tail; the timings will tell. The cost: a team row per team in scratch; per block, two
barriers, a fence and an atomic; one memset. The tickets and the in-order sums are in
kernels/common/last_block_reduce.cuh, shared with version 9 (bf16), which differs only in how
the final totals go into dweight and dbias.

Measured on the H100 (bench --all, B=8 T=1024 C=768, best block size 256): 53.8 µs, against
version 5's 51.5 µs and a copy of the same bytes at 42.4 µs. The fold did not pay: the last
block of each team and then the very last block add their rows while the rest of the GPU has
nothing left to do, which costs about what the second launch did. Kept as the lesson: a launch
saved is only a win when the work it moves overlaps other work.
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
