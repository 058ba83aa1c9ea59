// gelu_gemm.cuh: matmul_forward_gelu 7 and 8's kernel: gemm_wgmma.cuh's main loop, then an
// epilogue that writes a consumer warpgroup's 64 x BN accumulators plus the bias as pre and as
// gelu(pre) through shared memory. Version 7 runs it with one block a tile (CLUSTER = 1), 8 with
// pairs of blocks sharing B (CLUSTER = 2).
//
// gelu_gemm<BN, STAGES, CLUSTER, ROWS>(map_inp, map_weight, out, pre, bias, M, N, K): the kernel's
// body. Its dynamic shared memory: the ring's stages and barriers, then ROWS staged rows per
// consumer warpgroup: 1024 + STAGES * (128 + BN) * 128 + 16 * STAGES + 2 * ROWS * 2 * staged_row<BN>().
// ROWS = 32 stages a warpgroup's 64 rows in two passes (half the space, twice the barriers).
//
// store_rows<BN, ROWS, GELU>(dst, d, bias, staged, row0, col0, M, N, w): one output of consumer
// warpgroup w's 64 rows (gemm_wgmma.cuh's accumulator layout), ROWS at a time: the fragments (x =
// d + bias, or its GELU) into the warpgroup's staging rows at shared address `staged` (ROWS rows
// of staged_row<BN>() bf16), then those rows (of row0 .. row0 + 63), columns col0 .. col0 + BN - 1,
// of dst (M x N, row-major) copied out in 16-byte pieces, a row's consecutive pieces by
// consecutive threads (N % 8 == 0: a piece is all in or all out).
// A staged row is BN + 8 bf16, 400 bytes at BN = 192 (100 words): rows g and g + 1 sit four banks
// apart, so a warp's 4-byte fragment writes (8 rows x 4 lanes) hit 32 different banks. The
// warpgroup's named barrier (1 + w) orders the writes before the copy and the copy before the
// next writes.

#ifndef KERNELS_MATMUL_FORWARD_GELU_GELU_GEMM_CUH
#define KERNELS_MATMUL_FORWARD_GELU_GELU_GEMM_CUH

#include "bf16.cuh"
#include "gelu.cuh"         // gelu
#include "gemm_wgmma.cuh"   // GemmRing, TmaMap
#include "mma.cuh"          // pack_bf16x2, smem_addr

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int BN>
__host__ __device__ constexpr int staged_row() { return BN + 8; }  // a staged row, in bf16

template <int BN, int ROWS, bool GELU>
__device__ __forceinline__ void store_rows(bf16* dst, const float (&d)[BN / 2], const bf16* bias, uint32_t staged,
                                           int row0, int col0, int M, int N, int w) {
    static_assert(ROWS == 64 || ROWS == 32, "the warpgroup's 64 rows in one pass, or in two");
    constexpr int ROWB = staged_row<BN>();
    const int lane = threadIdx.x % 128, q = lane / 32, g = lane % 32 / 4, t = lane % 4;
#pragma unroll
    for (int pass = 0; pass < 64 / ROWS; pass++) {
        bool mine = true;  // this warp's 16 rows are in this pass's
        if constexpr (ROWS < 64) mine = 16 * q / ROWS == pass;
        if (mine) {
#pragma unroll
            for (int j = 0; j < BN / 8; j++) {
                const int c = 8 * j + 2 * t;
                float2 b = make_float2(0.0f, 0.0f);
                if (col0 + c < N) b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + col0 + c));
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float x0 = d[4 * j + 2 * h] + b.x, x1 = d[4 * j + 2 * h + 1] + b.y;
                    if (GELU) x0 = gelu(x0), x1 = gelu(x1);
                    const uint32_t at = staged + 2 * ((16 * q + g + 8 * h - pass * ROWS) * ROWB + c);
                    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(at), "r"(pack_bf16x2(x0, x1)) : "memory");
                }
            }
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
        constexpr int PIECES = BN / 8;  // 16-byte pieces a row
#pragma unroll 4
        for (int i = lane; i < ROWS * PIECES; i += 128) {
            const int r = i / PIECES, k = i % PIECES, row = row0 + pass * ROWS + r, col = col0 + 8 * k;
            uint4 v;
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(staged + 2 * (r * ROWB + 8 * k)));
            if (row < M && col < N) *reinterpret_cast<uint4*>(dst + (size_t)row * N + col) = v;
        }
        asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory");
    }
}

template <int BN, int STAGES, int CLUSTER, int ROWS = 64>
__device__ __forceinline__ void gelu_gemm(const TmaMap* map_inp, const TmaMap* map_weight, bf16* out, bf16* pre,
                                          const bf16* bias, int M, int N, int K) {
    extern __shared__ float4 smem4[];
    GemmRing<BN, STAGES, CLUSTER> ring;
    ring.init(smem_addr(smem4));
    if (threadIdx.x < 128) {  // warpgroup 0: the producer, one thread of it
        if (threadIdx.x == 0) ring.produce(map_inp, map_weight, M, N, K);
    } else {
        const int w = threadIdx.x / 128 - 1;  // this consumer warpgroup's 64 rows of a tile
        const uint32_t staged = ring.end() + w * ROWS * staged_row<BN>() * 2;
        float d[BN / 2];
        int it = 0;
        for (int p = ring.first(); p < ring.count(M, N); p += ring.stride()) {
            ring.consume(d, w, K, it);
            int row0, col0;
            ring.origin(p, M, N, row0, col0);
            row0 += 64 * w;
            store_rows<BN, ROWS, false>(pre, d, bias, staged, row0, col0, M, N, w);
            store_rows<BN, ROWS, true>(out, d, bias, staged, row0, col0, M, N, w);
        }
    }
    ring.finish();
}

#endif

#endif  // KERNELS_MATMUL_FORWARD_GELU_GELU_GEMM_CUH
