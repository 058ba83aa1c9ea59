// gemm_wgmma.cuh: the main loop of a Hopper GEMM (sm_90a) with a fused epilogue of the caller's:
// TMA copies into a ring of shared-memory stages, wgmma with 64 x BN x 16 instructions, one
// producer warp and two consumer warpgroups; optionally two blocks a cluster sharing B's tiles,
// tiles in groups of row blocks, or each warpgroup on whole tiles of its own (ping-pong).
// matmul_forward_gelu 7-16 and matmul_forward 9-10 are built on it (10-16 and 9-10 through
// gemm_tma.cuh, which also holds the TMA stores' side: tma_store_2d, bulk_commit, bulk_wait*).
//
// D (M x N, row-major) = A (M x K, row-major) B^T, B given as N x K row-major (a Linear layer's
// weight): both operands "K-major", the k index running along their rows, as wgmma.cuh's Q and K.
//
// ---- The block ----------------------------------------------------------------------------
// 384 threads, one block an SM, persistent: block b takes output tiles b, b + gridDim.x, ... of
// BM = 128 rows by BN columns (tile t is row block t / tiles_n, column block t % tiles_n: the blocks
// in flight share B's columns and a few of A's rows in L2); in pairs with CLUSTER = 2 (below).
// * Warpgroup 0 is the producer: its thread 0 alone works. For each tile and each k-step of 64 it
//   waits for a free stage, then asks the TMA for A's 128 x 64 and B's BN x 64 boxes into it. The
//   TMA writes them in the 128-byte-swizzled layout that wgmma.cuh describes (given 1024-byte
//   aligned stages), fills what lies past M, N or K with zeros, and completes the stage's `full`
//   barrier when the bytes have landed. The producer runs ahead of the consumers by up to STAGES
//   k-steps, across tiles too: while they run a tile's epilogue, the next tile's loads proceed.
// * Warpgroups 1 and 2 are the consumers: warpgroup 1 + w computes rows 64 w .. 64 w + 63 of the
//   tile, an accumulator of BN / 2 floats a thread (wgmma's D layout, below). A k-step is four
//   wgmma (k = 16 each) on the stage, one commit; the stage is handed back (its `empty` barrier,
//   one arrival per consumer warp) once the next k-step's group is issued and this one has
//   completed (wgmma_wait<1>), so the tensor cores always have a group queued.
// * GemmRing<BN, STAGES, CLUSTER, GROUP, PINGPONG>: GROUP > 1 orders the tiles in groups of GROUP
//   slot rows (row blocks; with CLUSTER = 2, pairs of them), each group column block by column
//   block (origin), so that a B larger than L2 (the lm head's 77 MB weight) is read from memory
//   once a group, not once a row block. PINGPONG gives
//   each consumer warpgroup whole tiles (consume_tile: two 64-row halves), the block's tiles in
//   turn, so one's epilogue runs under the other's products; the two take turns at the ring
//   (consume_tile says why they must) and a stage is released by one warpgroup's 4 warps.
//
// ---- The accumulator (per consumer thread: warp q of its warpgroup, g = lane / 4, t = lane % 4)
// d[4 j + e] = D[64 w + 16 q + g + 8 (e / 2)][8 j + 2 t + (e % 2)], j = 0 .. BN / 8 - 1: wgmma.cuh's
// 64 x 64 layout continued to BN columns. Each thread holds two rows' pairs of adjacent columns.
//
// ---- The tensor maps (workbench/tensor_maps.py) -------------------------------------------
// The kernel receives pointers to A's and B's maps in device memory (the header's "tma:" args):
// each describes a row-major bf16 matrix (rows x cols, cols % 8 == 0), a box of rows x 64
// elements, 128-byte swizzle, zero fill. A's box is 128 rows, B's BN. The host wrote them with
// ordinary copies, so the producer acquires them for the TMA's own path (tensormap_acquire)
// before its first copy.

