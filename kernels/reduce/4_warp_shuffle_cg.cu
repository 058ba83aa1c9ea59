/*
title = "Warp shuffles with cooperative groups instead of the shared-memory tree"
builds_on = 3
deterministic = false  # float atomicAdd: the sum's order, and so its last bits, vary from run to run
changed = "Each warp reduces its 32 values with cg::reduce (register shuffles); only the per-warp sums go through shared memory, and the first warp reduces them: two __syncthreads() in place of log2(block_size)."
why = """
In version 3 the last five tree levels run inside one warp, yet each still pays a shared-memory
store, load and barrier. Within a warp, __shfl_xor_sync passes registers between lanes directly;
cooperative groups' cg::reduce wraps that (on sm_80+ it can use the warp's reduction hardware
for integers, shuffles for floats). A block of 1024 threads now needs 32 shared-memory slots
and two barriers, not a 4 KB tree and ten barriers.
"""
block_sizes = [64, 128, 256, 512, 1024]
# The same single atomic accumulator as version 3: see there.
tolerance = { rtol = 1e-4 }

[[launch]]
memset = "out"

[[launch]]
kernel = "reduce4"
grid = "cdiv(N, 2 * block_size)"
block = "block_size"
args = ["out", "inp", "N"]
*/
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void reduce4(float* out, const float* inp, int N) {
    __shared__ float per_warp[32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    size_t i = (size_t)blockIdx.x * 2 * blockDim.x + threadIdx.x;
    // Every thread takes part (past the end with zeros): the warp reductions need all 32 lanes.
    float v = (i < N ? inp[i] : 0.0f) + (i + blockDim.x < N ? inp[i + blockDim.x] : 0.0f);
    v = cg::reduce(warp, v, cg::plus<float>());
    if (warp.thread_rank() == 0) per_warp[warp.meta_group_rank()] = v;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        v = warp.thread_rank() < warp.meta_group_size() ? per_warp[warp.thread_rank()] : 0.0f;
        v = cg::reduce(warp, v, cg::plus<float>());
        if (warp.thread_rank() == 0) atomicAdd(out, v);
    }
}
