// gemm_tma.cuh: a whole Hopper GEMM kernel body (sm_90a), D = A B^T + bias, optionally with the
// GELU: gemm_wgmma.cuh's main loop, then an epilogue whose stores the copy engine makes.
// matmul_forward 9 (the bias) and matmul_forward_gelu 10, 11 and 15 (pre and gelu(pre)) are built on
// gemm_tma; matmul_forward 10 and matmul_forward_gelu 12-14 and 16 on gemm_tma_pingpong, and
// matmul_backward_dgelu 8-10 on gemm_tma_dgelu (its epilogue the GELU's backward; below).
//
// gemm_tma<BN, STAGES, BUFFERS, GELU, GIVE_REGS>(map_a, map_b, map_out, map_pre, bias, M, N, K):
//   pre = A B^T + bias (M x N, row-major; A M x K, B N x K, both row-major bf16), written through
//   map_pre; with GELU also out = gelu(pre) through map_out (computed from the fp32 sum, not from
//   pre's rounding). map_a's box is 128 x 64, map_b's BN x 64, map_out's and map_pre's 64 x 64.
//
// The epilogue of a consumer warpgroup (64 rows of a 128 x BN tile): it adds the bias to its
// accumulators in place, writes them rounded to bf16 into shared memory as BN / 64 boxes of
// 64 x 64 (128-byte rows in the TMA's 128-byte swizzle, 8 KB each, 1024-aligned), and its first
// thread hands the boxes to the copy engine (tma_store_2d), which writes them to global memory,
// and nothing past M or N, while the warpgroup goes on. With GELU it then computes gelu(pre) into
// registers of its own while pre's boxes go out and stages and stores those the same way: in the
// same staging area once the engine has read pre's boxes (BUFFERS = 1), or in a second one
// (BUFFERS = 2). Before the next tile's writes, the issuing thread waits until the engine has read
// the last boxes; before the block ends, until every store is performed.
//
// GIVE_REGS: the producer warpgroup gives registers back (setmaxnreg: 40 for it, 232 for each
// consumer), for tiles whose accumulators and gelu(pre) words outgrow 168 (BN = 256).
//
// Dynamic shared memory: 1024 + STAGES * (128 + BN) * 128 (the ring) + 1024 (its barriers, padded
// so the staging stays 1024-aligned) + 2 * BUFFERS * BN * 128 (the staging of two warpgroups).
//
// The staged layout: the accumulator pair (d[4 j + 2 h], d[4 j + 2 h + 1]) of row r = 16 q + g +
// 8 h, columns 8 j + 2 t and 8 j + 2 t + 1 (gemm_wgmma.cuh's layout) lies in box j / 8, row r,
// 16-byte chunk (j % 8) ^ (r % 8) = (j % 8) ^ g (the swizzle), bytes 4 t of it: a warp's 32
// four-byte writes for one (j, h) fall in 32 different banks.

#ifndef KERNELS_COMMON_GEMM_TMA_CUH
#define KERNELS_COMMON_GEMM_TMA_CUH

#include "bf16.cuh"
#include "gelu.cuh"         // gelu_tanh, gelu_grad, gelu_grad_tanh
#include "gemm_wgmma.cuh"   // GemmRing, TmaMap, tma_store_2d, bulk_*
#include "mma.cuh"          // pack_bf16x2, smem_addr

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Where the pair of accumulators (j, h) of row block `half` (64 rows each) goes in a staging area
// of boxes ROWS rows high.
template <int ROWS = 64>
__device__ __forceinline__ uint32_t staged_at(uint32_t area, int j, int h, int q, int g, int t, int half = 0) {
    const int r = 64 * half + 16 * q + g + 8 * h;
    return area + (j / 8) * (ROWS * 128) + r * 128 + (((j % 8) ^ g) << 4) + 4 * t;
}

