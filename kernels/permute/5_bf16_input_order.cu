/*
title = "bf16, written from the input's side: version 4's kernel at eight values a unit"
builds_on = 4
precision = "bf16"
changed = "Version 3 at bf16 writes from the output's side (a warp reads runs of one head's 64 values, 128 bytes, from rows 4.5 KB apart). This is version 4's kernel unchanged: it moves 16-byte units in the input's order, and at bf16 a unit holds eight values, so a head row of HS = 64 is 8 units and HS must be a multiple of 8 (version 3 takes every other head size)."
why = """
Version 4 explains the choice: reads in one sequential stream, as a copy's, and the scattered
side left to the stores, which L2 gathers into whole lines before they reach DRAM. At bf16 the
runs are half as long on both sides of version 3 (128 bytes of a head's row), so version 3's
reads are more scattered still, and the gain over it is larger than at fp32.

Measurements: results/notes/permute.md.
"""
preconditions = ["HS % 8 == 0", "3 * N < 2**31"]
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "permute5"
grid = "cdiv(3 * N // 8, block_size)"
block = "block_size"
args = ["q", "k", "v", "inp", "T", "NH", "HS // 8", "3 * N // 8"]

[[emulate]]
sizes = ["test", { B = 1, T = 1, NH = 1, HS = 8 }, { B = 3, T = 5, NH = 2, HS = 8 },
  { B = 2, T = 17, NH = 25, HS = 16 }, { B = 1, T = 9, NH = 3, HS = 64 }]
runs = ["bs=128 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE", "bs=512 seed=2 PRIORITY", "bs=1024 seed=0 SHUFFLE"]
*/
#include "bf16.cuh"           // bf16
#include "permute_units.cuh"  // permute_unit: one 16-byte unit, read in the input's order

extern "C" __global__ void permute5(bf16* q, bf16* k, bf16* v, const bf16* inp, int T, int NH, int U,
                                    int units) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (unsigned)units)
        permute_unit(reinterpret_cast<int4*>(q), reinterpret_cast<int4*>(k), reinterpret_cast<int4*>(v),
                     reinterpret_cast<const int4*>(inp), T, NH, U, i);
}
