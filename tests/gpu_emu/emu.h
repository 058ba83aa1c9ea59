// emu.h: a small SIMT emulator to run CUDA kernels' *index math* on the CPU, for tests that
// cannot use a GPU. Every CUDA thread of a block is a fiber (ucontext); fibers switch only at
// synchronisation points (__syncthreads, warp collectives: shuffles, ldmatrix, mma), so a block
// runs as a deterministic interleaving chosen by the scheduler (shuffled rounds with a seed, to
// shake out missing barriers). Blocks run one after another.
//
// What it checks beyond the numbers: every warp collective is reached by all 32 lanes and by the
// same instruction (an mma.sync in divergent code deadlocks or trips the check), ldmatrix and
// cp.async addresses are aligned and inside the block's dynamic shared memory, cp.async sources are
// aligned and inside a buffer, and (with cp_async_mode = LATE) copies land only at the wait that
// covers them, so data read before its wait (plus barrier) is stale. Plain loads and stores are
// checked by AddressSanitizer when the driver is built with it.
//
// Fragment layouts (emu_mma.h) are written from the PTX ISA's tables, independently of the kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>
#include <algorithm>
#include <string>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline int min(int a, int b) { return a < b ? a : b; }
inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }  // CUDA's reciprocal square root
inline float __expf(float x) { return std::exp(x); }  // CUDA's fast exponential (exact here)

[[noreturn]] inline void emu_fail(const char* what) {
    std::fprintf(stderr, "EMU FAILURE: %s\n", what);
    std::fflush(stderr);
    std::abort();
}

// The cache-hinted loads and stores: plain accesses here, checked for their type's alignment (a
// misaligned vector access faults on the GPU; the emulator's types are no more aligned than CUDA's).
template <class T> inline void emu_check_aligned(const T* p, const char* what) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(T)) emu_fail((std::string(what) + ": address not aligned to its type").c_str());
}
template <class T> inline T __ldcs(const T* p) { emu_check_aligned(p, "__ldcs"); return *p; }
template <class T> inline T __ldg(const T* p) { emu_check_aligned(p, "__ldg"); return *p; }
template <class T> inline T __ldcg(const T* p) { emu_check_aligned(p, "__ldcg"); return *p; }
template <class T> inline void __stcs(T* p, T v) { emu_check_aligned(p, "__stcs"); *p = v; }

// __byte_perm(x, y, s): PTX prmt.b32 in its default mode, which the intrinsic compiles to. The
// eight bytes of {y, x} (x bytes 0-3, y bytes 4-7); result byte n from nibble n of s (the upper
// 16 bits unused): its low 3 bits pick the byte, its bit 3 replicates the picked byte's sign bit
// over the 8 bits (CUDA's documentation names only the low 3 bits; the PTX ISA gives bit 3).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    uint64_t bytes = (uint64_t(y) << 32) | x;
    unsigned out = 0;
    for (int n = 0; n < 4; n++) {
        unsigned ctl = (s >> (4 * n)) & 0xfu;
        unsigned b = unsigned(bytes >> (8 * (ctl & 7u))) & 0xffu;
        if (ctl & 8u) b = (b & 0x80u) ? 0xffu : 0u;
        out |= b << (8 * n);
    }
    return out;
}

// ---- shared memory -------------------------------------------------------------------------
// A kernel's dynamic shared memory (extern __shared__ T name[]): the driver aliases every such
// name to this one array (one translation unit, so a plain definition).
#define EMU_SMEM_BYTES 232448
alignas(128) unsigned char smem[EMU_SMEM_BYTES];
inline size_t emu_shared_bytes = 0;
inline void emu_check_smem(const void* p, size_t bytes, size_t align, const char* what) {
    auto a = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(smem);
    if (a < base || a + bytes > base + emu_shared_bytes) {
        char msg[200];
        std::snprintf(msg, sizeof msg, "%s: shared address offset %lld (+%zu) outside [0, %zu)", what,
                      (long long)(a - base), bytes, emu_shared_bytes);
        emu_fail(msg);
    }
    if (a % align) {
        char msg[200];
        std::snprintf(msg, sizeof msg, "%s: shared address offset %lld not %zu-byte aligned", what, (long long)(a - base), align);
        emu_fail(msg);
    }
}

