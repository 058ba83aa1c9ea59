/*
title = "Rows gathered by the TMA unit: a ring of tiles in shared memory, S - 1 tiles in flight a block"
builds_on = 12
changed = "Version 12's threads no longer load the rows they add. A block owns tiles of R consecutive positions and keeps S of them in flight in shared memory; lane r of warp 0 loads position r's token and issues one bulk copy of its whole wte row and one of its wpe row (cp.async.bulk, completing on the stage's mbarrier); every thread waits for the tile, adds 16 bytes at a time from shared memory and stores with streaming stores; after a barrier the stage is refilled with the tile S further on, whose tokens were loaded before the adds."
why = """
The idea: hand the gather to the TMA unit, so that the bytes in flight are bounded by shared
memory instead of registers (three tiles of 24 KB of wte rows a block at C = 768, one block an
SM), and a tile's token round trip is paid while the tiles before it are added, so the adds would
stream at the copy's rate.

Measured: it is not faster than version 12. ncu shows less of DRAM's throughput, a quarter of the
SM's warps resident, and half of every warp's stall cycles at the per-tile __syncthreads: the
block moves in lockstep with its slowest warp and its next stage's copies, where version 12's
2048 independent threads an SM each wait only for their own row. A warp-specialised ring (warp 0
filling stages, the others adding, no __syncthreads in the loop) was tried after and not kept: the
barrier was where the warps waited, not why. Gathering 3 KB rows through the TMA unit, with one
block's few warps to add them, does not beat 2048 threads an SM each asking for its own 16 bytes.

The measurements and the variants: results/notes/encoder_forward.md.
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
