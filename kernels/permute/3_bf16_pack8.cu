/*
title = "bf16: eight values per 16-byte access, any head size"
builds_on = 2
precision = "bf16"
changed = "Version 2 at bf16: each thread moves one Pack8 (eight bf16 values in 16 bytes) of q, k and v instead of one float4. The kernel is written once for VEC values per access: VEC = 8 when HS % 8 == 0, and VEC = 1 (2-byte accesses) for every other head size, which version 2 refused."
why = """
A copy's time is its bytes, and bf16 halves them. Keeping 16 bytes per access keeps version 2's
instruction count per byte: eight values per load and store now, three independent 16-byte
loads in flight per thread, coalesced on both sides (a warp reads runs of HS values of one
head's rows and writes consecutive addresses of q, k and v). With HS % 8 == 0, C = NH * HS is a
multiple of 8 too, so every pack starts 16-byte aligned on both sides. Other head sizes take
the same kernel with one value per access: slow, but correct for every size, so no bf16 size
is left without a version. Nothing is reused: streaming hints on every access. The copy moves
bits: bf16 needs no arithmetic at all.
"""
preconditions = ["B * NH <= 65535"]
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "permute3_vec8"
when = "HS % 8 == 0"
grid = ["cdiv(T * HS // 8, block_size)", "B * NH"]
block = "block_size"
args = ["q", "k", "v", "inp", "B", "T", "NH", "HS"]

[[launch]]
kernel = "permute3_vec1"
when = "HS % 8 != 0"
grid = ["cdiv(T * HS, block_size)", "B * NH"]
block = "block_size"
args = ["q", "k", "v", "inp", "B", "T", "NH", "HS"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
when = "B * T * NH * HS <= 20000"
runs = ["seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE order=3"]
*/
#include "misc_bf16_vec.cuh"  // BfVec<VEC>, load_vec_stream/store_vec_stream (VEC = 8: 16 bytes)

// One thread per VEC values of one head's (T, HS) block; blockIdx.y is the (b, h) pair.
template <int VEC>
__device__ __forceinline__ void permute_heads(bf16* q, bf16* k, bf16* v, const bf16* inp, int T,
                                              int NH, int HS) {
    int hsv = HS / VEC;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;  // a group of this head's block
    if (i >= (unsigned)T * hsv) return;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int t = i / hsv, d = (i % hsv) * VEC;
    size_t C = (size_t)NH * HS;
    const bf16* src = inp + ((size_t)b * T + t) * 3 * C + (size_t)h * HS + d;
    size_t dst = ((size_t)bh * T + t) * HS + d;
    BfVec<VEC> vq = load_vec_stream<VEC>(src);
    BfVec<VEC> vk = load_vec_stream<VEC>(src + C);
    BfVec<VEC> vv = load_vec_stream<VEC>(src + 2 * C);
    store_vec_stream<VEC>(q + dst, vq);
    store_vec_stream<VEC>(k + dst, vk);
    store_vec_stream<VEC>(v + dst, vv);
}

extern "C" __global__ void permute3_vec8(bf16* q, bf16* k, bf16* v, const bf16* inp, int B, int T,
                                         int NH, int HS) {
    permute_heads<8>(q, k, v, inp, T, NH, HS);
}

extern "C" __global__ void permute3_vec1(bf16* q, bf16* k, bf16* v, const bf16* inp, int B, int T,
                                         int NH, int HS) {
    permute_heads<1>(q, k, v, inp, T, NH, HS);
}
