// column_parts.cuh: a block's 32 columns, each summed in eight parts, the parts added in a fixed order.
//
// add_eight_parts(mine, parts)
//   For a (32, 8) block: lane threadIdx.x owns column threadIdx.x of the block's 32, and
//   threadIdx.y says which eighth of the column's terms the thread has summed into `mine`
//   (e.g. rows threadIdx.y, threadIdx.y + 8, ... of a matrix of partial sums). Returns the
//   column's total, the eight parts added in order of threadIdx.y (the same bits every run), to
//   the threads with threadIdx.y == 0 (0 to the others). parts: 8 * 32 floats of shared memory.
//   Every thread of the block must call it (it holds a __syncthreads).
//   Used by matmul_backward_dgelu 11 (its slices' column sums) and qkv_bias_backward 2.

#ifndef KERNELS_COMMON_COLUMN_PARTS_CUH
#define KERNELS_COMMON_COLUMN_PARTS_CUH

__device__ __forceinline__ float add_eight_parts(float mine, float* parts) {
    parts[threadIdx.y * 32 + threadIdx.x] = mine;
    __syncthreads();
    float total = 0.0f;
    if (threadIdx.y == 0) {
#pragma unroll
        for (int p = 0; p < 8; p++) total += parts[p * 32 + threadIdx.x];
    }
    return total;
}

#endif  // KERNELS_COMMON_COLUMN_PARTS_CUH