#ifndef KERNELS_COMMON_GEMM_WGMMA_CUH
#define KERNELS_COMMON_GEMM_WGMMA_CUH

#include <stdint.h>

#include "mbarrier.cuh"
#include "wgmma.cuh"  // sw128_desc, wgmma_fence / commit / wait

// CUtensorMap's storage: 128 opaque bytes, 64-byte aligned (cuda.h's CUtensorMap, without cuda.h).
struct alignas(64) TmaMap {
    unsigned long long opaque[16];
};

// A kernel of pairs (CLUSTER = 2, below) is declared with GEMM_PAIRS: two blocks a cluster on a
// Hopper; elsewhere nothing (its body is a trap there).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMM_PAIRS __cluster_dims__(2, 1, 1)
#else
#define GEMM_PAIRS
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void tensormap_acquire(const TmaMap* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(reinterpret_cast<uint64_t>(map))
                 : "memory");
}

// tma_load_2d(dst, map, c0, c1, bar): the box whose first element is (column c0, row c1) of the
// map's matrix, into shared memory at dst; completes `bar`'s announced bytes.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}

// tma_store_2d(map, c0, c1, src): the box at shared address src (the map's swizzled layout, 1024-byte
// aligned) written to the map's matrix at (column c0, row c1); what lies past the matrix's edges is
// not written. Asynchronous: it joins this thread's current bulk group (bulk_commit closes it).
// The threads that wrote src must each fence_proxy_async() (wgmma.cuh) before the barrier that
// precedes the store, so the copy engine reads what they wrote.
__device__ __forceinline__ void tma_store_2d(const TmaMap* map, int c0, int c1, uint32_t src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 ::"l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(src) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// This thread's bulk groups, all but the newest N: done reading their shared memory (the source
// may be written again), or done altogether (bulk_wait: their writes are performed).
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory"); }

#define GEMM_D64                                                                                           \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                      \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                      \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GEMM_D96                                                                                           \
    GEMM_D64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "           \
             "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define GEMM_D128                                                                                 \
    GEMM_D96 ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
             "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define GEMM_F8(i)                                                                                          \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define GEMM_F64 GEMM_F8(0), GEMM_F8(8), GEMM_F8(16), GEMM_F8(24), GEMM_F8(32), GEMM_F8(40), GEMM_F8(48), GEMM_F8(56)
#define GEMM_F96 GEMM_F64, GEMM_F8(64), GEMM_F8(72), GEMM_F8(80), GEMM_F8(88)
#define GEMM_F128 GEMM_F96, GEMM_F8(96), GEMM_F8(104), GEMM_F8(112), GEMM_F8(120)

// wgmma_wide<BN>(d, da, db, accumulate): d (+)= A (64 x 16) B^T (B: BN x 16), both K-major in
// shared memory (sw128_desc descriptors); accumulate = false overwrites d. BN = 128, 192 or 256.
template <int BN>
__device__ __forceinline__ void wgmma_wide(float (&d)[BN / 2], uint64_t da, uint64_t db, bool accumulate);

template <>
__device__ __forceinline__ void wgmma_wide<128>(float (&d)[64], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" GEMM_D64 "}, %64, %65, acc, 1, 1, 0, 0;\n}\n"
        : GEMM_F64
        : "l"(da), "l"(db), "r"((int)accumulate));
}

template <>
__device__ __forceinline__ void wgmma_wide<192>(float (&d)[96], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" GEMM_D96 "}, %96, %97, acc, 1, 1, 0, 0;\n}\n"
        : GEMM_F96
        : "l"(da), "l"(db), "r"((int)accumulate));
}

template <>
__device__ __forceinline__ void wgmma_wide<256>(float (&d)[128], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" GEMM_D128 "}, %128, %129, acc, 1, 1, 0, 0;\n}\n"
        : GEMM_F128
        : "l"(da), "l"(db), "r"((int)accumulate));
}
#undef GEMM_D128
#undef GEMM_D96
#undef GEMM_D64
#undef GEMM_F8
#undef GEMM_F96
#undef GEMM_F64
#undef GEMM_F128

