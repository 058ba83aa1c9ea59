/*
title = "One launch: rows in registers, column sums in registers, one atomic per column per block"
changed = "Version 5's two kernels become one and its rows stream at copy speed: every load of a row (dout, inp and dinp, 16 bytes each) is issued before any arithmetic; each lane sums the same 24 columns in every row in registers (no shared-memory read-modify-write per row); the grid is one wave of 12 warps per SM with rounds of equal length; each block adds its column sums into dweight and dbias with one float atomic per column. No scratch, no memset, no reduce kernel."
why = """
Where version 5's time goes. At B=8, T=1024, C=768 it takes 51.5 us and a copy of its 100.7 MB
takes 42.4 us. Its bytes are 75.5 MB read (dout, inp, dinp) and 25.2 MB written (dinp), and
reads are cheaper than writes: the bench file (results/h100-bench-2026-11-23-b9aa6f9-partial.json)
fits t = 4.5 us + reads / 3.17 TB/s + writes / 2.65 TB/s (matmul_backward_bias 5, 100.7 MB read,
36.2 us; global_norm 2, 498 MB read, 161.3 us; residual_forward 2 and gelu_backward 2, two reads
to a write, 30.0 us and 105.4 us). This op's bytes then need 4.5 + 23.8 + 9.5 = 37.9 us: below the
copy. Nsight Compute put the row kernel of version 7 (version 5's bf16 twin) at about the copy's
time, so the ~9 us above the copy are the column sums: a second launch on 24 blocks (the same
step cost matmul_backward_bias 6.6 us, 36.2 -> 42.8, when its atomics became partials and a
reduce kernel). Folding it in with tickets (version 8) needed a memset launch and left two
serial team sums, each a single SM reading ~100 KB from L2, after the last row: 53.8 us.

What changes.
1. The column sums never leave the SM until the end. A warp owns a row (C <= 768; wider rows
   take two or three warps, see below) and lane l holds packs l, l + 32, ... : the same 24
   columns in every row, so its dbias and dweight sums are 48 registers for the whole kernel.
   Version 5 read and wrote a shared-memory slice per row (four 16-byte shared accesses per
   float4 per row). At the end the block's warps write their sums to shared memory, one barrier,
   and each thread adds one column over the block's warps in warp order.
2. One float atomic per column per block, straight into dweight and dbias: they are fp32 and
   accumulate (+=), which is exactly what an atomic add does, so there is nothing to zero, no
   scratch, no memset and no second kernel. At the default sizes the grid is 114 blocks of 384
   threads: 114 x 1536 = 175K red.global.add.f32, 114 adds per address, issued as the blocks
   finish. For scale: matmul_backward_bias 5 adds 393K float atomics (128 per column) and still
   runs in the read model's time (36.2 us for 36.3). A deterministic sum cannot finish in one
   launch without a serial tail: whichever block finishes last must then read every other
   block's partial (or a tree of them) through one SM, ~1 us per level (version 8), or the sums
   wait for a second launch (~3 us and more, above). So this version trades bitwise
   reproducibility for those microseconds: the 114 block sums land in arbitrary order (a few
   ulps of a sum of ~8192 terms: ~1e-6 relative, against an atol of 5e-3), hence
   deterministic = false; version 5 stays the deterministic one for train --deterministic.
3. Every byte of a row in flight at once. Each lane issues its 18 loads of 16 bytes (6 float4 of
   each of dout, inp and dinp) and the row's mean and rstd before any arithmetic: 9 KB per
   warp-row. Version 5 loaded dinp only after the row's two sums, a second DRAM round trip per
   row. The kernel needs 167 registers (__launch_bounds__(384, 1): 168 at most), so 12 warps
   fit an SM: ~110 KB requested per SM per round, where Little's law asks ~14 KB (3 TB/s x ~0.6
   us unloaded latency / 132 SMs) and ~35 KB at a loaded 1.5 us. Loading the next row during the
   current one (version 11 does, in bf16) would take 245 registers here and cost a third of the
   warps, for bytes in flight this kernel already has.
4. Rounds of equal length. A round is one row per row slot of the grid; the grid is sized so that
   every round but the last is full and the last nearly so: rounds = cdiv(N, SMS x 12 warps) and
   groups = cdiv(N, rounds x slots). At the default sizes: 6 rounds, 114 blocks of 12 warps (or
   342 of 4, 228 of 6), every warp 6 rows but the last few. A full wave of 132 x 12 = 1584 warps
   would do 5.17 rows each: a sixth round at 17% of the machine, a whole DRAM round trip for a
   sixth of the rows. Each round the grid works on one contiguous band of rows.
5. Wider rows (GPT-2 medium to XL, C = 1024 to 1600): a row takes WPR = cdiv(C, 768) warps of the
   block (kernels _w2 and _w3, C <= 2304), each with the same 6 float4 a lane; the two row sums
   cross the WPR warps through shared memory with one barrier a round (the slots alternate
   between two buffers, so a round's reads never race the next round's writes). WPR is a
   template constant: with it known the pack offsets are immediates and all three kernels stay
   inside 168 registers with no spills on sm_80 and sm_90 (a runtime WPR spilled).

Prediction: ~38 us for the row pass (the model above; the rows are now the only traffic) plus
about 1 us at the end: the block's sums cross shared memory once (12 warps x 6 KB written and
read back, ~0.65 us of an SM's 128 B/clock) and the atomics follow: 38-40 us, 1.06-1.1x the
copy's speed, against version 5's 51.5 us. The model was fitted on kernels that read two bytes
for each one written; mixes of one to one run ~3 us above it (the copy itself: 42.4 us for
39.4), so a 3:1 mix should not, but if it does, 41-42 us is still at the copy. The row code is
shared with version 11 (bf16) in kernels/common/layernorm_backward_rows.cuh.

Measured on the H100 (bench --all, three runs of 2026-11-24): 41.2-42.0 us against the copy's 42.1-42.8 us (1.01-1.04x); version 5 51.1-51.3 us.
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
