/*
title = "bf16, one launch, no sort: version 5's token partition with fp32 sums rounded once"
builds_on = 5
precision = "bf16"
changed = "Version 5 at bf16: dout, dwte and dwpe hold bf16 (the token ids stay int32). The partition, the compaction and the counting sort in shared memory are version 5's, unchanged (integers only). Every sum is fp32: a token's 8 running sums and their partial rows in shared memory, and dwpe's sum over b; each total is added to the widened gradient in fp32 and rounded once, when the bf16 row is stored. Channels move eight at a time (one 16-byte Pack8) when C % 8 == 0, one at a time otherwise."
why = """
Version 4 reached its sums through version 3's device-wide sort: seven launches, with a scan
over all V counts in a single block and scratch buffers. This version does the same fixed-order
sums in one launch without scratch: block g owns the dwte rows of the tokens v with v % G == g,
finds its positions by reading all B*T token ids, and groups them in shared memory with a stable
counting sort (version 5 tells how). Each dwte row has one writer, read and written once.

The precision rule is version 4's: a dwte row can collect hundreds of dout rows, and rounding
after each (a bf16 running sum, or bf16 atomics) would drift by ~sqrt(k) roundings of a sum of
size ~sqrt(k), far past the bf16 tolerance. Here nothing bf16 is ever added to: a token's rows,
widened, go to 8 interleaved fp32 running sums (row j to sum j % 8, each in position order),
the 8 are added in order in fp32, and the total meets the widened gradient in fp32; the one
rounding is the store. The order is set by the data alone, so the bf16 bits are the same on every
run and at every block size. All of a frequent token's rows still go through one SM (version 4's
segments split such a token across blocks, at the price of the sort and its launches).

Half the bytes of version 5 for dout and the rows it updates, the same number of accesses per
byte. Widths that are not a multiple of 8 take the same kernel one channel per thread. The code is
version 5's, in kernels/encoder_backward/token_partition.cuh: this file keeps only the bf16 rows.

Measurements: results/notes/encoder_backward.md.
"""
block_sizes = [64, 128, 256, 512]
preconditions = ["N <= 2**30"]  # the scan of the ids counts positions in int, with a block of headroom

[derived]
# Token blocks: a power of two near 4 per SM, no more than the vocabulary or the positions can
# use, and at least V / 256, so that a block owns at most 256 token ids (its shared counts).
G = "max(min(2 ** ilog2(SMS * 4), 2 ** ilog2(2 * V - 1), 2 ** ilog2(2 * N - 1)), 2 ** ilog2(2 * cdiv(V, 256) - 1))"
CW = "256 if C % 8 == 0 else 32"  # channels a warp covers: 32 lanes x Pack8, or x 1
dwpe_blocks = "max(1, min(cdiv(T * cdiv(C, CW), 4 * (block_size // 32)), SMS * 2))"  # ~4 rows x CW per warp
# 14720 bytes of positions, counts and plans; then max(1, warps / 4) x 8 fp32 partial rows of 256.
shared_bytes = "14720 + max(1, block_size // 128) * 8192"

[[launch]]
kernel = "encoder_backward6_pack8"
when = "C % 8 == 0"
grid = "G + dwpe_blocks"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "ilog2(G)"]

[[launch]]
kernel = "encoder_backward6_scalar"
when = "C % 8 != 0"
grid = "G + dwpe_blocks"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "ilog2(G)"]

[[emulate]]
runs = ["bs=64 seed=0 PRIORITY", "bs=64 seed=1 PRIORITY"]
*/
#include "bf16.cuh"  // bf16, Pack8 (eight bf16 in 16 bytes) with load8/store8, to_float/to_bf16
#include "token_partition.cuh"  // version 5's partition, counting sort and fixed-order fp32 sums

// ---- Sizes the header's shared_bytes and G rely on (SLOTS = 256 is token_partition.cuh's). ----
constexpr int CAP = 1024;    // positions a block holds at once
constexpr int CW_MAX = 256;  // the widest warp's channel range (32 lanes x Pack8)

// ---- bf16 rows: VEC consecutive values in one access (8: a Pack8; 1: one bf16), widened. ----
template <> struct Row<bf16, 8> {
    Pack8 q;
    __device__ __forceinline__ void load(const bf16* p) { q = load8(p); }
    __device__ __forceinline__ void add_to(float (&acc)[8]) const {
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] += to_float(q.v[e]);
    }
    // p[0..8) = these values widened + sum, rounded once: a gradient row loaded early, stored.
    __device__ __forceinline__ void store_plus(bf16* p, const float (&sum)[8]) const {
        Pack8 out;
#pragma unroll
        for (int e = 0; e < 8; e++) out.v[e] = to_bf16(to_float(q.v[e]) + sum[e]);
        store8(p, out);
    }
};
template <> struct Row<bf16, 1> {
    bf16 x;
    __device__ __forceinline__ void load(const bf16* p) { x = *p; }
    __device__ __forceinline__ void add_to(float (&acc)[1]) const { acc[0] += to_float(x); }
    __device__ __forceinline__ void store_plus(bf16* p, const float (&sum)[1]) const {
        p[0] = to_bf16(to_float(x) + sum[0]);
    }
};

// At most 512 threads a block, two blocks an SM: at most 64 registers (none spilled).
extern "C" __global__ void __launch_bounds__(512, 2)
encoder_backward6_pack8(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T,
                        int C, int V, int shift) {
    extern __shared__ float4 shared4[];  // the token blocks' plan (token_partition.cuh's layout)
    encoder_backward_token_partition<8, CAP, CW_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, shift);
}

extern "C" __global__ void __launch_bounds__(512, 2)
encoder_backward6_scalar(bf16* dwte, bf16* dwpe, const bf16* dout, const int* inp, int B, int T,
                         int C, int V, int shift) {
    extern __shared__ float4 shared4[];  // the token blocks' plan (token_partition.cuh's layout)
    encoder_backward_token_partition<1, CAP, CW_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, shift);
}
