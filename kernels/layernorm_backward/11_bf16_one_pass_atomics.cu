/*
title = "bf16, one launch: version 10's pass with the next row prefetched, fp32 atomics, one rounding by the last block"
precision = "bf16"
changed = "Version 10 in bf16 (eight values per 16-byte pack, a lane holds 3 packs of each array) with the next row's dout, inp and dinp loaded before the current row is worked on; the column sums stay fp32 (registers, then one atomic per column per block into a module-level fp32 accumulator), and the block that takes the last ticket adds the totals into the bf16 dweight and dbias, rounding once, and zeroes the accumulator and the ticket counter for the next launch. One launch: no scratch, no memset, no reduce kernel."
why = """
Version 7 takes 34.0 us at B=8, T=1024, C=768, a copy of its 50.4 MB 25.5 us. Nsight Compute
puts its row kernel at about the copy's time and the reduce kernel after it at 8-20 us (from
DRAM there; from L2 in the bench, plus the launch); version 9 folded the reduce in with tickets
and a memset and got 37.2 us, for version 8's reason (serial team sums after the last row).
The bytes: 37.7 MB read (dout, inp, dinp) and 12.6 MB written (dinp). With the model version 10
fits on the bench file (4.5 us + reads / 3.17 TB/s + writes / 2.65 TB/s; it gives 17.2 us for
residual_forward 4, bf16 with two reads to a write, measured 17.5 us) the rows need ~21 us.

The row pass is version 10's (kernels/common/layernorm_backward_rows.cuh): a warp a row (two or
three warps for C > 768), each lane the same 24 columns of every row with their fp32 dbias and
dweight sums in 48 registers, every 16-byte load of a row issued before any arithmetic, rounds
of equal length over a grid of 12 warps per SM. bf16 differs in two places.

1. Prefetch. A bf16 row is half the bytes of an fp32 one (4.6 KB of loads per warp-row against
   9 KB) for the same arithmetic per value, plus the widening and the rounding: a warp spends
   a larger share of its time computing, with nothing of its own in flight. So the next row's
   loads go out before the current row's sums: every warp always has a row on its way. It fits
   because a bf16 row is 36 registers a lane: at most 168 registers with the prefetch (no
   spills on sm_80 and sm_90), still 12 warps per SM. Widening is done on 32-bit words (a shift
   and a mask give two floats): on the bf16 fields the compiler moved 16-bit halves and
   spilled them.
2. One rounding. dweight and dbias are bf16, so atomics cannot add into them: each add would
   round (a bf16 running sum, which the contract forbids). The blocks add their fp32 column sums
   with float atomicAdd (result unused) into `totals`, a module-level __device__ array of
   2 x 2304 floats, zero when the module loads. Then version 8's ticket (took_last_ticket:
   fence, barrier, one atomicAdd on a module-level counter): the block that takes the last one
   reads the 2C totals from L2 (__ldcg), adds each to its widened bf16 gradient in fp32 and
   rounds once, and puts the totals and the counter back to zero, so the next launch finds them
   as a fresh module does (the pattern of reduce 6). The tail after the last row: version 10's
   (the block's sums through shared memory, the atomics), then a fence and a ticket in every
   block and, in the last one, a second fence, one L2 round trip for 6 KB and 1536 two-byte
   stores: 1.5-2 us in all. The alternatives cost a launch each: a memset step for a scratch
   accumulator (scratch arrives as garbage, and a memset is one more operation on the stream),
   or a second kernel for fixed-order partials (version 7's reduce; ~3 us and more).
   Caveats of module state: launches of this module must not run concurrently on two streams
   (they would share the accumulator; the trainer runs its calls in order on one stream, and a
   CUDA graph replays that order); a launch that faults leaves it dirty, but a fault ends the
   context anyway. The fp32 totals land in any order: deterministic = false (version 7 stays
   the deterministic bf16 version).

Precision as the contract asks: dinp widened, added to in fp32, rounded once per element;
dweight and dbias summed in fp32 all the way (per-lane registers over a warp's rows, the block's
warps in order, fp32 atomics across blocks) and rounded once.

Prediction: ~21 us for the rows plus 1.5-2 us for the column sums and the last block: 23 us,
about 1.1x the copy's speed, against version 7's 34.0 us (the caveat of version 10: if this
3:1 mix runs ~3 us above the model as 1:1 mixes do, 25-26 us, still at the copy).

Measured on the H100 (bench --all, three runs of 2026-11-24): 28.5-29.0 us against the copy's 25.7-26.3 us (0.90-0.92x), short of the prediction; version 12 says why.
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
