/*
title = "One launch: rows in registers, column sums in registers, one atomic per column per block"
builds_on = 5
changed = "Version 5's two kernels become one and its rows stream at copy speed: every load of a row (dout, inp and dinp, 16 bytes each) is issued before any arithmetic; each lane sums the same 24 columns in every row in registers (no shared-memory read-modify-write per row); the grid is one wave of 12 warps per SM with rounds of equal length; each block adds its column sums into dweight and dbias with one float atomic per column. No scratch, no memset, no reduce kernel."
why = """
Version 5's row kernel runs at about a copy's time (its bf16 twin, version 7, under Nsight
Compute); what it loses is the column sums: a second launch on 24 blocks. Folding them in with
tickets (version 8) left serial team sums after the last row. A deterministic sum cannot finish in
one launch without such a serial tail, so this version trades bitwise reproducibility for it:
1. The column sums never leave the SM until the end. A warp owns a row (wider rows take two or
   three warps) and lane l holds packs l, l + 32, ...: the same 24 columns in every row, so its
   dbias and dweight sums are 48 registers for the whole kernel. At the end the block's warps
   meet in shared memory and each thread adds one column over the warps in warp order.
2. One float atomic per column per block, straight into dweight and dbias: they are fp32 and
   accumulate (+=), which is what an atomic add does: no scratch, no memset, no second kernel. The
   block sums land in arbitrary order (a few ulps of a sum of ~8192 terms), hence deterministic =
   false; version 5 stays the deterministic one for train --deterministic.
3. Every byte of a row in flight at once: each lane issues its 18 loads of 16 bytes (dout, inp and
   dinp) and the row's mean and rstd before any arithmetic (version 5 loaded dinp only after the
   row's sums, a second round trip). 167 registers, 12 warps an SM: far more bytes in flight than
   Little's law asks, so prefetching the next row would cost warps for nothing.
4. Rounds of equal length: the grid is sized so that every round (a row per row slot) but the last
   is full and the last nearly so, instead of a full wave leaving a sixth round at 17%.
5. Wider rows (GPT-2 medium to XL): a row takes WPR = cdiv(C, 768) warps of the block (kernels
   _w2 and _w3), the two row sums crossing them through shared memory; WPR is a template constant,
   so the pack offsets are immediates and all three kernels fit 168 registers without spills.
The row code is shared with version 11 (bf16):
kernels/layernorm_backward/layernorm_backward_rows.cuh.

The bytes model, the prediction and the measurements: results/notes/layernorm_backward.md.
"""
# 16-byte rows (C % 4 == 0: cudaMalloc'd buffers are 256-byte aligned); a row takes at most three
# warps of 768 columns. Every block size keeps 12 warps per SM (3, 2 or 1 blocks).
preconditions = ["C % 4 == 0", "C <= 2304"]
block_sizes = [128, 192, 384]
deterministic = false

[derived]
warps_per_row = "cdiv(C, 768)"
row_slots = "(block_size // 32) // warps_per_row"  # rows a block works on at once
blocks_per_sm = "12 // (block_size // 32)"         # 12 warps of <= 168 registers per SM
rounds = "cdiv(N, SMS * blocks_per_sm * row_slots)"
groups = "cdiv(N, rounds * row_slots)"             # as few blocks as keep every round full

[[launch]]
kernel = "layernorm_backward10_w1"
when = "warps_per_row == 1"
grid = "groups"
block = "block_size"
shared = "4 * (128 + 2 * C * row_slots)"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward10_w2"
when = "warps_per_row == 2"
grid = "groups"
block = "block_size"
shared = "4 * (128 + 2 * C * row_slots)"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward10_w3"
when = "warps_per_row == 3"
grid = "groups"
block = "block_size"
shared = "4 * (128 + 2 * C * row_slots)"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[emulate]]
when = "B * T * C <= 250000"
runs = ["bs=128 seed=1 SHUFFLE", "bs=192 seed=1 SHUFFLE", "bs=384 seed=1 SHUFFLE",
  "bs=128 seed=0 PRIORITY", "bs=192 seed=0 PRIORITY", "bs=384 seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 2, T = 300, C = 1600 }]
runs = ["bs=128 seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 3, T = 1001, C = 100 }]
runs = ["bs=192 seed=0 PRIORITY"]
*/

#include "layernorm_backward_rows.cuh"  // the row pass and the block's column sums

// WPR warps a row (C <= 768 * WPR); a lane holds 6 float4 of each array.
template <int WPR>
__device__ __forceinline__ void layernorm_backward10(float* dinp, float* dweight, float* dbias,
                                                     const float* dout, const float* inp,
                                                     const float* weight, const float* mean,
                                                     const float* rstd, int N, int C) {
    extern __shared__ float4 ln10_smem4[];
    layernorm_backward_rows<float, 6, WPR, false>(
        dinp, dout, inp, weight, mean, rstd, N, C, reinterpret_cast<float*>(ln10_smem4),
        [&](int e, float total) { atomicAdd(e < C ? dbias + e : dweight + (e - C), total); });
}

// 12 warps per SM: the launch bounds hold the registers to 168.
extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward10_w1(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward10<1>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward10_w2(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward10<2>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward10_w3(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward10<3>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
