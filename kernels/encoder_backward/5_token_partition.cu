/*
title = "One launch, no sort: each block owns the tokens of one residue and groups their positions in shared memory"
builds_on = 3
changed = "Version 3's device-wide sort (a memset and four kernels before the sums, with scratch) is gone, and so is its combine kernel. Blocks 0..G-1 own the dwte rows: block g owns every token id v with v % G == g (G a power of two). Each reads all B*T token ids (int4 loads), keeps its own positions in ascending order (warp ballots and popcounts), counts them per token in shared memory, groups them with a stable counting sort in shared memory (__match_any_sync for the ranks) and sums each token's dout rows into its dwte row once, as 8 interleaved running sums. The blocks after the G token blocks sum dwpe's rows over b. One kernel, no scratch, float4 channels when C % 4 == 0."
why = """
Versions 2 and 3 sort the sources: every position is moved into its token's bucket, which costs
a memset and four kernels before any row is summed (one a scan of all V counts in a single block)
and scratch; version 3 then needs a combine kernel. Here the destinations are partitioned instead:
block g owns the dwte rows of the tokens v with v % G == g, so each row has exactly one writer, is
read and written once and needs no atomics. The price: every token block reads all B*T ids (4
bytes a position against 4*C bytes of a dout row; from L2 after the first) and keeps its own.

Inside a block the kept positions are compacted in ascending order (ballots and popcounts give
each thread its offset); a block owns at most 256 token ids, so a count per owned token fits in
shared memory; a scan of the counts gives each token its group's start, and one warp places the
positions 32 at a time (__match_any_sync ranks the lanes holding the same token): a stable
counting sort of a few dozen positions, in shared memory.

Determinism comes from a fixed formula, not from the order blocks run in: a token's k rows, in
ascending position, are dealt to 8 interleaved running sums (row j to sum j % 8), the 8 added in
order, the total added to the dwte row. No block size, SM count or shared-memory capacity enters
it, so dwte has the same bits on every run and GPU. The 8 sums also spread a frequent token over
the block's warps, but all of one token's rows go through one SM: a token holding a large share of
the batch makes its block the tail. Shared memory holds 1024 positions at once; more are streamed
with the running sums parked, the formula unchanged. dout is read twice (token blocks, then the
dwpe blocks, last in the grid). The code is kernels/encoder_backward/token_partition.cuh, shared
with version 6 (bf16): this file keeps what is fp32. The numbers: results/notes/encoder_backward.md.
"""
preconditions = ["N <= 2**30"]  # the scan of the ids counts positions in int, with a block of headroom
block_sizes = [64, 128, 256, 512]

[derived]
# Token blocks: a power of two near 4 per SM, no more than the vocabulary or the positions can
# use, and at least V / 256, so that a block owns at most 256 token ids (its shared counts).
G = "max(min(2 ** ilog2(SMS * 4), 2 ** ilog2(2 * V - 1), 2 ** ilog2(2 * N - 1)), 2 ** ilog2(2 * cdiv(V, 256) - 1))"
CW = "128 if C % 4 == 0 else 32"  # channels a warp covers: 32 lanes x float4, or x 1
dwpe_blocks = "max(1, min(cdiv(T * cdiv(C, CW), 4 * (block_size // 32)), SMS * 2))"  # ~4 rows x CW per warp
# 14720 bytes of positions, counts and plans; then max(1, warps / 4) x 8 partial rows of 128 floats.
shared_bytes = "14720 + max(1, block_size // 128) * 4096"

[[launch]]
kernel = "encoder_backward5_vec4"
when = "C % 4 == 0"
grid = "G + dwpe_blocks"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "ilog2(G)"]

[[launch]]
kernel = "encoder_backward5_scalar"
when = "C % 4 != 0"
grid = "G + dwpe_blocks"
block = "block_size"
shared = "shared_bytes"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V", "ilog2(G)"]

[[emulate]]
runs = ["bs=64 seed=0 PRIORITY", "bs=64 seed=1 PRIORITY"]
*/

#include "token_partition.cuh"  // the partition, the counting sort and the fixed-order sums

// ---- Sizes the header's shared_bytes and G rely on (SLOTS = 256 is token_partition.cuh's). ----
constexpr int CAP = 1024;    // positions a block holds at once
constexpr int CW_MAX = 128;  // the widest warp's channel range (32 lanes x float4)

// ---- Channel vectors: VEC consecutive floats in one access (4: float4; 1: one float). ----
template <> struct Row<float, 4> {
    float4 q;
    __device__ __forceinline__ void load(const float* p) { q = *reinterpret_cast<const float4*>(p); }
    __device__ __forceinline__ void add_to(float (&acc)[4]) const {
        acc[0] += q.x;
        acc[1] += q.y;
        acc[2] += q.z;
        acc[3] += q.w;
    }
    // p[0..4) = these values + sum: a gradient row loaded early, added to once, stored.
    __device__ __forceinline__ void store_plus(float* p, const float (&sum)[4]) const {
        *reinterpret_cast<float4*>(p) =
            make_float4(q.x + sum[0], q.y + sum[1], q.z + sum[2], q.w + sum[3]);
    }
};
template <> struct Row<float, 1> {
    float x;
    __device__ __forceinline__ void load(const float* p) { x = *p; }
    __device__ __forceinline__ void add_to(float (&acc)[1]) const { acc[0] += x; }
    __device__ __forceinline__ void store_plus(float* p, const float (&sum)[1]) const { p[0] = x + sum[0]; }
};

// At most 512 threads a block, two blocks an SM: at most 64 registers (none spilled).
extern "C" __global__ void __launch_bounds__(512, 2)
encoder_backward5_vec4(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T,
                       int C, int V, int shift) {
    extern __shared__ float4 shared4[];  // the token blocks' plan (token_partition.cuh's layout)
    encoder_backward_token_partition<4, CAP, CW_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, shift);
}

extern "C" __global__ void __launch_bounds__(512, 2)
encoder_backward5_scalar(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T,
                         int C, int V, int shift) {
    extern __shared__ float4 shared4[];  // the token blocks' plan (token_partition.cuh's layout)
    encoder_backward_token_partition<1, CAP, CW_MAX>(shared4, dwte, dwpe, dout, inp, B, T, C, V, shift);
}