// ---- global buffers (for cp.async source checks) -------------------------------------------
struct EmuBuffer { const unsigned char* p; size_t bytes; };
inline std::vector<EmuBuffer> emu_buffers;
inline void emu_check_global(const void* p, size_t bytes, const char* what) {
    auto a = reinterpret_cast<const unsigned char*>(p);
    if (reinterpret_cast<uintptr_t>(p) % bytes) emu_fail((std::string(what) + ": misaligned global source").c_str());
    for (auto& b : emu_buffers)
        if (a >= b.p && a + bytes <= b.p + b.bytes) return;
    emu_fail((std::string(what) + ": global source outside every buffer").c_str());
}

// L2 prefetches are hints on the GPU and nothing here; kernels pass their ranges to
// EMU_CHECK_PREFETCH, which checks them: 16-byte aligned, a positive multiple of 16 bytes, inside
// one buffer (a prefetch out of bounds faults on the GPU).
inline void emu_check_prefetch(const void* p, size_t bytes) {
    auto a = reinterpret_cast<const unsigned char*>(p);
    if (reinterpret_cast<uintptr_t>(p) % 16 || bytes == 0 || bytes % 16) emu_fail("prefetch: misaligned or bad size");
    for (auto& b : emu_buffers)
        if (a >= b.p && a + bytes <= b.p + b.bytes) return;
    emu_fail("prefetch: range outside every buffer");
}
#define EMU_CHECK_PREFETCH(p, bytes) emu_check_prefetch(p, bytes)

// ---- fibers and scheduling -------------------------------------------------------------------
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

struct PendingCopy {
    void* dst;
    unsigned char data[16];
    int bytes;
    int group;
};

struct Fiber {
    ucontext_t ctx;
    std::vector<char> stack;
    bool done = false;
    dim3 tid;
    const void* wait_bar = nullptr;    // the barrier this fiber waits at (nullptr: runnable)
    long wait_gen = 0;                 // ... until its generation moves past this
    int committed = 0;                 // cp.async groups committed so far
    std::vector<PendingCopy> pending;  // copies not yet landed (LATE mode)
    unsigned vote_calls = 0;           // __syncthreads_count/_or/_and calls so far
};

enum CpAsyncMode { EARLY = 0, LATE = 1 };
// SHUFFLE: rounds over every fiber in a random order (warps advance roughly in step).
// PRIORITY: warps get random priorities per block and the most urgent runnable fiber always runs
// next, so one warp races as far ahead as its barriers allow: a missing __syncthreads shows.
enum SchedMode { SHUFFLE = 0, PRIORITY = 1 };

struct Emu {
    std::vector<Fiber> fibers;
    ucontext_t main_ctx;
    int current = -1;
    unsigned long long progress = 0;
    std::mt19937 rng{12345};
    std::function<void()> body;
    CpAsyncMode cp_mode = LATE;
    SchedMode sched = SHUFFLE;
    unsigned block_order = 0;  // 0: blocks in index order; else a seed: a shuffled order of blocks
};
inline Emu emu;

inline Fiber& me() { return emu.fibers[emu.current]; }
inline int flat_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

inline void emu_yield() { swapcontext(&me().ctx, &emu.main_ctx); }

struct EmuBarrier {
    int n = 0, count = 0;
    long gen = 0;
    void wait() {
        long g = gen;
        emu.progress++;  // an arrival is progress; a round in which nobody arrives anywhere is a deadlock
        if (++count == n) {
            count = 0;
            gen++;
            emu_yield();  // let others run before we go on: more interleavings
        } else {
            me().wait_bar = this;
            me().wait_gen = g;
            while (gen == g) emu_yield();
            me().wait_bar = nullptr;
        }
    }
};

// Per-warp collective state: slots double-buffered by each lane's collective count.
struct WarpSlot {
    int kind;
    uint32_t u[8];
    float f[4];
    const void* addr;
    int i0;
};
struct WarpState {
    EmuBarrier bar;
    WarpSlot slots[2][32];
    unsigned seq[32];
};
inline std::vector<WarpState> emu_warps;
inline EmuBarrier emu_block_bar;

inline void fiber_entry() {
    emu.body();
    me().done = true;
    emu.progress++;
    swapcontext(&me().ctx, &emu.main_ctx);
}

inline void __syncthreads() { emu_block_bar.wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
    int t = flat_tid();
    emu_warps[t / 32].bar.wait();
}
// Blocks run one after another, so every store of an earlier block is visible to a later one:
// fences are no-ops here (the GPU needs them; the emulator cannot check that they are there).
inline void __threadfence() {}
inline void __threadfence_block() {}