// Warpgroup register budgets (sm_90a; the kernel needs a register cap at entry, e.g.
// __launch_bounds__(384, 1)): every thread of the warpgroup executes it, the count a multiple of 8.
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R)); }
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R)); }

// ---- Two blocks a cluster (CLUSTER = 2) --------------------------------------------------
// The two blocks of a cluster take vertically adjacent tiles (row blocks 2 i and 2 i + 1, one
// column block), so they need the same B tile. Each block's producer loads half of it (BN / 2
// rows, its rank's half: B's map has a box of BN / 2 rows) and the TMA writes that half into both
// blocks' shared memory (multicast) and completes both blocks' `full` barrier for those bytes: L2
// serves B once for two tiles. A stage may then be refilled only when both blocks' consumers are
// done with it, since either producer writes into both: each consumer warp arrives on the `empty`
// barrier of its own block and of the other (16 arrivals a phase), and the producers wait on it
// with cluster scope. The blocks meet at a cluster barrier after initialising their barriers
// (before either can signal the other's) and again at the end (before either leaves while the
// other may still write to it). With PINGPONG too, both blocks hand the same slot to the same
// warpgroup, so the two blocks' warpgroups release each stage in the same order (4 warps of each
// block: 8 arrivals a phase).
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const TmaMap* map, int c0, int c1, uint32_t bar,
                                                      uint16_t blocks) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(blocks)
        : "memory");
}
// One arrival on the barrier at the same shared address in the cluster's block `rank`. Its
// release is at the block's scope (the default), as CUTLASS's cluster barriers arrive: what it
// orders is the consumer's wgmma reads of the stage, already complete (wgmma_wait), before the
// other block's producer refills it. A .release.cluster arrive first makes every earlier write
// of the thread visible cluster-wide (a MEMBAR): in the ping-pong pairs (matmul_forward_gelu 16)
// that stall was a fifth of all the warps' stalls under Nsight Compute and the kernel ran 1.7x
// as long as without pairs; at the block's scope, 1.02x (results/h100-session20-2026-12-06,
// calls 1-3).
__device__ __forceinline__ void mbar_arrive_in(uint32_t bar, uint32_t rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}

// The shared memory of a GemmRing: STAGES stages of A (128 x 64) then B (BN x 64), each
// 1024-aligned, then a full and an empty barrier a stage (and, with PINGPONG, the two turns): a
// launch asks for 1024 (slack for the alignment) + STAGES * STAGE + 16 * STAGES (+ 16) bytes, then
// the kernel's own, from end().
//
// The tiles: with T = cdiv(cdiv(M, 128), CLUSTER) * cdiv(N, BN) tile slots (count), block b's
// slots are p = b / CLUSTER, + gridDim.x / CLUSTER, ...; slot p's tile (origin) is row block
// p / tiles_n * CLUSTER + the block's rank, column block p % tiles_n. With CLUSTER = 1 a slot is
// a tile; with 2, a slot is a pair of tiles, the second past M where the row blocks are odd (its
// rows are zeros from the TMA and its stores are masked, so the pair's protocol still runs).
template <int BN, int STAGES, int CLUSTER = 1, int GROUP = 1, bool PINGPONG = false>
struct GemmRing {
    static constexpr int BM = 128, BK = 64;
    static constexpr uint32_t A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE = A_BYTES + B_BYTES;
    static_assert(STAGE % 1024 == 0 && (B_BYTES / CLUSTER) % 1024 == 0, "stages (and B's halves) stay 1024-aligned");
    static_assert(CLUSTER == 1 || CLUSTER == 2, "one block, or a pair");
    static constexpr int ARRIVALS = PINGPONG ? 4 : 8;  // consumer warps that release a stage (of a block)
    uint32_t base;  // the first stage's shared address
    __device__ __forceinline__ uint32_t a(int s) const { return base + s * STAGE; }
    __device__ __forceinline__ uint32_t b(int s) const { return base + s * STAGE + A_BYTES; }
    __device__ __forceinline__ uint32_t full(int s) const { return base + STAGES * STAGE + 8 * s; }
    __device__ __forceinline__ uint32_t empty(int s) const { return base + STAGES * STAGE + 8 * (STAGES + s); }
    // PINGPONG: the consumer warpgroups' turns (turn(w): warpgroup w may wait on its next tile's stages).
    __device__ __forceinline__ uint32_t turn(int w) const { return base + STAGES * STAGE + 16 * STAGES + 8 * w; }
    // The first byte past the ring (16-aligned): where a kernel's own shared memory may start.
    __device__ __forceinline__ uint32_t end() const { return base + STAGES * STAGE + 16 * STAGES + (PINGPONG ? 16 : 0); }