// One output's boxes (ROWS x 64 each) from a staging area to rows row0 .. row0 + ROWS - 1, columns
// col0 .. col0 + BN - 1, as one bulk group (boxes wholly past M or N are not issued).
template <int BN, int ROWS = 64>
__device__ __forceinline__ void store_boxes(const TmaMap* map, uint32_t area, int row0, int col0, int M, int N) {
    if (row0 < M) {
#pragma unroll
        for (int b = 0; b < BN / 64; b++)
            if (col0 + 64 * b < N) tma_store_2d(map, col0 + 64 * b, row0, area + b * (ROWS * 128));
    }
    bulk_commit();
}

__device__ __forceinline__ void warpgroup_sync(int w) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + w) : "memory"); }

// Column pair j's bias (bx, by) added to its accumulators in both rows (in place), the sums staged as bf16.
template <int BN, int ROWS>
__device__ __forceinline__ void stage_pair_with_bias(float (&d)[BN / 2], int j, float bx, float by, uint32_t area,
                                                     int half, int q, int g, int t) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        d[4 * j + 2 * h] += bx;
        d[4 * j + 2 * h + 1] += by;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(staged_at<ROWS>(area, j, h, q, g, t, half)),
                     "r"(pack_bf16x2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1])) : "memory");
    }
}

// The bias added to one row block's accumulators (in place) and the sums staged as bf16.
template <int BN, int ROWS>
__device__ __forceinline__ void stage_with_bias(float (&d)[BN / 2], const bf16* bias, uint32_t area, int col0, int N,
                                                int half, int q, int g, int t) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int c = col0 + 8 * j + 2 * t;
        const float2 b = c < N ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(bias + c))
                               : make_float2(0.0f, 0.0f);
        stage_pair_with_bias<BN, ROWS>(d, j, b.x, b.y, area, half, q, g, t);
    }
}

// The bias pairs of a thread's columns (8 j + 2 t and 8 j + 2 t + 1 of the tile), packed bf16
// (zero past N): loaded before the tile's products, so that their latency hides under them.
template <int BN>
__device__ __forceinline__ void load_bias_pairs(uint32_t (&b)[BN / 8], const bf16* bias, int col0, int N, int t) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int c = col0 + 8 * j + 2 * t;
        b[j] = c < N ? *reinterpret_cast<const uint32_t*>(bias + c) : 0u;
    }
}

// stage_with_bias with the bias pairs already in registers (load_bias_pairs).
template <int BN, int ROWS>
__device__ __forceinline__ void stage_with_bias_pairs(float (&d)[BN / 2], const uint32_t (&b)[BN / 8], uint32_t area,
                                                      int half, int q, int g, int t) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
        stage_pair_with_bias<BN, ROWS>(d, j, __uint_as_float(b[j] << 16), __uint_as_float(b[j] & 0xffff0000u), area,
                                       half, q, g, t);
}

// One row block's packed pairs (word 2 j + h: the pair (d[4 j + 2 h], d[4 j + 2 h + 1])) staged.
template <int BN, int ROWS>
__device__ __forceinline__ void stage_words(const uint32_t (&words)[BN / 4], uint32_t area, int half, int q, int g,
                                            int t) {
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(staged_at<ROWS>(area, j, h, q, g, t, half)),
                         "r"(words[2 * j + h]) : "memory");
}

