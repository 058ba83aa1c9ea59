/*
title = "Rows gathered by the TMA unit: a ring of tiles in shared memory, S - 1 tiles in flight a block"
changed = "Version 12's threads no longer load the rows they add. A block owns tiles of R consecutive positions and keeps S of them in flight in shared memory; lane r of warp 0 loads position r's token and issues one bulk copy of its whole wte row and one of its wpe row (cp.async.bulk, completing on the stage's mbarrier); every thread waits for the tile, adds 16 bytes at a time from shared memory and stores with streaming stores; after a barrier the stage is refilled with the tile S further on, whose tokens were loaded before the adds."
why = """
Measured: it is not faster. The prediction was that with the gather handed to the TMA unit the
bytes in flight are bounded by shared memory instead of registers (three tiles of 24 KB of wte
rows a block at C = 768, one block an SM), and a tile's token round trip is paid while the tiles
before it are added, so the adds would stream at the copy's rate.

H100 (2026-11-25, bench encoder_forward, L2 flushed, best block size; six runs,
results/h100-encoder-forward-bulk-2026-11-25.txt): 28.7-28.9 us against version 12's 25.2-25.8
in the same runs, 0.83x the copy (version 12 0.94-0.96x). Variants beside it: 12 KB tiles and two
blocks an SM 28.6-29.2 us, three stages 28.0-28.7, 6 KB tiles and three blocks an SM 29.7-29.8,
eight stages of 12 KB 30.9-31.3; wpe read from global memory by the adds instead of copied into
the stage (version 14 at bf16 does that) 30.2-30.4 (four stages, two blocks an SM) and 33.6-34.2
(eight stages). ncu (no flush): DRAM throughput 48% against version 12's 57%, a quarter of the
SM's warps resident, and half of every warp's stall cycles (7.4 of 15 per instruction) spent at
the per-tile __syncthreads: the block moves in lockstep with its slowest warp and its next
stage's copies, where version 12's 2048 independent threads an SM each wait only for their own
row.

Tried after (not kept; the file stayed as it was): a warp-specialised ring, warp 0 only filling
stages and the other warps only adding, each adding warp arriving on its stage's "empty" mbarrier
for warp 0 to wait on, no __syncthreads in the loop. 28.2-28.4 us with the wpe rows in the stages
(24 KB tiles, four stages, or 12 KB and eight), 30.7-31.1 with wpe read by the adds; at bf16
17.6-18.2 us against version 14's 17.1-17.5. The barrier was where the warps waited, not why:
without it they wait on the stages' copies instead. Gathering 3 KB rows through the TMA unit,
with one block's few warps to add them, does not beat 2048 threads an SM each asking for its own
16 bytes.
"""
preconditions = ["C % 4 == 0", "C <= 6144"]  # whole 16-byte rows; a stage's rows fit shared memory
block_sizes = [128, 256, 512, 1024]

[derived]
R = "max(1, min(32, 24576 // (4 * C)))"      # positions a tile: about 24 KB of wte rows
S = "4"                                      # tiles in the ring: S - 1 in flight while one is added
shared_bytes = "16 * ((8 * S + 4 * S * R + 15) // 16) + S * 2 * R * C * 4"

[[launch]]
kernel = "encoder_forward13"
grid = "min(cdiv(N, R), SMS * max(1, 233472 // (shared_bytes + 1024)))"
block = "block_size"
shared = "shared_bytes"
args = ["out", "inp", "wte", "wpe", "N", "T", "C", "V", "R", "S"]

[[emulate]]
sizes = ["test", { B = 1, T = 3, C = 8, V = 7 }, { B = 3, T = 5, C = 16, V = 100 },
  { B = 2, T = 9, C = 784, V = 50 }, { B = 5, T = 67, C = 64, V = 300 }]
runs = ["bs=128 seed=0 PRIORITY sms=1", "bs=256 seed=1 SHUFFLE", "bs=512 seed=2 PRIORITY sms=1",
  "bs=1024 seed=0 SHUFFLE"]
*/
#include "encoder_forward_bulk.cuh"  // the ring of tiles, filled by bulk copies (sm_90)

struct Fp32 {
    using E = float;
    using Unit = float4;
    static __device__ __forceinline__ float4 add(const float4& w, const float4& p, bool ok) {
        if (!ok) {  // outside the vocabulary: NaN, loudly
            float nan = __int_as_float(0x7fc00000);
            return make_float4(nan, nan, nan, nan);
        }
        return make_float4(w.x + p.x, w.y + p.y, w.z + p.z, w.w + p.w);
    }
    static __device__ __forceinline__ void store(float* dst, const float4& x) { __stcs(reinterpret_cast<float4*>(dst), x); }
};

extern "C" __global__ void encoder_forward13(float* out, const int* __restrict__ inp, const float* __restrict__ wte,
                                             const float* __restrict__ wpe, int N, int T, int C, int V, int R, int S) {
    extern __shared__ float4 shared4[];  // the ring (encoder_forward_bulk.cuh's layout)
    efb::encoder_forward_bulk<Fp32>(shared4, out, inp, wte, wpe, N, T, C, V, R, S);
}
