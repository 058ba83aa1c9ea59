/*
title = "bf16, one launch: two rows a warp in flight as 32-bit words, the last block's rounding in one round trip"
builds_on = 11
precision = "bf16"
changed = "Version 11's design with three of its costs removed. Rows sit in registers as Word8 (an int4 of 32-bit words, stream_vec.cuh) in two buffers that take turns (the loop unrolled twice), so a warp's next row really is in flight while it works on the current one (in version 11, ptxas rebuilt the prefetched Pack8 from 16-bit halves halfway through the current row, and the warp waited there); about 600 instructions a warp-row instead of 866. The last block issues all its loads of the fp32 totals before using any, and adds them to a copy of dbias and dweight that each block stashed in shared memory when it started: one L2 round trip where version 11 looped, one DRAM round trip per blockDim columns. The block's column sums cross shared memory without bank conflicts and leave as float4 atomics on sm_90."
why = """
Version 11's SASS and its dependence on the block size show where its time above the model goes:
(1) the last block adds the totals into the bf16 gradients in 2C / blockDim iterations, each
waiting on a cold load before issuing the next (a DRAM round trip an iteration, hence smaller
blocks are slower); (2) the prefetch did not prefetch: the per-pack `ok ? load : zero` on Pack8's
16-bit fields made ptxas rebuild the next row's registers from halves right after the current
row's first pass, so the warp waited there and then worked with nothing in flight; (3) the block's
column sums crossed shared memory with two-way bank conflicts.

What changes:
1. Two buffers, no copies. A warp holds two rows as Word8 (int4 of 32-bit words); while it works
   on one, the other is in flight, and a written row's buffer is refilled with the row two rounds
   on. The loop is unrolled twice so the buffers take turns (layernorm_forward 10's scheme): no
   register copy ever waits on a load. Still 168 registers, no spills, 12 warps an SM.
2. Less arithmetic a value: widening is a shift or a mask of a word, xhat one FFMA, dinp's term
   three FFMAs; the weights come from shared memory with immediate offsets.
3. The last block in one round trip: every block copies dbias and dweight into shared memory at
   its start (overlapping its first loads), and the last block issues all its __ldcg of the totals
   before using any.
4. Shared memory without conflicts: lanes 4-7 of each quarter-warp store their second float4
   first; each thread then sums one float4 of columns over the block's slots in order and adds it
   with one float4 atomic (sm_90's red.global.add.v4.f32; four float atomics on sm_80).
The rest is version 11's: one launch, no scratch, no memset, the same module state and caveats,
not deterministic; dinp rounded once, dweight and dbias summed in fp32 and rounded once.

The analysis in numbers, the prediction and the measurements: results/notes/layernorm_backward.md.
"""
# Word8 rows (C % 8 == 0); a row takes at most three warps of 768 columns; the accumulator holds
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
kernel = "layernorm_backward12_w1"
when = "warps_per_row == 1"
grid = "groups"
block = "block_size"
shared = "4 * (2 * C * row_slots + 128 + C) + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward12_w2"
when = "warps_per_row == 2"
grid = "groups"
block = "block_size"
shared = "4 * (2 * C * row_slots + 128 + C) + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward12_w3"
when = "warps_per_row == 3"
grid = "groups"
block = "block_size"
shared = "4 * (2 * C * row_slots + 128 + C) + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[emulate]]
runs = ["bs=128 seed=0 PRIORITY", "bs=128 seed=1 SHUFFLE", "bs=128 seed=2 SHUFFLE",
  "bs=192 seed=0 PRIORITY", "bs=192 seed=1 SHUFFLE", "bs=192 seed=2 SHUFFLE", "bs=384 seed=0 PRIORITY",
  "bs=384 seed=1 SHUFFLE", "bs=384 seed=2 SHUFFLE"]

[[emulate]]
sizes = [{ B = 1, T = 7, C = 1600 }]
runs = ["bs=192 seed=2 SHUFFLE order=1", "bs=192 seed=2 SHUFFLE order=2"]

[[emulate]]
sizes = [{ B = 4, T = 33, C = 768 }]
runs = ["bs=128 seed=2 SHUFFLE order=1", "bs=128 seed=2 SHUFFLE order=2"]

[[emulate]]
sizes = [{ B = 1, T = 37, C = 768 }, { B = 1, T = 25, C = 776 }, { B = 1, T = 31, C = 1536 },
  { B = 1, T = 25, C = 2304 }, { B = 3, T = 9, C = 8 }]
runs = ["bs=128 seed=0 PRIORITY sms=1", "bs=192 seed=1 SHUFFLE sms=1", "bs=384 seed=2 PRIORITY sms=1"]
*/

#include "layernorm_backward_bf16.cuh"  // layernorm_backward12 (the kernel body, shared with layernorm_backward_proj_bias)

// The fp32 column totals of the launch in progress (float4 [0, C/4) dbias's, [C/4, C/2)
// dweight's) and the count of blocks done with them. Zero when the module loads; the last block
// of every launch puts them back to zero.
__device__ float4 layernorm_backward12_totals[2 * 2304 / 4];
__device__ int layernorm_backward12_tickets;

// 12 warps per SM: the launch bounds hold the registers to 168.
extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward12_w1(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<1, 2>(dinp, dweight, dbias, nullptr, dout, inp, weight, mean, rstd, N, C,
                                 layernorm_backward12_totals, &layernorm_backward12_tickets);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward12_w2(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<2, 2>(dinp, dweight, dbias, nullptr, dout, inp, weight, mean, rstd, N, C,
                                 layernorm_backward12_totals, &layernorm_backward12_tickets);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward12_w3(bf16* dinp, bf16* dweight, bf16* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<3, 2>(dinp, dweight, dbias, nullptr, dout, inp, weight, mean, rstd, N, C,
                                 layernorm_backward12_totals, &layernorm_backward12_tickets);
}