template <int BN, int STAGES, int BUFFERS, bool GELU, bool GIVE_REGS = false>
__device__ __forceinline__ void gemm_tma(const TmaMap* map_a, const TmaMap* map_b, const TmaMap* map_out,
                                         const TmaMap* map_pre, const bf16* bias, int M, int N, int K) {
    static_assert(BN % 64 == 0, "whole 64-column boxes");
    static_assert(BUFFERS == 1 || (GELU && BUFFERS == 2), "one staging area, or one an output");
    extern __shared__ float4 smem4[];
    GemmRing<BN, STAGES, 1> ring;
    ring.init(smem_addr(smem4));
    if (threadIdx.x < 128) {  // warpgroup 0: the producer, one thread of it
        if constexpr (GIVE_REGS) setmaxnreg_dec<40>();
        if (threadIdx.x == 0) ring.produce(map_a, map_b, M, N, K);
    } else {
        if constexpr (GIVE_REGS) setmaxnreg_inc<232>();
        const int w = threadIdx.x / 128 - 1, lane = threadIdx.x % 128, q = lane / 32, g = lane % 32 / 4, t = lane % 4;
        const bool issuer = lane == 0;  // this warpgroup's stores go through its first thread
        const uint32_t staging = (ring.end() + 1023) & ~1023u;
        const uint32_t area_pre = staging + w * BUFFERS * BN * 128, area_out = area_pre + (BUFFERS - 1) * BN * 128;
        if (issuer) {
            tensormap_acquire(map_pre);
            if (GELU) tensormap_acquire(map_out);
        }
        float d[BN / 2];
        int it = 0;
        for (int p = ring.first(); p < ring.count(M, N); p += ring.stride()) {
            ring.consume(d, w, K, it);
            int row0, col0;
            ring.origin(p, M, N, row0, col0);
            row0 += 64 * w;
            if (issuer) bulk_wait_read<0>();  // the last tile's boxes have been read out
            warpgroup_sync(w);
            stage_with_bias<BN, 64>(d, bias, area_pre, col0, N, 0, q, g, t);
            fence_proxy_async();
            warpgroup_sync(w);
            if (issuer) store_boxes<BN>(map_pre, area_pre, row0, col0, M, N);
            if constexpr (GELU) {
                // gelu(pre), packed, while pre's boxes go out (into registers of its own: written
                // into d, whose registers the next tile's wgmma own, ptxas serialises the wgmma, C7520)
                uint32_t gp[BN / 4];
#pragma unroll
                for (int i = 0; i < BN / 2; i += 2) gp[i / 2] = pack_bf16x2(gelu_tanh(d[i]), gelu_tanh(d[i + 1]));
                if (BUFFERS == 1) {
                    if (issuer) bulk_wait_read<0>();
                    warpgroup_sync(w);
                }
                stage_words<BN, 64>(gp, area_out, 0, q, g, t);
                fence_proxy_async();
                warpgroup_sync(w);
                if (issuer) store_boxes<BN>(map_out, area_out, row0, col0, M, N);
            }
        }
        if (issuer) bulk_wait<0>();  // every store performed before the block's shared memory goes
    }
    ring.finish();
}

