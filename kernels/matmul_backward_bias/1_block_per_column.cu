/*
title = "A block per column, shared-memory tree reduction"
changed = "The starting point: block oc sums column oc; its threads take rows tid, tid + block, ... and combine their partial sums by halving in shared memory."
why = """
The straightforward parallel sum: OC blocks, each reducing N values. It works for any size, but
every load of a warp touches 32 different rows, OC floats apart: 32 memory sectors of 32 bytes
for 128 useful bytes, so the kernel moves ~8x the data it needs unless neighbouring blocks
happen to share sectors in L2. The tree takes log2(block) steps, each with a __syncthreads().
"""
preconditions = []
block_sizes = [32, 64, 128, 256, 512, 1024]  # powers of two: the tree halves the block each step

[[launch]]
kernel = "matmul_backward_bias1"
grid = "OC"
block = "block_size"
shared = "4 * block_size"
args = ["dbias", "dout", "N", "OC"]
*/

extern "C" __global__ void matmul_backward_bias1(float* dbias, const float* dout, int N, int OC) {
    extern __shared__ float partial[];
    const int oc = blockIdx.x;
    const int tid = threadIdx.x;
    float sum = 0.0f;
    for (int row = tid; row < N; row += blockDim.x) sum += dout[(size_t)row * OC + oc];
    partial[tid] = sum;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    if (tid == 0) dbias[oc] += partial[0];
}
