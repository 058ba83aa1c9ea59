/*
title = "bf16, one launch: version 10's pass with the next row prefetched, fp32 atomics, one rounding by the last block"
builds_on = 10
precision = "bf16"
changed = "Version 10 in bf16 (eight values per 16-byte pack, a lane holds 3 packs of each array) with the next row's dout, inp and dinp loaded before the current row is worked on; the column sums stay fp32 (registers, then one atomic per column per block into a module-level fp32 accumulator), and the block that takes the last ticket adds the totals into the bf16 dweight and dbias, rounding once, and zeroes the accumulator and the ticket counter for the next launch. One launch: no scratch, no memset, no reduce kernel."
why = """
Version 7's row kernel runs at about a copy's time; its reduce kernel after it costs the rest, and
version 9's tickets did not pay. The row pass here is version 10's
(kernels/layernorm_backward/layernorm_backward_rows.cuh): a warp a row, each lane the same 24
columns of every row with fp32 dbias and dweight sums in registers, every 16-byte load of a row
issued before any arithmetic, rounds of equal length. bf16 differs in two places.

1. Prefetch. A bf16 row is half the bytes of an fp32 one for the same arithmetic per value, plus
   the widening and the rounding: a warp spends a larger share of its time computing, with nothing
   of its own in flight. So the next row's loads go out before the current row's sums. It fits:
   a bf16 row is 36 registers a lane, at most 168 with the prefetch, still 12 warps an SM.
   Widening is done on 32-bit words (on the bf16 fields the compiler moved 16-bit halves and
   spilled).
2. One rounding. dweight and dbias are bf16, so atomics cannot add into them (each add would
   round). The blocks add their fp32 column sums with float atomics into `totals`, a module-level
   __device__ array, zero when the module loads. Then version 8's ticket: the block that takes the
   last one reads the totals from L2 (__ldcg), adds each to its widened bf16 gradient in fp32,
   rounds once, and puts the totals and the counter back to zero for the next launch (the pattern
   of reduce 6). The alternatives cost a launch each (a memset of a scratch accumulator, or a
   second kernel). Caveats of module state: launches of this module must not run concurrently on
   two streams (the trainer runs its calls in order on one stream). The fp32 totals land in any
   order: deterministic = false (version 7 stays the deterministic bf16 version).

It fell short of its prediction; version 12 says why. The bytes model, the prediction and the
measurements: results/notes/layernorm_backward.md.
"""
# Pack8 rows (C % 8 == 0); a row takes at most three warps of 768 columns; the accumulator holds
# 2 x 2304 floats. Every block size keeps 12 warps per SM (3, 2 or 1 blocks).
preconditions = ["C % 8 == 0", "C <= 2304"]
block_sizes = [128, 192, 384]
deterministic = false

[derived]
warps_per_row = "cdiv(C, 768)"
row_slots = "(block_size // 32) // warps_per_row"  # rows a block works on at once
blocks_per_sm = "12 // (block_size // 32)"         # 12 warps of <= 168 registers per SM
rounds = "cdiv(N, SMS * blocks_per_sm * row_slots)"
groups = "cdiv(N, rounds * row_slots)"             # as few blocks as keep every round full

[[launch]]
kernel = "layernorm_backward11_w1"
when = "warps_per_row == 1"
grid = "groups"
block = "block_size"
shared = "4 * (128 + 2 * C * row_slots)"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward11_w2"
when = "warps_per_row == 2"
grid = "groups"
block = "block_size"
shared = "4 * (128 + 2 * C * row_slots)"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward11_w3"
when = "warps_per_row == 3"
grid = "groups"
block = "block_size"
shared = "4 * (128 + 2 * C * row_slots)"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[emulate]]
when = "B * T * C <= 250000"
runs = ["bs=128 seed=0 PRIORITY", "bs=192 seed=0 PRIORITY", "bs=384 seed=0 PRIORITY",
  "bs=128 seed=1 SHUFFLE", "bs=192 seed=1 SHUFFLE", "bs=384 seed=1 SHUFFLE"]

[[emulate]]
sizes = [{ B = 2, T = 300, C = 1600 }]
runs = ["bs=384 seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 4, T = 33, C = 768 }]
runs = ["bs=128 seed=2 SHUFFLE order=1", "bs=128 seed=2 SHUFFLE order=2"]
*/

#include "last_block_reduce.cuh"          // took_last_ticket: fence, barrier, ticket
#include "layernorm_backward_rows.cuh"    // the row pass and the block's column sums

// The fp32 column totals of the launch in progress ([0, C) dbias's, [C, 2C) dweight's) and the
// count of blocks done with them. Zero when the module loads; the last block of every launch
// puts them back to zero.
__device__ float layernorm_backward11_totals[2 * 2304];
__device__ int layernorm_backward11_tickets;

// WPR warps a row (C <= 768 * WPR); a lane holds 3 packs of eight of each array.
template <int WPR>
__device__ __forceinline__ void layernorm_backward11(bf16* dinp, bf16* dweight, bf16* dbias,
                                                     const bf16* dout, const bf16* inp,
                                                     const bf16* weight, const float* mean,
                                                     const float* rstd, int N, int C) {
    extern __shared__ float4 ln11_smem4[];
    float* totals = layernorm_backward11_totals;
    layernorm_backward_rows<bf16, 3, WPR, true>(
        dinp, dout, inp, weight, mean, rstd, N, C, reinterpret_cast<float*>(ln11_smem4),
        [&](int e, float total) { atomicAdd(totals + e, total); });

    // Every block's atomics are in L2 before the last ticket is drawn (took_last_ticket fences).
    if (!took_last_ticket(&layernorm_backward11_tickets, gridDim.x)) return;
    for (int e = threadIdx.x; e < 2 * C; e += blockDim.x) {
        float total = __ldcg(totals + e);
        totals[e] = 0.0f;  // ready for the next launch
        bf16* grad = e < C ? dbias + e : dweight + (e - C);
        *grad = to_bf16(to_float(*grad) + total);
    }
    if (threadIdx.x == 0) layernorm_backward11_tickets = 0;
}

// 12 warps per SM: the launch bounds hold the registers to 168.
extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward11_w1(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward11<1>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward11_w2(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward11<2>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward11_w3(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward11<3>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
