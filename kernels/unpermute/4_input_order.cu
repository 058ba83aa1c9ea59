/*
title = "Written from the input's side: reads in one sequential stream, 16-byte units"
builds_on = 2
changed = "Version 2 has a thread per float4 of the output, so its warps read runs of one head's row (HS floats) from rows T * HS floats apart and write one contiguous run. Here a thread per 16-byte unit of the input, in the input's order: a warp reads 512 contiguous bytes, as a copy does, and its stores land in runs of one head's row (256 bytes at HS = 64), C floats apart. The function that moves a unit sits beside permute 4's in kernels/common/permute_units.cuh."
why = """
permute 4's argument, turned around: a permute scatters either its reads or its writes, and the
writes are the side to scatter, because stores land in L2, which writes whole lines back to DRAM
in its own order, while loads are served in the order they are asked. Version 2 scatters the
reads (the attention's output is (B, NH, T, HS) and each thread reads where its output float4
comes from); here the reads are one stream and each store run is a whole head row, a whole
number of 32-byte sectors. The index arithmetic is four 32-bit divisions a unit, by constants of
the launch: cheap beside a DRAM access. HS % 4 == 0 keeps every unit whole and aligned on both
sides; N < 2^31 / 4 units keeps the indices in 32 bits.

At bf16, version 3 (output order, 16-byte units) already measures at the copy's speed (0.99-1.02x
in the bench --all runs of 2026-11-25), while version 2 measured 0.936-0.958x in the same runs:
the fp32 form is the one short of the copy.
"""
preconditions = ["HS % 4 == 0", "N < 2**31"]
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "unpermute4"
grid = "cdiv(N // 4, block_size)"
block = "block_size"
args = ["out", "inp", "T", "NH", "HS // 4", "N // 4"]

[[emulate]]
sizes = ["test", { B = 1, T = 1, NH = 1, HS = 8 }, { B = 3, T = 5, NH = 2, HS = 8 },
  { B = 2, T = 17, NH = 25, HS = 16 }, { B = 1, T = 9, NH = 3, HS = 64 }]
runs = ["bs=128 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE", "bs=512 seed=2 PRIORITY", "bs=1024 seed=0 SHUFFLE"]
*/
#include "permute_units.cuh"  // unpermute_unit: one 16-byte unit, read in the input's order

extern "C" __global__ void unpermute4(float* out, const float* inp, int T, int NH, int U, int units) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (unsigned)units)
        unpermute_unit(reinterpret_cast<int4*>(out), reinterpret_cast<const int4*>(inp), T, NH, U, i);
}