// __syncthreads_count/_or/_and: a barrier that also counts a predicate over the block. Every
// thread makes the same sequence of calls, so a thread's k-th call counts into slot k % 3 and,
// once past the barrier (every read of call k-1 is done: each thread reads before its next
// barrier), clears slot (k + 2) % 3, which call k + 2 fills only after the next barrier.
inline int emu_votes[3];
inline int __syncthreads_count(int pred) {
    unsigned k = me().vote_calls++;
    if (pred) emu_votes[k % 3]++;
    __syncthreads();
    int n = emu_votes[k % 3];
    emu_votes[(k + 2) % 3] = 0;
    return n;
}
inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
inline int __syncthreads_and(int pred) {
    return __syncthreads_count(pred) == int(blockDim.x * blockDim.y * blockDim.z);
}

// A warp collective: fill this lane's slot, meet the other 31 lanes, then read every lane's slot.
template <class Fill, class Read>
inline void warp_collective(int kind, Fill fill, Read read) {
    int t = flat_tid(), lane = t % 32;
    WarpState& w = emu_warps[t / 32];
    int p = w.seq[lane]++ & 1;
    WarpSlot& s = w.slots[p][lane];
    s.kind = kind;
    fill(s);
    w.bar.wait();
    for (int l = 0; l < 32; l++)
        if (w.slots[p][l].kind != kind) emu_fail("lanes of one warp reached different warp collectives");
    read(w.slots[p], lane);
}

inline float __shfl_xor_sync(unsigned mask, float v, int offset, int width = 32) {
    if (mask != 0xffffffffu) emu_fail("shuffle with a partial mask");
    float out = 0;
    warp_collective(1, [&](WarpSlot& s) { s.f[0] = v; },
                    [&](WarpSlot* all, int lane) {
                        int src = lane ^ offset;
                        if (src / width != lane / width) src = lane;
                        out = all[src].f[0];
                    });
    return out;
}
inline float __shfl_sync(unsigned mask, float v, int src_lane, int width = 32) {
    if (mask != 0xffffffffu) emu_fail("shuffle with a partial mask");
    float out = 0;
    warp_collective(2, [&](WarpSlot& s) { s.f[0] = v; },
                    [&](WarpSlot* all, int lane) { out = all[(lane / width) * width + src_lane % width].f[0]; });
    return out;
}

inline float atomicAdd(float* p, float v) {
    float old = *p;
    *p = old + v;
    return old;
}
inline int atomicAdd(int* p, int v) {
    int old = *p;
    *p = old + v;
    return old;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
    unsigned old = *p;
    *p = old + v;
    return old;
}
// sm_90's 16-byte float atomic (the result unused: a vector reduction in L2).
inline float4 atomicAdd(float4* p, float4 v) {
    if (reinterpret_cast<uintptr_t>(p) % 16) emu_fail("float4 atomicAdd not 16-byte aligned");
    float4 old = *p;
    *p = {old.x + v.x, old.y + v.y, old.z + v.z, old.w + v.w};
    return old;
}
inline int atomicExch(int* p, int v) {
    int old = *p;
    *p = v;
    return old;
}
inline int atomicCAS(int* p, int cmp, int v) {
    int old = *p;
    if (old == cmp) *p = v;
    return old;
}
inline unsigned atomicMin(unsigned* p, unsigned v) {
    unsigned old = *p;
    if (v < old) *p = v;
    return old;
}
inline unsigned atomicOr(unsigned* p, unsigned v) {
    unsigned old = *p;
    *p = old | v;
    return old;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }

// Warp votes and an integer shuffle, as warp collectives.
inline unsigned __ballot_sync(unsigned mask, int pred) {
    if (mask != 0xffffffffu) emu_fail("ballot with a partial mask");
    unsigned out = 0;
    warp_collective(101, [&](WarpSlot& s) { s.u[0] = pred != 0; },
                    [&](WarpSlot* all, int) { for (int l = 0; l < 32; l++) out |= all[l].u[0] << l; });
    return out;
}
inline unsigned __match_any_sync(unsigned mask, int value) {
    if (mask != 0xffffffffu) emu_fail("match with a partial mask");
    unsigned out = 0;
    warp_collective(102, [&](WarpSlot& s) { s.i0 = value; },
                    [&](WarpSlot* all, int lane) {
                        for (int l = 0; l < 32; l++) out |= unsigned(all[l].i0 == all[lane].i0) << l;
                    });
    return out;
}
inline int __shfl_up_sync(unsigned mask, int v, unsigned delta, int width = 32) {
    if (mask != 0xffffffffu) emu_fail("shuffle with a partial mask");
    int out = 0;
    warp_collective(103, [&](WarpSlot& s) { s.i0 = v; },
                    [&](WarpSlot* all, int lane) {
                        int src = lane - int(delta);
                        out = src >= (lane / width) * width ? all[src].i0 : all[lane].i0;
                    });
    return out;
}
float __shfl_up_sync(unsigned, float, unsigned, int = 32) = delete;  // not emulated: no silent int

