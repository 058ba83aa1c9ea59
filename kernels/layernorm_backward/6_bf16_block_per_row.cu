/*
title = "bf16 storage: a block per row, fp32 column sums in shared memory, fp32 partials and a reduce kernel"
builds_on = 5
precision = "bf16"
changed = "The step to bf16 (dinp, dweight, dbias, dout, inp and weight; mean and rstd stay float): values are widened to float as they are loaded and every sum is float. A persistent block walks rows, the whole block on one row (block_sum for its two means); each thread owns columns t, t + blockDim.x, ... and adds their dweight/dbias terms into its own words of an fp32 shared-memory row; each block writes those fp32 sums as its partial, and the reduce kernel adds the partials in a fixed order and rounds into the bf16 dweight and dbias once. dinp is read, increased in float and rounded once."
why = """
Halving the bytes of the four big arrays (dout, inp, and dinp read and written) should nearly
halve the time. What must not change is where sums happen: dweight and dbias are sums over all
N rows of O(1) terms (|sum| ~ sqrt(N) ~ 90 here), and a bf16 running sum has 8 significant bits:
once the sum is 64, an added term below 0.25 is rounded away. So the column sums stay fp32 all
the way (shared memory, then fp32 partials, then the reduce kernel's fp32 total), and bf16 only
appears when the reduce kernel adds the total into dweight and dbias: one rounding. The three
gradients accumulate (+=), so each is read, increased in float and rounded once.
Why a block per row: the family's test sizes include C = 4100, and this version must handle every
C deterministically. The warp-per-row versions keep one shared-memory row of column sums per warp
(8*C bytes each), too much for 8 warps at C = 4100; a block per row keeps one per block, since
each thread owns its columns for every row: no two threads ever add to the same word, and each
word's additions happen in row order. The price is version 3's: scalar 2-byte accesses, two
passes over the row (the second from L1) and two block reductions per row.
"""
# One fp32 row of column sums per block: 8*C bytes of shared memory (96 KB at C = 12288, within
# the opt-in limit of sm_80 and later).
preconditions = ["C <= 12288"]
block_sizes = [64, 128, 256, 512]

[derived]
groups = "min(N, SMS * cdiv(1024, block_size))"  # blocks of the first kernel: one wave at most

[scratch]
partial = "2 * C * groups"

[[launch]]
kernel = "layernorm_backward6"
grid = "groups"
block = "block_size"
shared = "8 * C"
args = ["dinp", "partial", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward_reduce_bf16"
grid = "cdiv(C, 32)"
block = [32, 32]
args = ["dweight", "dbias", "partial", "groups", "C"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
when = "B * T * C <= 20000"
runs = ["seed=0 PRIORITY", "bs=512 seed=1 SHUFFLE order=3"]
*/

#include "layernorm_bf16.cuh"  // bf16, to_float/to_bf16, block_sum, the partials' reduce

// partial: gridDim.x rows of 2*C floats, [0, C) the block's dbias, [C, 2C) its dweight.
extern "C" __global__ void layernorm_backward6(bf16* dinp, float* partial, const bf16* dout,
                                               const bf16* inp, const bf16* weight,
                                               const float* mean, const float* rstd, int N, int C) {
    extern __shared__ float acc[];  // [0, C) dbias, [C, 2C) dweight: column c is thread c % blockDim.x's
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        acc[c] = 0.0f;
        acc[C + c] = 0.0f;
    }
    // No barrier needed for acc: every thread reads and writes only its own columns.

    // The loop bound is the same for the whole block, so every thread reaches block_sum.
    for (int row = blockIdx.x; row < N; row += gridDim.x) {
        const bf16* dy = dout + (size_t)row * C;
        const bf16* x = inp + (size_t)row * C;
        bf16* dx = dinp + (size_t)row * C;
        float m = mean[row], s = rstd[row];

        float sum_dn = 0.0f, sum_dnx = 0.0f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float xhat = (to_float(x[c]) - m) * s;
            float dn = to_float(weight[c]) * to_float(dy[c]);
            sum_dn += dn;
            sum_dnx += dn * xhat;
        }
        float mean_dn = block_sum(sum_dn) / C;
        float mean_dnx = block_sum(sum_dnx) / C;

        // Second pass: the block has just read this row, so these loads mostly hit L1.
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float g = to_float(__ldcs(dy + c));
            float xhat = (to_float(__ldcs(x + c)) - m) * s;
            float dn = to_float(weight[c]) * g;
            acc[c] += g;
            acc[C + c] += g * xhat;
            __stcs(dx + c, to_bf16(to_float(__ldcs(dx + c)) + s * (dn - mean_dn - xhat * mean_dnx)));
        }
    }

    float* mine = partial + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        mine[c] = acc[c];
        mine[C + c] = acc[C + c];
    }
}

extern "C" __global__ void layernorm_backward_reduce_bf16(bf16* dweight, bf16* dbias,
                                                          const float* partial, int G, int C) {
    layernorm_backward_reduce_partials(dweight, dbias, partial, G, C);
}
