/*
title = "Written from the input's side: reads in one sequential stream, 16-byte units"
builds_on = 2
changed = "Version 2 has a thread per float4 of the output: a warp reads HS-float runs of one head from rows 3C floats apart and writes one contiguous run. Here a thread per 16-byte unit of the input, in the input's order: a warp reads 512 contiguous bytes, exactly as a copy does, and writes runs of one head's row (HS floats, 256 bytes at HS = 64) to q, k and v. The kernel moves units, not floats (kernels/common/permute_units.cuh), so version 5 runs the same code at bf16."
why = """
A permute is a copy whose reads or writes (not both) must be scattered. Version 2 scatters the
reads: each warp asks for runs of 256 bytes (HS = 64 floats of one head) from rows 9 KB apart,
and its writes are sequential. But stores do not go to DRAM as issued: they land in L2, which
holds them until the line is evicted, whole, so the order they were issued in hardly reaches
DRAM. Loads are served as they come. Scattering the writes instead and keeping the reads in one
stream lets DRAM see a copy's reads. Each thread moves one 16-byte unit; the index arithmetic
is three 32-bit divisions (by a row's units, a head block's units and a head row's units),
cheap next to a DRAM access. With HS % 4 == 0 every unit is whole and 16-byte aligned on both
sides, and 3 * N < 2^31 keeps every index in 32 bits.

Tiles of 4 or 8 consecutive positions a block, making both the reads and the writes long runs,
were tried beside it and ran no faster than version 2: the long write runs bought nothing, as the
L2 argument above predicts. Measurements: results/notes/permute.md.
"""
preconditions = ["HS % 4 == 0", "3 * N < 2**31"]
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "permute4"
grid = "cdiv(3 * N // 4, block_size)"
block = "block_size"
args = ["q", "k", "v", "inp", "T", "NH", "HS // 4", "3 * N // 4"]

[[emulate]]
sizes = ["test", { B = 1, T = 1, NH = 1, HS = 8 }, { B = 3, T = 5, NH = 2, HS = 8 },
  { B = 2, T = 17, NH = 25, HS = 16 }, { B = 1, T = 9, NH = 3, HS = 64 }]
runs = ["bs=128 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE", "bs=512 seed=2 PRIORITY", "bs=1024 seed=0 SHUFFLE"]
*/
#include "permute_units.cuh"  // permute_unit: one 16-byte unit, read in the input's order

extern "C" __global__ void permute4(float* q, float* k, float* v, const float* inp, int T, int NH, int U,
                                    int units) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (unsigned)units)
        permute_unit(reinterpret_cast<int4*>(q), reinterpret_cast<int4*>(k), reinterpret_cast<int4*>(v),
                     reinterpret_cast<const int4*>(inp), T, NH, U, i);
}
