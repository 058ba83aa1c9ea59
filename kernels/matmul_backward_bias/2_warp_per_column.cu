/*
title = "A warp per column, shuffle reduction"
builds_on = 1
changed = "Each warp sums one column; its 32 lanes combine their partial sums with register shuffles instead of shared memory."
why = """
A warp reduction needs no shared memory and no __syncthreads(): five __shfl_xor_sync steps. A
block now holds several columns (block_size / 32), so there are fewer, fuller blocks, and the
columns of one block are neighbours: their strided loads land in the same 32-byte sectors at
about the same time, which L1 and L2 can share. The loads are still 32 rows apart within a warp.
"""
preconditions = []
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "matmul_backward_bias2"
grid = "cdiv(OC * 32, block_size)"
block = "block_size"
args = ["dbias", "dout", "N", "OC"]
*/

extern "C" __global__ void matmul_backward_bias2(float* dbias, const float* dout, int N, int OC) {
    const int oc = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (oc >= OC) return;  // the whole warp leaves: oc is the same for its 32 lanes
    float sum = 0.0f;
    for (int row = lane; row < N; row += 32) sum += dout[(size_t)row * OC + oc];
    // Written out on purpose (the lesson); elsewhere this is warp_sum from kernels/common/reduce.cuh.
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffff, sum, offset);
    if (lane == 0) dbias[oc] += sum;
}