// gemm_tma_pingpong<BN, STAGES, GROUP, GELU, EARLY_BIAS>: gemm_tma's product and outputs, each consumer
// warpgroup taking whole 128 x BN tiles, the block's tiles in turn (GemmRing's PINGPONG): while one
// warpgroup runs its epilogue the other's products keep the tensor cores busy, since the ring,
// filled in the block's tile order, hands a warpgroup its next tile's stages only as the other
// finishes with its own. A warpgroup holds 2 x BN / 2 accumulators (and, with GELU, BN / 2 packed
// words of gelu(pre)): more than 384 threads may have, so the producer warpgroup gives registers
// back (setmaxnreg: 40 for it, 232 for each consumer). Tiles go in groups of GROUP row blocks
// (GemmRing::origin). Maps of pre and out: box 128 x 64. EARLY_BIAS: each thread loads its
// columns' bias into registers before a tile's products (load_bias_pairs), not between the
// epilogue's staging stores. CLUSTER = 2: the kernel runs in clusters of two blocks
// (__cluster_dims__(2, 1, 1), an even grid) that take vertically adjacent tiles and share B's
// tiles by multicast (gemm_wgmma.cuh; map_b's box is then BN / 2 rows), GROUP counting pairs.
// Dynamic shared memory: 1024 + STAGES * (128 + BN) * 128 + 1024 + 2 * 128 * BN * 2.
template <int BN, int STAGES, int GROUP, bool GELU, bool EARLY_BIAS = false, int CLUSTER = 1>
__device__ __forceinline__ void gemm_tma_pingpong(const TmaMap* map_a, const TmaMap* map_b, const TmaMap* map_out,
                                                  const TmaMap* map_pre, const bf16* bias, int M, int N, int K) {
    static_assert(BN % 64 == 0, "whole 64-column boxes");
    extern __shared__ float4 smem4[];
    GemmRing<BN, STAGES, CLUSTER, GROUP, true> ring;
    ring.init(smem_addr(smem4));
    if (threadIdx.x < 128) {  // warpgroup 0: the producer, one thread of it
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) ring.produce(map_a, map_b, M, N, K);
    } else {
        setmaxnreg_inc<232>();
        const int w = threadIdx.x / 128 - 1, lane = threadIdx.x % 128, q = lane / 32, g = lane % 32 / 4, t = lane % 4;
        const bool issuer = lane == 0;  // this warpgroup's stores go through its first thread
        const uint32_t area = ((ring.end() + 1023) & ~1023u) + w * 128 * BN * 2;
        if (issuer) {
            tensormap_acquire(map_pre);
            if (GELU) tensormap_acquire(map_out);
        }
        const int ksteps = (K + ring.BK - 1) / ring.BK;
        float lo[BN / 2], hi[BN / 2];
        int it = w * ksteps, n = 0;  // the block's k-steps before this warpgroup's first; its tiles so far
        for (int p = ring.first() + w * ring.stride(); p < ring.count(M, N); p += 2 * ring.stride(), n++) {
            int row0, col0;
            uint32_t bias_pairs[BN / 8];
            if constexpr (EARLY_BIAS) {
                ring.origin(p, M, N, row0, col0);
                load_bias_pairs<BN>(bias_pairs, bias, col0, N, t);
            }
            ring.consume_tile(lo, hi, K, it, w, n);
            it += ksteps;  // the other warpgroup's tile
            if constexpr (!EARLY_BIAS) ring.origin(p, M, N, row0, col0);
            if (issuer) bulk_wait_read<0>();  // the last tile's boxes have been read out
            warpgroup_sync(w);
            if constexpr (EARLY_BIAS) {
                stage_with_bias_pairs<BN, 128>(lo, bias_pairs, area, 0, q, g, t);
                stage_with_bias_pairs<BN, 128>(hi, bias_pairs, area, 1, q, g, t);
            } else {
                stage_with_bias<BN, 128>(lo, bias, area, col0, N, 0, q, g, t);
                stage_with_bias<BN, 128>(hi, bias, area, col0, N, 1, q, g, t);
            }
            fence_proxy_async();
            warpgroup_sync(w);
            if (issuer) store_boxes<BN, 128>(map_pre, area, row0, col0, M, N);
            if constexpr (GELU) {
                uint32_t gp_lo[BN / 4], gp_hi[BN / 4];  // gelu(pre) packed, each row block's
#pragma unroll
                for (int i = 0; i < BN / 2; i += 2) {
                    gp_lo[i / 2] = pack_bf16x2(gelu_tanh(lo[i]), gelu_tanh(lo[i + 1]));
                    gp_hi[i / 2] = pack_bf16x2(gelu_tanh(hi[i]), gelu_tanh(hi[i + 1]));
                }
                if (issuer) bulk_wait_read<0>();
                warpgroup_sync(w);
                stage_words<BN, 128>(gp_lo, area, 0, q, g, t);
                stage_words<BN, 128>(gp_hi, area, 1, q, g, t);
                fence_proxy_async();
                warpgroup_sync(w);
                if (issuer) store_boxes<BN, 128>(map_out, area, row0, col0, M, N);
            }
        }
        if (issuer) bulk_wait<0>();  // every store performed before the block's shared memory goes
    }
    ring.finish();
}

template <bool TANH>
__device__ __forceinline__ float gelu_grad_of(float x) { return TANH ? gelu_grad_tanh(x) : gelu_grad(x); }

