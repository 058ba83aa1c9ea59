/*
title = "32-column blocks: coalesced rows"
builds_on = 3
changed = "A block owns a stripe of 32 neighbouring columns: lane x reads column x, so a warp reads 128 contiguous bytes of one row; the blockDim.y row groups are combined through shared memory."
why = """
Versions 1-3 read a column top to bottom: every warp load touches 32 rows, 32 sectors for 128
useful bytes. Turning the mapping sideways makes each warp load one full, contiguous 128-byte
piece of a row, so every byte fetched is used: the kernel finally moves only the N*OC floats it
needs. Each thread keeps a running sum down its column (rows g, g + rows_per_block, ...); one
barrier, then the first warp adds up the row groups. The catch: only OC / 32 blocks (96 at
OC = 3072, 24 at OC = 768), too few to fill 132 SMs with loads.
"""
preconditions = []
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "matmul_backward_bias4"
grid = "cdiv(OC, 32)"
block = [32, "block_size // 32"]
shared = "4 * block_size"
args = ["dbias", "dout", "N", "OC"]
*/

extern "C" __global__ void matmul_backward_bias4(float* dbias, const float* dout, int N, int OC) {
    extern __shared__ float group_sums[];  // [blockDim.y][32]
    const int lane = threadIdx.x;          // column within the stripe
    const int group = threadIdx.y;         // which rows: group, group + blockDim.y, ...
    const int oc = blockIdx.x * 32 + lane;
    float sum = 0.0f;
    if (oc < OC) {
#pragma unroll 4
        for (int row = group; row < N; row += blockDim.y) sum += dout[(size_t)row * OC + oc];
    }
    group_sums[group * 32 + lane] = sum;
    __syncthreads();
    if (group == 0 && oc < OC) {
        float s = 0.0f;
        for (int g = 0; g < blockDim.y; g++) s += group_sums[g * 32 + lane];
        dbias[oc] += s;
    }
}