    static __device__ __forceinline__ int rank() { return CLUSTER == 1 ? 0 : (int)(blockIdx.x % CLUSTER); }
    static __device__ __forceinline__ int first() { return blockIdx.x / CLUSTER; }
    static __device__ __forceinline__ int stride() { return gridDim.x / CLUSTER; }
    static __device__ __forceinline__ int count(int M, int N) {
        return ((M + BM - 1) / BM + CLUSTER - 1) / CLUSTER * ((N + BN - 1) / BN);
    }
    static __device__ __forceinline__ void origin(int p, int M, int N, int& row0, int& col0) {
        const int tiles_n = (N + BN - 1) / BN;
        if constexpr (GROUP == 1) {
            row0 = (p / tiles_n * CLUSTER + rank()) * BM;
            col0 = p % tiles_n * BN;
        } else {  // groups of GROUP slot rows (row blocks, or pairs of them), each column block by column block
            const int slots_m = ((M + BM - 1) / BM + CLUSTER - 1) / CLUSTER, in_group = GROUP * tiles_n;
            const int top = p / in_group * GROUP, rows = min(GROUP, slots_m - top), r = p % in_group;
            row0 = ((top + r % rows) * CLUSTER + rank()) * BM;
            col0 = r / rows * BN;
        }
    }

