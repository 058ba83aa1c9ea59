/*
title = "One element per thread, a shared-memory tree per block, one atomicAdd per block"
deterministic = false  # float atomicAdd: the sum's order, and so its last bits, vary from run to run
changed = "The starting point: each thread squares one gradient, the block sums its squares with a tree in shared memory, and thread 0 adds the block's sum to norm2 with atomicAdd (zeroed first)."
why = """
A reduction needs the partial sums of many threads to meet. Inside a block they meet in shared
memory (a halving tree, one __syncthreads() per level); across blocks the simplest meeting point
is one float in global memory that every block adds to atomically. Correct and parallel, but at
N = 124M and 256 threads that is ~490k atomics on one address, serialized in L2, and the order
they land in changes from run to run, so the last bits of norm2 do too.
"""
block_sizes = [64, 128, 256, 512, 1024]  # powers of two: the tree halves the block each level
# A single fp32 accumulator taking up to ~2M block sums of ~N * 1e-4 / blocks each: every add
# rounds at the ulp of the running total, a random walk of ~3e-5 relative (one sigma) at the classic size with 64-thread blocks.
tolerance = { rtol = 2e-4 }

[[launch]]
memset = "norm2"

[[launch]]
kernel = "global_norm1"
grid = "cdiv(N, block_size)"
block = "block_size"
shared = "4 * block_size"
args = ["norm2", "grads", "N"]
*/

extern "C" __global__ void global_norm1(float* norm2, const float* grads, int N) {
    extern __shared__ float partial[];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    float g = i < N ? grads[i] : 0.0f;  // threads past the end still take part in the tree
    partial[tid] = g * g;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(norm2, partial[0]);
}
