/*
title = "bf16: layernorm_backward 12's one launch with a third column sum, of the dinp it writes"
builds_on = 1
precision = "bf16"
changed = "layernorm_backward 12's kernel (kernels/common/layernorm_backward_bf16.cuh) with SUMS = 3: each lane adds the new dinp of its columns, in fp32 before the rounding, into a third set of register accumulators beside dbias's and dweight's; the block's sums, the fp32 totals and the last block's rounding carry 3C columns instead of 2C. One launch, no memset, no second read of dinp."
why = """
In the trainer's bf16 step the bias gradients of attproj and fcproj are matmul_backward_bias calls
on the residual stream's gradient right after a layernorm backward wrote it: a partial-sum kernel
reading 25 MB (B = 16) and a reduce kernel, 24 pairs a step. Dropping those 48 launches (their
gradients then wrong) took the B = 16 step on an H200 from 28.13-28.17 ms to 27.69-27.75
(results/h200-session14-2026-12-02/call2): 0.43 ms, ~9 us a launch, more than their bytes alone
(25 MB at 4.26 TB/s is 6 us). Inside layernorm_backward 12 the rows are already in registers; a
third accumulator costs 24 registers a lane and 4C more bytes of shared memory and of atomics a
block, no DRAM traffic but the C sums themselves.

The registers. Version 12 sits at 168 (12 warps an SM, __launch_bounds__(384, 1)); 24 more
accumulators would spill there, so this version keeps 8 warps an SM: block sizes 128 and 256,
launch bounds (256, 1), up to 255 registers. Each warp still has two rows in flight, 16 rows an
SM: ~74 KB of loads in flight, above the ~40-50 KB Little's law asks at this bandwidth.
"""
preconditions = ["C % 8 == 0", "C <= 2304"]
block_sizes = [128, 256]
deterministic = false

[derived]
warps_per_row = "cdiv(C, 768)"
row_slots = "(block_size // 32) // warps_per_row"  # rows a block works on at once
blocks_per_sm = "8 // (block_size // 32)"          # 8 warps of <= 255 registers per SM
rounds = "cdiv(N, SMS * blocks_per_sm * row_slots)"
groups = "cdiv(N, rounds * row_slots)"             # as few blocks as keep every round full

[[launch]]
kernel = "ln_proj_bias2_w1"
when = "warps_per_row == 1"
grid = "groups"
block = "block_size"
shared = "4 * (3 * C * row_slots + 128) + 6 * C + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dproj_bias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "ln_proj_bias2_w2"
when = "warps_per_row == 2"
grid = "groups"
block = "block_size"
shared = "4 * (3 * C * row_slots + 128) + 6 * C + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dproj_bias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "ln_proj_bias2_w3"
when = "warps_per_row == 3"
grid = "groups"
block = "block_size"
shared = "4 * (3 * C * row_slots + 128) + 6 * C + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dproj_bias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[emulate]]
runs = ["bs=128 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE"]

[[emulate]]
sizes = [{ B = 1, T = 37, C = 768 }, { B = 1, T = 31, C = 1536 }, { B = 1, T = 25, C = 2304 }, { B = 3, T = 9, C = 8 }]
runs = ["bs=128 seed=0 PRIORITY sms=1", "bs=256 seed=1 SHUFFLE sms=1"]
*/

#include "layernorm_backward_bf16.cuh"  // layernorm_backward12 (layernorm_backward 12's body), SUMS = 3 here

// This module's fp32 column totals of the launch in progress (float4 [0, C/4) dbias's, [C/4, C/2)
// dweight's, [C/2, 3C/4) dproj_bias's) and its count of blocks done. Zero when the module loads;
// the last block of every launch puts them back to zero.
__device__ float4 ln_proj_bias2_totals[3 * 2304 / 4];
__device__ int ln_proj_bias2_tickets;

// 8 warps per SM: the launch bounds leave up to 255 registers for the third set of sums.
extern "C" __global__ void __launch_bounds__(256, 1)
ln_proj_bias2_w1(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dproj_bias, const bf16* dout, const bf16* inp,
                 const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<1, 3>(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd, N, C,
                               ln_proj_bias2_totals, &ln_proj_bias2_tickets);
}

extern "C" __global__ void __launch_bounds__(256, 1)
ln_proj_bias2_w2(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dproj_bias, const bf16* dout, const bf16* inp,
                 const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<2, 3>(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd, N, C,
                               ln_proj_bias2_totals, &ln_proj_bias2_tickets);
}

extern "C" __global__ void __launch_bounds__(256, 1)
ln_proj_bias2_w3(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dproj_bias, const bf16* dout, const bf16* inp,
                 const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<3, 3>(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd, N, C,
                               ln_proj_bias2_totals, &ln_proj_bias2_tickets);
}
