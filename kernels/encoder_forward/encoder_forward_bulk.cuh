// encoder_forward_bulk.cuh: the token gather of encoder_forward through sm_90's bulk copies (the
// TMA unit), shared by versions 13 (fp32) and 14 (bf16).
//
// A tile is R consecutive positions (R rows of out, one contiguous range). A block owns an equal
// share of the positions, in tiles of R, and keeps S tiles in flight in a ring of S stages
// in shared memory: stage s holds R wte rows (and R wpe rows where WPE) and completes on
// mbarrier s. Lane r of warp 0 loads position r's token, adds its rows' bytes to the barrier's
// expected count and issues a bulk copy of its whole wte row (skipped for a token outside the
// vocabulary) and of its wpe row (where WPE; else the adds read wpe from global memory). Then every thread waits for the tile, adds the rows (16 bytes at
// a time, consecutive threads on consecutive units) and stores them with streaming stores.
// After a barrier (every thread is done with the stage) warp 0 refills the stage with the tile
// S further on, whose tokens it loaded before this tile's adds.
//
// What this changes against versions 3-12: a thread no longer holds the row it waits for. The
// bytes in flight are bounded by shared memory (S - 1 tiles per block) instead of registers and
// threads, and the token -> row round trip is paid S - 1 tiles ahead of the adds. Measured on the
// H100 it is slower (0.83x the copy at fp32, 0.80x at bf16, against versions 11 and 12's 0.94-0.96x),
// with or without the per-tile __syncthreads (a warp-specialised ring was tried: version 13's header).
//
// Layout of the dynamic shared memory (16-byte units): the S mbarriers (8 bytes each) and
// S * R validity flags (ints), padded to whole units; then stage 0's R wte rows, its R wpe rows
// (where WPE), stage 1's, ... Each row is C elements: C * sizeof(E) must be a multiple of 16 (C % 4 == 0 at
// fp32, C % 8 == 0 at bf16), as bulk copies move whole 16-byte units from 16-byte-aligned
// addresses.
//
// Before sm_90 (and on the CPU emulator) lane r copies its rows itself with plain loads; every
// stage is filled before at least one __syncthreads that precedes its adds, so the indexing and
// the ring are the same and no mbarrier is needed.

#ifndef KERNELS_COMMON_ENCODER_FORWARD_BULK_CUH
#define KERNELS_COMMON_ENCODER_FORWARD_BULK_CUH

#include "l2_prefetch.cuh"  // prefetch_l2_ints

namespace efb {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
#endif

// Bytes of shared memory the kernel needs (the header's `shared` expression says the same).
__host__ __device__ constexpr unsigned head_units(int S, int R) { return (unsigned)(8 * S + 4 * S * R + 15) / 16u; }

// Lane r < R of warp 0: position bt's rows into stage s (token already loaded); positions at
// or past `end` (the block's end) copy nothing.
template <typename E, bool WPE>
__device__ __forceinline__ void fill(E* wte_s, E* wpe_s, int* valid_s, unsigned long long* bar, int r, int bt,
                                     int token, const E* wte, const E* wpe, int end, int T, int C, int V) {
    bool live = bt < end, ok = live && token >= 0 && token < V;
    if (live) valid_s[r] = ok;
    unsigned row_bytes = (unsigned)C * (unsigned)sizeof(E);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Every lane r < R arrives once (the barrier counts R arrivals), with the bytes it will copy.
    unsigned b = smem(bar);
    unsigned bytes = (ok ? row_bytes : 0u) + (live && WPE ? row_bytes : 0u);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
    if (ok)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem(wte_s + (size_t)r * C)), "l"(wte + (size_t)token * C), "r"(row_bytes), "r"(b) : "memory");
    if (live && WPE)
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(smem(wpe_s + (size_t)r * C)), "l"(wpe + (size_t)(bt % T) * C), "r"(row_bytes), "r"(b) : "memory");
#else
    (void)bar;
    (void)row_bytes;
    if (ok)
        for (int c = 0; c < C; c++) wte_s[(size_t)r * C + c] = wte[(size_t)token * C + c];
    if (live && WPE)
        for (int c = 0; c < C; c++) wpe_s[(size_t)r * C + c] = wpe[(size_t)(bt % T) * C + c];
#endif
}