// One row block's dpre in place of its pre: the pre pair staged where the accumulator pair (j, h)
// goes (word k = 2 j + h) becomes gelu'(pre) * the pair, rounded to bf16, and cs[2 j + e] adds the
// rounded values (column 8 j + 2 t + e; the bias gradient sums dpre as it is written). Words go in
// batches of W: a batch's W loads, then its arithmetic, then its W stores. A load may not pass a
// store to the same memory, and the compiler cannot prove that the swizzled addresses differ, so
// with W = 1 each word's load waits for the last word's store and a warp's chain of 32 loads,
// gelu's and stores a row block runs at latency, not at throughput.
template <int BN, bool TANH, int W = 1>
__device__ __forceinline__ void dgelu_in_place(const float (&d)[BN / 2], uint32_t area, int half, int q, int g, int t,
                                               float (&cs)[BN / 4]) {
    static_assert((BN / 4) % W == 0, "whole batches");
#pragma unroll
    for (int k0 = 0; k0 < BN / 4; k0 += W) {
        uint32_t p[W];
#pragma unroll
        for (int i = 0; i < W; i++)
            asm volatile("ld.shared.u32 %0, [%1];\n"
                         : "=r"(p[i]) : "r"(staged_at<128>(area, (k0 + i) / 2, (k0 + i) % 2, q, g, t, half)) : "memory");
#pragma unroll
        for (int i = 0; i < W; i++) {
            const int k = k0 + i;
            const float lo = gelu_grad_of<TANH>(__uint_as_float(p[i] << 16)) * d[2 * k];
            const float hi = gelu_grad_of<TANH>(__uint_as_float(p[i] & 0xffff0000u)) * d[2 * k + 1];
            p[i] = pack_bf16x2(lo, hi);
            cs[k & ~1] += __uint_as_float(p[i] << 16);
            cs[(k & ~1) + 1] += __uint_as_float(p[i] & 0xffff0000u);
        }
#pragma unroll
        for (int i = 0; i < W; i++)
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(staged_at<128>(area, (k0 + i) / 2, (k0 + i) % 2, q, g, t, half)),
                         "r"(p[i]) : "memory");
    }
}

