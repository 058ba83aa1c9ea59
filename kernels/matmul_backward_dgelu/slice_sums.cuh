// slice_sums.cuh: matmul_backward_dgelu 4 and 5's last step, shared by both.
//
// add_slice_sums(dpre_bias, partial, C, slices)
//   dpre_bias[c] += the slices' fp32 column sums partial[k * C + c], added in slice order (the same
//   bits every run) and rounded to bf16 once. One thread a column; call with a 1-D grid over C.

#ifndef KERNELS_MATMUL_BACKWARD_DGELU_SLICE_SUMS_CUH
#define KERNELS_MATMUL_BACKWARD_DGELU_SLICE_SUMS_CUH

#include "bf16.cuh"

__device__ __forceinline__ void add_slice_sums(bf16* dpre_bias, const float* partial, int C, int slices) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.f;
    for (int k = 0; k < slices; ++k) s += partial[(size_t)k * C + c];
    dpre_bias[c] = to_bf16(to_float(dpre_bias[c]) + s);
}

#endif  // KERNELS_MATMUL_BACKWARD_DGELU_SLICE_SUMS_CUH