    // Thread 0 initialises the barriers; every thread of the block must call this, once.
    __device__ __forceinline__ void init(uint32_t smem) {
        base = (smem + 1023) & ~1023u;
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; s++) {
                mbar_init(full(s), 1);             // the producer's mbar_expect_tx
                mbar_init(empty(s), ARRIVALS * CLUSTER);  // one arrival per consumer warp (of the cluster) on it
            }
            if (PINGPONG) {
                mbar_init(turn(0), 1);  // the other warpgroup's first thread
                mbar_init(turn(1), 1);
            }
            mbar_init_fence();
        }
        __syncthreads();
        if (CLUSTER > 1) cluster_sync();
    }
    // Every thread of the block, last (with CLUSTER = 2: the blocks leave together).
    __device__ __forceinline__ void finish() const {
        if (CLUSTER > 1) cluster_sync();
    }

    // The producer (one thread): every k-step of every tile this block takes, in the consumers' order.
    __device__ __forceinline__ void produce(const TmaMap* ma, const TmaMap* mb, int M, int N, int K) {
        const int ksteps = (K + BK - 1) / BK;
        tensormap_acquire(ma);
        tensormap_acquire(mb);
        int it = 0;
        for (int p = first(); p < count(M, N); p += stride()) {
            int row0, col0;
            origin(p, M, N, row0, col0);
            for (int k = 0; k < ksteps; k++, it++) {
                const int s = it % STAGES, parity = ((it / STAGES) & 1) ^ 1;  // a fresh barrier's "previous" phase is done
                if (CLUSTER == 1)
                    mbar_wait(empty(s), parity);
                else
                    mbar_wait_cluster(empty(s), parity);
                mbar_expect_tx(full(s), STAGE);
                tma_load_2d(a(s), ma, k * BK, row0, full(s));
                if (CLUSTER == 1)
                    tma_load_2d(b(s), mb, k * BK, col0, full(s));
                else
                    tma_load_2d_multicast(b(s) + rank() * (B_BYTES / 2), mb, k * BK, col0 + rank() * (BN / 2), full(s),
                                          (uint16_t)3);
            }
        }
    }

    // A consumer warpgroup's product for one tile: d = rows 64 w .. 64 w + 63 of the tile's A B^T.
    // `it` counts the k-steps this block has consumed (the same count as the producer's).
    __device__ __forceinline__ void consume(float (&d)[BN / 2], int w, int K, int& it) const {
        const int ksteps = (K + BK - 1) / BK;
        const bool arrives = threadIdx.x % 32 == 0;
        for (int k = 0; k < ksteps; k++, it++) {
            const int s = it % STAGES;
            mbar_wait(full(s), (it / STAGES) & 1);
            const uint64_t da = sw128_desc(a(s) + w * 64 * 128, 1024), db = sw128_desc(b(s), 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) wgmma_wide<BN>(d, da + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
            wgmma_commit();
            if (k > 0) {
                wgmma_wait<1>();  // the previous k-step's products are done with its stage
                if (arrives) release((it - 1) % STAGES);
            }
        }
        wgmma_wait<0>();
        if (arrives) release((it - 1) % STAGES);
    }
    // PINGPONG: consumer warpgroup w's product for its n-th tile (rows 0 .. 63 into lo, 64 .. 127
    // into hi), on that tile's stages alone: the block's tiles alternate between its two
    // warpgroups, so each skips the other's k-steps (the caller adds them to `it`).
    // The turns: a stage's `full` barrier tells apart only adjacent phases (parity), and a
    // warpgroup's next stages are a tile's worth of phases ahead of where the other warpgroup is.
    // So warpgroup w waits for its turn before its first wait on a stage (warpgroup 0's first tile
    // needs none), and hands the turn over once it has waited for its tile's last stage: by then
    // every stage has completed the phase before the ones the other warpgroup waits for.
    __device__ __forceinline__ void consume_tile(float (&lo)[BN / 2], float (&hi)[BN / 2], int K, int& it, int w,
                                                 int n) const {
        static_assert(PINGPONG, "a warpgroup a tile");
        const int ksteps = (K + BK - 1) / BK;
        const bool arrives = threadIdx.x % 32 == 0;
        if (w == 1)
            mbar_wait(turn(1), n & 1);  // warpgroup 0 has waited for its n-th tile's stages
        else if (n > 0)
            mbar_wait(turn(0), (n - 1) & 1);  // warpgroup 1 has waited for its (n - 1)-th's
        for (int k = 0; k < ksteps; k++, it++) {
            const int s = it % STAGES;
            mbar_wait(full(s), (it / STAGES) & 1);
            const uint64_t dlo = sw128_desc(a(s), 1024), dhi = sw128_desc(a(s) + 64 * 128, 1024), db = sw128_desc(b(s), 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; kk++) {
                wgmma_wide<BN>(lo, dlo + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
                wgmma_wide<BN>(hi, dhi + 2 * kk, db + 2 * kk, k > 0 || kk > 0);
            }
            wgmma_commit();
            if (k == ksteps - 1 && threadIdx.x % 128 == 0) mbar_arrive(turn(1 - w));  // the other's turn
            if (k > 0) {
                wgmma_wait<1>();
                if (arrives) release((it - 1) % STAGES);
            }
        }
        wgmma_wait<0>();
        if (arrives) release((it - 1) % STAGES);
    }
    __device__ __forceinline__ void release(int s) const {
        mbar_arrive(empty(s));
        if (CLUSTER > 1) mbar_arrive_in(empty(s), rank() ^ 1);
    }
};
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_COMMON_GEMM_WGMMA_CUH
