/*
title = "A warp per row; dweight and dbias gathered per block in shared memory, flushed with atomics"
builds_on = 1
deterministic = false  # float atomicAdd: the sum's order, and so its last bits, vary from run to run
changed = "Each warp owns a row (coalesced, shuffle reductions); the block accumulates its rows' column sums in shared memory and adds them to global memory once per block."
why = """
Two changes. A warp per row makes every load coalesced (32 lanes read 32 neighbouring floats) and
the two row means become warp shuffles. And the column sums stop hammering global memory: the
block's warps add into a shared-memory copy of dweight and dbias (shared atomics are cheap, and
the lanes of one warp touch 32 different addresses, so only warps of the same block ever
collide), then the block adds that copy to global memory with one atomic per column. Global
atomics drop from 2*N*C to 2*C per block, a factor of block_size/32 (the rows per block).
The order of the floating-point additions still depends on scheduling: not deterministic.
"""
# rows larger than this would not fit the 2*C floats of shared memory on every GPU (A100: 163 KB)
preconditions = ["C <= 16384"]
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "layernorm_backward2"
grid = "cdiv(N, block_size // 32)"
block = "block_size"
shared = "8 * C"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]
*/

#include "reduce.cuh"  // warp_sum: every lane gets the warp's total

extern "C" __global__ void layernorm_backward2(float* dinp, float* dweight, float* dbias,
                                               const float* dout, const float* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
    extern __shared__ float block_acc[];  // [0, C): dbias, [C, 2C): dweight
    float* acc_db = block_acc;
    float* acc_dw = block_acc + C;
    for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) block_acc[i] = 0.0f;
    __syncthreads();

    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row < N) {  // uniform across the warp: the shuffles below see all 32 lanes
        const float* dy = dout + (size_t)row * C;
        const float* x = inp + (size_t)row * C;
        float* dx = dinp + (size_t)row * C;
        float m = mean[row], s = rstd[row];

        float sum_dn = 0.0f, sum_dnx = 0.0f;
        for (int i = lane; i < C; i += 32) {
            float xhat = (x[i] - m) * s;
            float dn = weight[i] * dy[i];
            sum_dn += dn;
            sum_dnx += dn * xhat;
        }
        float mean_dn = warp_sum(sum_dn) / C;
        float mean_dnx = warp_sum(sum_dnx) / C;

        for (int i = lane; i < C; i += 32) {
            float g = dy[i];
            float xhat = (x[i] - m) * s;
            float dn = weight[i] * g;
            atomicAdd(acc_db + i, g);
            atomicAdd(acc_dw + i, g * xhat);
            dx[i] += s * (dn - mean_dn - xhat * mean_dnx);
        }
    }
    __syncthreads();  // every warp of the block has added its row
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        atomicAdd(dbias + i, acc_db[i]);
        atomicAdd(dweight + i, acc_dw[i]);
    }
}
