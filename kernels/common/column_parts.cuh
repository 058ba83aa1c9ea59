// column_parts.cuh: a block's 32 columns, each summed in eight parts, the parts added in a fixed order.
//
// add_eight_parts(mine, parts)
//   For a (32, 8) block: lane threadIdx.x owns column threadIdx.x of the block's 32, and
//   threadIdx.y says which eighth of the column's terms the thread has summed into `mine`
//   (e.g. rows threadIdx.y, threadIdx.y + 8, ... of a matrix of partial sums). Returns the
//   column's total, the eight parts added in order of threadIdx.y (the same bits every run), to
//   the threads with threadIdx.y == 0 (0 to the others). parts: 8 * 32 floats of shared memory.
//   Every thread of the block must call it (it holds a __syncthreads).
//   Used by matmul_backward_dgelu 11 (its slices' column sums), qkv_bias_backward 2 and 3, and
//   matmul_backward_bias 8.
//
// add_warps_eight_columns(acc, lane_sums)
//   For a block of whole warps laid out along threadIdx.x, where lane l of every warp has summed
//   the same eight columns (its own rows of them) into acc[0..7]: afterwards warp 0's acc holds
//   the block's sums of those columns, the warps' sums added in warp order (the same bits every
//   run); the other warps' acc are unchanged. lane_sums: blockDim.x * 8 floats of shared memory
//   ([warp][lane][column]). Every thread of the block must call it (it holds a __syncthreads).
//   Used by matmul_backward_bias 8 and 9 and qkv_bias_backward 2 and 3 (eight bf16 columns a
//   lane, one 16-byte load a row).
//
// store_eight(dst, v)
//   v[0..7] to dst[0..7] as two 16-byte stores; dst 16-byte aligned.

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

__device__ __forceinline__ void add_warps_eight_columns(float (&acc)[8], float* lane_sums) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
    for (int j = 0; j < 8; j++) lane_sums[(warp * 32 + lane) * 8 + j] = acc[j];
    __syncthreads();
    if (warp == 0) {
        for (int w = 1; w < warps; w++) {
#pragma unroll
            for (int j = 0; j < 8; j++) acc[j] += lane_sums[(w * 32 + lane) * 8 + j];
        }
    }
}

__device__ __forceinline__ void store_eight(float* dst, const float (&v)[8]) {
    float4* d = reinterpret_cast<float4*>(dst);
    d[0] = make_float4(v[0], v[1], v[2], v[3]);
    d[1] = make_float4(v[4], v[5], v[6], v[7]);
}

#endif  // KERNELS_COMMON_COLUMN_PARTS_CUH