// Run one kernel launch: every block (in index order, or shuffled with emu.block_order as the
// seed: blocks may run in any order on a GPU), every thread of a block a fiber.
inline void emu_launch(dim3 grid, dim3 block, size_t shared, std::function<void()> body, unsigned seed) {
    if (shared > sizeof(smem)) emu_fail("dynamic shared memory larger than the emulator's");
    int nthreads = block.x * block.y * block.z;
    if (nthreads % 32) emu_fail("block is not a whole number of warps (the emulator needs full warps)");
    emu.body = body;
    emu.rng.seed(seed);
    blockDim = block;
    gridDim = grid;
    emu_shared_bytes = shared;
    std::vector<unsigned> block_order(grid.x * grid.y * grid.z);
    for (unsigned i = 0; i < block_order.size(); i++) block_order[i] = i;
    if (emu.block_order) {
        std::mt19937 order_rng(emu.block_order + seed);
        std::shuffle(block_order.begin(), block_order.end(), order_rng);
    }
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                unsigned b = block_order[bx + grid.x * (by + grid.y * bz)];
                blockIdx = {b % grid.x, (b / grid.x) % grid.y, b / (grid.x * grid.y)};
                std::memset(smem, 0xFF, sizeof(smem));  // NaN everywhere: unwritten data shows
                std::memset(emu_votes, 0, sizeof(emu_votes));
                emu.fibers.assign(nthreads, Fiber{});
                emu_warps.assign(nthreads / 32, WarpState{});
                for (auto& w : emu_warps) w.bar.n = 32;
                emu_block_bar = EmuBarrier{};
                emu_block_bar.n = nthreads;
                for (int i = 0; i < nthreads; i++) {
                    Fiber& f = emu.fibers[i];
                    f.stack.resize(1 << 18);
                    f.tid = {unsigned(i % block.x), unsigned((i / block.x) % block.y), unsigned(i / (block.x * block.y))};
                    getcontext(&f.ctx);
                    f.ctx.uc_stack.ss_sp = f.stack.data();
                    f.ctx.uc_stack.ss_size = f.stack.size();
                    f.ctx.uc_link = nullptr;
                    makecontext(&f.ctx, fiber_entry, 0);
                }
                std::vector<int> order(nthreads);
                for (int i = 0; i < nthreads; i++) order[i] = i;
                int alive = nthreads;
                if (emu.sched == PRIORITY) {
                    std::vector<int> warp_rank(nthreads / 32);
                    for (size_t w = 0; w < warp_rank.size(); w++) warp_rank[w] = int(w);
                    std::shuffle(warp_rank.begin(), warp_rank.end(), emu.rng);
                    std::sort(order.begin(), order.end(), [&](int a, int b) {
                        return warp_rank[a / 32] != warp_rank[b / 32] ? warp_rank[a / 32] < warp_rank[b / 32] : a < b;
                    });
                    auto runnable = [&](int i) {
                        const Fiber& f = emu.fibers[i];
                        if (f.done) return false;
                        if (!f.wait_bar) return true;
                        return static_cast<const EmuBarrier*>(f.wait_bar)->gen != f.wait_gen;
                    };
                    while (alive) {
                        int pick = -1;
                        for (int i : order)
                            if (runnable(i)) { pick = i; break; }
                        if (pick < 0) emu_fail("deadlock: every live thread waits at a barrier or collective that others never reach");
                        emu.current = pick;
                        threadIdx = emu.fibers[pick].tid;
                        swapcontext(&emu.main_ctx, &emu.fibers[pick].ctx);
                        if (emu.fibers[pick].done) alive--;
                    }
                }
                while (alive) {
                    unsigned long long before = emu.progress;
                    std::shuffle(order.begin(), order.end(), emu.rng);
                    for (int i : order) {
                        if (emu.fibers[i].done) continue;
                        emu.current = i;
                        threadIdx = emu.fibers[i].tid;
                        swapcontext(&emu.main_ctx, &emu.fibers[i].ctx);
                        if (emu.fibers[i].done) alive--;
                    }
                    if (alive && emu.progress == before) emu_fail("deadlock: every live thread waits at a barrier or collective that others never reach");
                }
                emu.current = -1;
            }
}