// gemm_tma_dgelu<BN, STAGES, GROUP, TANH, W>(map_a, map_b, map_out, map_pre, partial, M, N, K): the GELU's
// backward on gemm_tma_pingpong's product. With D = A B^T (M x N): out = gelu'(pre) * D, rounded to
// bf16 (map_out), and partial[r * N + c] = the sum of out's rows 128 r .. 128 r + 127 in column c
// (fp32; one row of partials a row block, for the caller's column add).
// A warpgroup's tile: before its products, its first thread waits until the copy engine has read
// its last tile's boxes out of the warpgroup's staging area and asks the TMA for this tile's pre
// into it (map_pre: box 128 x 64, the staged layout itself), so the load runs under the products.
// Each thread then turns the pre pairs where its accumulator pairs go into dpre pairs (in place:
// each word is one thread's), the copy engine stores the boxes, and the column sums meet across the
// warp (shuffles over g) and the warpgroup's four warps (shared memory, in warp order): the same
// bits every run. TANH: gelu' through the hardware tanh (gelu.cuh's gelu_grad_tanh) instead of
// gelu_grad's exponential and reciprocal. W: the pre words dgelu_in_place loads before it
// computes and stores any of them (1: one word at a time). (In pairs of blocks, as
// gemm_tma_pingpong's CLUSTER = 2, it was no faster: results/h100-session20-2026-12-06/variants.)
// Dynamic shared memory: 1024 + STAGES * (128 + BN) * 128 + 1024 + 2 * 128 * BN * 2 + 2 * 4 * BN * 4.
template <int BN, int STAGES, int GROUP, bool TANH = false, int W = 1>
__device__ __forceinline__ void gemm_tma_dgelu(const TmaMap* map_a, const TmaMap* map_b, const TmaMap* map_out,
                                               const TmaMap* map_pre, float* partial, int M, int N, int K) {
    static_assert(BN % 64 == 0 && BN <= 128, "whole 64-column boxes; a column sum a thread");
    extern __shared__ float4 smem4[];
    GemmRing<BN, STAGES, 1, GROUP, true> ring;
    ring.init(smem_addr(smem4));
    const uint32_t pre_full = ring.end();  // + 8 w: warpgroup w's pre has landed
    if (threadIdx.x == 0) {
        mbar_init(pre_full, 1);
        mbar_init(pre_full + 8, 1);
        mbar_init_fence();
    }
    __syncthreads();
    if (threadIdx.x < 128) {  // warpgroup 0: the producer, one thread of it
        setmaxnreg_dec<40>();
        if (threadIdx.x == 0) ring.produce(map_a, map_b, M, N, K);
    } else {
        setmaxnreg_inc<232>();
        const int w = threadIdx.x / 128 - 1, lane = threadIdx.x % 128, q = lane / 32, g = lane % 32 / 4, t = lane % 4;
        const bool issuer = lane == 0;
        const uint32_t staging = (ring.end() + 16 + 1023) & ~1023u, area = staging + w * 128 * BN * 2;
        const uint32_t sums = staging + 2 * 128 * BN * 2 + w * 4 * BN * 4;  // [warp][column] floats
        const uint32_t landed = pre_full + 8 * w;
        if (issuer) {
            tensormap_acquire(map_pre);
            tensormap_acquire(map_out);
        }
        const int ksteps = (K + ring.BK - 1) / ring.BK;
        float lo[BN / 2], hi[BN / 2];
        int it = w * ksteps, n = 0;
        for (int p = ring.first() + w * ring.stride(); p < ring.count(M, N); p += 2 * ring.stride(), n++) {
            int row0, col0;
            ring.origin(p, M, N, row0, col0);
            if (issuer) {
                bulk_wait_read<0>();  // the last tile's dpre has been read out of the area
                mbar_expect_tx(landed, 128 * BN * 2);
#pragma unroll
                for (int b = 0; b < BN / 64; b++) tma_load_2d(area + b * (128 * 128), map_pre, col0 + 64 * b, row0, landed);
            }
            ring.consume_tile(lo, hi, K, it, w, n);
            it += ksteps;
            mbar_wait(landed, n & 1);
            float cs[BN / 4];
#pragma unroll
            for (int i = 0; i < BN / 4; i++) cs[i] = 0.0f;
            dgelu_in_place<BN, TANH, W>(lo, area, 0, q, g, t, cs);
            dgelu_in_place<BN, TANH, W>(hi, area, 1, q, g, t, cs);
            fence_proxy_async();
            warpgroup_sync(w);
            if (issuer) store_boxes<BN, 128>(map_out, area, row0, col0, M, N);
#pragma unroll
            for (int i = 0; i < BN / 4; i++) {
                float v = cs[i];
                v += __shfl_xor_sync(0xffffffffu, v, 4);
                v += __shfl_xor_sync(0xffffffffu, v, 8);
                v += __shfl_xor_sync(0xffffffffu, v, 16);
                if (g == 0)  // column 8 (i / 2) + 2 t + i % 2
                    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sums + 4 * (q * BN + 8 * (i / 2) + 2 * t + i % 2)),
                                 "f"(v) : "memory");
            }
            warpgroup_sync(w);
            if (lane < BN && col0 + lane < N) {
                float s = 0.0f, v;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(sums + 4 * (k * BN + lane)) : "memory");
                    s += v;
                }
                partial[(size_t)(row0 / 128) * N + col0 + lane] = s;
            }
        }
        if (issuer) bulk_wait<0>();  // every store performed before the block's shared memory goes
    }
    ring.finish();
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_COMMON_GEMM_TMA_CUH
