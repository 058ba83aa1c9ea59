/*
title = "bf16: version 2 at 12 warps an SM (168 registers, no spill at C = 768)"
builds_on = 2
precision = "bf16"
changed = "Version 2's kernel, compiled under layernorm_backward 12's launch bounds (384, 1): 168 registers a thread instead of 226-236, so an SM holds 12 warps again (block sizes 128, 192 and 384) with no spill in the one-warp-a-row kernel GPT-2's C = 768 runs (ptxas at sm_90a; the two- and three-warp kernels spill 4 and 8 bytes a thread)."
why = """
Version 2 gave the third set of sums room by dropping to 8 warps an SM. Whether 12 warps with two
rows each in flight (24 rows, ~110 KB of loads an SM) beat 8 (16 rows, ~74 KB) is measured here:
at C = 768 ptxas fits the third set of sums in 168 registers without spilling.
"""
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
kernel = "ln_proj_bias3_w1"
when = "warps_per_row == 1"
grid = "groups"
block = "block_size"
shared = "4 * (3 * C * row_slots + 128) + 6 * C + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dproj_bias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "ln_proj_bias3_w2"
when = "warps_per_row == 2"
grid = "groups"
block = "block_size"
shared = "4 * (3 * C * row_slots + 128) + 6 * C + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dproj_bias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "ln_proj_bias3_w3"
when = "warps_per_row == 3"
grid = "groups"
block = "block_size"
shared = "4 * (3 * C * row_slots + 128) + 6 * C + 1536 * warps_per_row"
args = ["dinp", "dweight", "dbias", "dproj_bias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[emulate]]
runs = ["bs=192 seed=2 SHUFFLE", "bs=384 seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 1, T = 37, C = 768 }, { B = 1, T = 31, C = 1536 }, { B = 1, T = 25, C = 2304 }, { B = 3, T = 9, C = 8 }]
runs = ["bs=384 seed=2 SHUFFLE sms=1"]
*/

#include "layernorm_backward_bf16.cuh"  // layernorm_backward12 (layernorm_backward 12's body), SUMS = 3 here

// This module's fp32 column totals of the launch in progress (float4 [0, C/4) dbias's, [C/4, C/2)
// dweight's, [C/2, 3C/4) dproj_bias's) and its count of blocks done. Zero when the module loads;
// the last block of every launch puts them back to zero.
__device__ float4 ln_proj_bias3_totals[3 * 2304 / 4];
__device__ int ln_proj_bias3_tickets;

// 12 warps per SM: the launch bounds hold the registers to 168 (ptxas spills the rest).
extern "C" __global__ void __launch_bounds__(384, 1)
ln_proj_bias3_w1(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dproj_bias, const bf16* dout, const bf16* inp,
                 const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<1, 3>(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd, N, C,
                               ln_proj_bias3_totals, &ln_proj_bias3_tickets);
}

extern "C" __global__ void __launch_bounds__(384, 1)
ln_proj_bias3_w2(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dproj_bias, const bf16* dout, const bf16* inp,
                 const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<2, 3>(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd, N, C,
                               ln_proj_bias3_totals, &ln_proj_bias3_tickets);
}

extern "C" __global__ void __launch_bounds__(384, 1)
ln_proj_bias3_w3(bf16* dinp, bf16* dweight, bf16* dbias, bf16* dproj_bias, const bf16* dout, const bf16* inp,
                 const bf16* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward12<3, 3>(dinp, dweight, dbias, dproj_bias, dout, inp, weight, mean, rstd, N, C,
                               ln_proj_bias3_totals, &ln_proj_bias3_tickets);
}