// Waits for the phase with parity `parity` of stage s's barrier (sm_90; elsewhere a
// __syncthreads since the fill has already ordered the copies).
__device__ __forceinline__ void wait(unsigned long long* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned b = smem(bar), done = 0;
    while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(b), "r"(parity) : "memory");
#else
    (void)bar;
    (void)parity;
#endif
}

// shared4: the kernel's dynamic shared memory (the layout above).
// Ops (the version's element type): Ops::E the element, Ops::Unit 16 bytes of them (float4 or
// Pack8), Ops::add(w, p, ok) w + p or NaN where the token was outside the vocabulary, and
// Ops::store(dst, unit) a streaming store.
// WPE: the wpe rows copied into the stage beside the wte rows (else the adds read them from
// global memory, where after the first sequence they are L2 hits).
template <typename Ops, bool WPE = true, typename E = typename Ops::E, typename Unit = typename Ops::Unit>
__device__ __forceinline__ void encoder_forward_bulk(float4* shared4, E* out, const int* __restrict__ inp,
                                                     const E* __restrict__ wte, const E* __restrict__ wpe, int N, int T,
                                                     int C, int V, int R, int S) {
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(shared4);
    int* valid = reinterpret_cast<int*>(bars + S);
    E* rows = reinterpret_cast<E*>(shared4 + head_units(S, R));  // stage s: wte rows at KsRC, wpe at (Ks+1)RC
    const int per_unit = 16 / (int)sizeof(E), CU = C / per_unit;
    constexpr int K = WPE ? 2 : 1;  // row sets a stage holds
    // The block's positions [lo, hi): an equal share of the N, to the position (62 or 63 each at
    // N = 8192 on 132 blocks), in tiles of R from lo; the last tile may be short.
    const int lo = (int)((long long)blockIdx.x * N / gridDim.x), hi = (int)((long long)(blockIdx.x + 1) * N / gridDim.x);
    const int tiles = (hi - lo + R - 1) / R;
    const int lane = threadIdx.x;  // < R <= 32 in warp 0: a producer lane
    const bool producer = threadIdx.x < R;
    if (blockIdx.x == 0 && threadIdx.x == 0) prefetch_l2_ints(inp, N);  // every block's first tokens

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(bars + s)), "r"(R));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
#endif
    auto refill = [&](int s, int bt, int token) {  // stage s with the tile whose lane-th position is bt
        fill<E, WPE>(rows + (size_t)(K * s) * R * C, rows + (size_t)(K * s + 1) * R * C, valid + s * R, bars + s, lane,
                     bt, token, wte, wpe, hi, T, C, V);
    };
    // Prologue: the block's first S tiles, one per stage.
    if (producer) {
        for (int s = 0; s < S && s < tiles; s++) {
            int bt = lo + s * R + lane;
            int token = bt < hi ? __ldg(inp + bt) : 0;
            refill(s, bt, token);
        }
    }
    __syncthreads();

    for (int i = 0; i < tiles; i++) {
        int s = i % S;
        // The tokens of the tile that will refill this stage, asked for before the wait.
        int next_bt = lo + (i + S) * R + lane, next_token = 0;
        if (producer && i + S < tiles && next_bt < hi) next_token = __ldg(inp + next_bt);

        wait(bars + s, (unsigned)(i / S) & 1u);
        const Unit* w = reinterpret_cast<const Unit*>(rows + (size_t)(K * s) * R * C);
        const Unit* p = reinterpret_cast<const Unit*>(rows + (size_t)(K * s + 1) * R * C);
        const int* ok = valid + s * R;
        int first = lo + i * R, units = min(R, hi - first) * CU;
        E* dst = out + (size_t)first * C;
        for (int u = threadIdx.x; u < units; u += blockDim.x) {
            Unit pu;
            if (WPE) pu = p[u];
            else pu = __ldg(reinterpret_cast<const Unit*>(wpe + (size_t)((first + u / CU) % T) * C) + u % CU);
            Ops::store(dst + (size_t)u * per_unit, Ops::add(w[u], pu, ok[u / CU] != 0));
        }
        __syncthreads();  // every thread is done with stage s

        if (producer && i + S < tiles)
            refill(s, next_bt, next_token);
    }
}

}  // namespace efb

#endif  // KERNELS_COMMON_ENCODER_FORWARD_BULK_CUH
