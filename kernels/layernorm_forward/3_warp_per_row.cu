/*
title = "A warp per row, cooperative-groups reductions, streaming loads and stores"
builds_on = 2
changed = "One kernel again: each warp owns a row and reduces with cg::reduce (register shuffles) instead of shared memory."
why = """
A warp's 32 lanes read 32 consecutive floats (coalesced), and a warp reduction needs no shared
memory and no __syncthreads(): cg::reduce compiles to five shuffles. One launch instead of three
saves two round trips through memory for mean and rstd. The second and third passes over the row
mostly hit L1/L2; the final read and the output use the streaming hints __ldcs/__stcs ("used
once, do not keep in cache"), so they do not evict data that is still to be used.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "layernorm_forward3"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]
*/
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void layernorm_forward3(float* out, float* mean, float* rstd,
                                              const float* inp, const float* weight,
                                              const float* bias, int N, int C, float eps) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int row = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (row >= N) return;  // the whole warp leaves together: row is the same for all its lanes
    const float* x = inp + (size_t)row * C;
    int lane = warp.thread_rank();

    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += x[i];
    float m = cg::reduce(warp, sum, cg::plus<float>()) / C;

    float sq = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = x[i] - m;
        sq += d * d;
    }
    float s = rsqrtf(cg::reduce(warp, sq, cg::plus<float>()) / C + eps);

    if (lane == 0) {
        __stcs(mean + row, m);
        __stcs(rstd + row, s);
    }
    float* o = out + (size_t)row * C;
    for (int i = lane; i < C; i += 32) {
        float n = s * (__ldcs(x + i) - m);
        __stcs(o + i, n * weight[i] + bias[i]);
    }
}
