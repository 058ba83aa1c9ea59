/*
title = "Version 13 at bf16: a ring of bulk-copied wte rows, wpe read by the adds"
builds_on = 13
precision = "bf16"
changed = "Version 11's Pack8 threads replaced by version 13's ring: tiles of R positions (about 12 KB of bf16 wte rows), four stages, only the wte rows copied whole by the TMA unit; the adds read 16 bytes of the tile with one shared load and the wpe row's 16 bytes from global memory, add eight bf16 in fp32 and round once."
why = """
Measured: slower than version 11, as version 13 is slower than version 12. A row is 1.5 KB at
C = 768: a tile of 8 positions is 12 KB of wte rows. This file reads the wpe rows from global
memory in the adds (WPE false, four stages of 12 KB, two blocks an SM), the best of the forms
tried; the adds read the tile with 16-byte shared loads (Pack8's 2-byte shared loads wasted most
of the shared wavefronts). ncu shows version 13's per-tile barrier stalls.

The measurements and the forms tried: results/notes/encoder_forward.md.
"""
preconditions = ["C % 8 == 0", "C <= 24576"]  # whole 16-byte rows; a stage's rows fit shared memory
block_sizes = [128, 256, 512, 1024]

[derived]
R = "max(1, min(32, 12288 // (2 * C)))"      # positions a tile: about 12 KB of wte rows
S = "4"                                      # tiles in the ring: S - 1 in flight while one is added
shared_bytes = "16 * ((8 * S + 4 * S * R + 15) // 16) + S * R * C * 2"  # wte rows only

[[launch]]
kernel = "encoder_forward14"
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
#include "bf16.cuh"                  // bf16, Pack8, to_float/to_bf16
#include "encoder_forward_bulk.cuh"  // the ring of tiles, filled by bulk copies (sm_90)

struct Bf16 {
    using E = bf16;
    using Unit = int4;  // eight bf16 as one 128-bit word: one shared-memory load (a Pack8 took eight)
    static __device__ __forceinline__ int4 add(const int4& w, const int4& p, bool ok) {
        const bf16* a = reinterpret_cast<const bf16*>(&w);
        const bf16* b = reinterpret_cast<const bf16*>(&p);
        Pack8 sum;
#pragma unroll
        for (int j = 0; j < 8; j++)  // outside the vocabulary: NaN, loudly
            sum.v[j] = to_bf16(ok ? to_float(a[j]) + to_float(b[j]) : __int_as_float(0x7fc00000));
        return *reinterpret_cast<const int4*>(&sum);
    }
    static __device__ __forceinline__ void store(bf16* dst, const int4& x) { __stcs(reinterpret_cast<int4*>(dst), x); }
};

extern "C" __global__ void encoder_forward14(bf16* out, const int* __restrict__ inp, const bf16* __restrict__ wte,
                                             const bf16* __restrict__ wpe, int N, int T, int C, int V, int R, int S) {
    extern __shared__ float4 shared4[];  // the ring (encoder_forward_bulk.cuh's layout)
    efb::encoder_forward_bulk<Bf16, false>(shared4, out, inp, wte, wpe, N, T, C, V, R, S);
}
