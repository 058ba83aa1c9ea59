// gelu_epilogue.cuh: matmul_forward_gelu 7 and 8's epilogue: a consumer warpgroup's 64 x BN
// accumulators plus the bias, written as pre and as gelu(pre) through shared memory.
//
// store_rows<BN, GELU>(dst, d, bias, staged, row0, col0, M, N, w): one output of consumer warpgroup
// w's 64 rows (gemm_wgmma.cuh's accumulator layout): the fragments (x = d + bias, or its GELU)
// into the warpgroup's staging rows at shared address `staged` (64 rows of staged_row<BN>() bf16), then rows row0 ..
// row0 + 63, columns col0 .. col0 + BN - 1 of dst (M x N, row-major) copied out in 16-byte pieces,
// a row's consecutive pieces by consecutive threads (N % 8 == 0: a piece is all in or all out).
// A staged row is BN + 8 bf16, 400 bytes at BN = 192 (100 words): rows g and g + 1 sit four banks
// apart, so a warp's 4-byte fragment writes (8 rows x 4 lanes) hit 32 different banks. The
// warpgroup's named barrier (1 + w) orders the writes before the copy and the copy before the
// next writes.

#ifndef KERNELS_MATMUL_FORWARD_GELU_GELU_EPILOGUE_CUH
#define KERNELS_MATMUL_FORWARD_GELU_GELU_EPILOGUE_CUH

#include "bf16.cuh"
#include "gelu.cuh"  // gelu
#include "mma.cuh"   // pack_bf16x2

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int BN>
__host__ __device__ constexpr int staged_row() { return BN + 8; }  // a staged row, in bf16

template <int BN, bool GELU>
__device__ __forceinline__ void store_rows(bf16* dst, const float (&d)[BN / 2], const bf16* bias, uint32_t staged,
                                           int row0, int col0, int M, int N, int w) {
    constexpr int ROWB = staged_row<BN>();
    const int lane = threadIdx.x % 128, q = lane / 32, g = lane % 32 / 4, t = lane % 4;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int c = 8 * j + 2 * t;
        float2 b = make_float2(0.0f, 0.0f);
        if (col0 + c < N) b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + col0 + c));
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float x0 = d[4 * j + 2 * h] + b.x, x1 = d[4 * j + 2 * h + 1] + b.y;
            if (GELU) x0 = gelu(x0), x1 = gelu(x1);
            const uint32_t at = staged + 2 * ((16 * q + g + 8 * h) * ROWB + c);
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(at), "r"(pack_bf16x2(x0, x1)) : "memory");
        }
    }
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
    constexpr int PIECES = BN / 8;  // 16-byte pieces a row
#pragma unroll 4
    for (int i = lane; i < 64 * PIECES; i += 128) {
        const int r = i / PIECES, k = i % PIECES, row = row0 + r, col = col0 + 8 * k;
        uint4 v;
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(staged + 2 * (r * ROWB + 8 * k)));
        if (row < M && col < N) *reinterpret_cast<uint4*>(dst + (size_t)row * N + col) = v;
    }
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
}
#endif

#endif  // KERNELS_MATMUL_FORWARD_GELU_GELU_EPILOGUE_CUH
