/*
title = "bf16: eight values per 16-byte access, any head size"
builds_on = 2
precision = "bf16"
changed = "Version 2 at bf16: each thread moves one Pack8 (eight bf16 values in 16 bytes) instead of one float4. The kernel is written once for VEC values per access: VEC = 8 when HS % 8 == 0, and VEC = 1 (2-byte accesses) for every other head size, which version 2 refused."
why = """
A copy's time is its bytes, and bf16 halves them; 16 bytes per access keeps version 2's
instructions per byte. Consecutive threads read consecutive packs of one head's row (HS values,
contiguous in inp) and write consecutive packs of out's row (C values, contiguous): coalesced on
both sides. With HS % 8 == 0 every pack is 16-byte aligned on both sides (C = NH * HS is a
multiple of 8 too). Other head sizes take the same kernel with one value per access: slow, but
correct for every size. Nothing is reused: streaming hints on both accesses.
"""
preconditions = ["B <= 65535"]
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "unpermute3_vec8"
when = "HS % 8 == 0"
grid = ["cdiv(T * C // 8, block_size)", "B"]
block = "block_size"
args = ["out", "inp", "B", "T", "NH", "HS"]

[[launch]]
kernel = "unpermute3_vec1"
when = "HS % 8 != 0"
grid = ["cdiv(T * C, block_size)", "B"]
block = "block_size"
args = ["out", "inp", "B", "T", "NH", "HS"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
when = "B * T * NH * HS <= 20000"
runs = ["seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE order=3"]
*/
#include "misc_bf16_vec.cuh"  // BfVec<VEC>, load_vec_stream/store_vec_stream (VEC = 8: 16 bytes)

// One thread per VEC values of sequence blockIdx.y's (T, C) block of out.
template <int VEC>
__device__ __forceinline__ void unpermute_heads(bf16* out, const bf16* inp, int T, int NH, int HS) {
    int hsv = HS / VEC, cv = NH * hsv;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;  // a group of sequence b's (T, C) block
    if (i >= (unsigned)T * cv) return;
    int b = blockIdx.y;
    int t = i / cv, c = i % cv;
    int h = c / hsv, d = (c % hsv) * VEC;
    const bf16* src = inp + (((size_t)b * NH + h) * T + t) * HS + d;
    store_vec_stream<VEC>(out + ((size_t)b * T * cv + i) * VEC, load_vec_stream<VEC>(src));
}

extern "C" __global__ void unpermute3_vec8(bf16* out, const bf16* inp, int B, int T, int NH,
                                           int HS) {
    unpermute_heads<8>(out, inp, T, NH, HS);
}

extern "C" __global__ void unpermute3_vec1(bf16* out, const bf16* inp, int B, int T, int NH,
                                           int HS) {
    unpermute_heads<1>(out, inp, T, NH, HS);
}
