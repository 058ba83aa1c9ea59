/*
title = "One launch: rows in registers, column sums in registers, one atomic per column per block"
changed = "Version 5's two kernels become one and its rows stream at copy speed: every load of a row (dout, inp and dinp, 16 bytes each) is issued before any arithmetic; each lane sums the same 24 columns in every row in registers (no shared-memory read-modify-write per row); the grid is one wave of 12 warps per SM with rounds of equal length; each block adds its column sums into dweight and dbias with one float atomic per column. No scratch, no memset, no reduce kernel."
why = """
Where version 5's time goes. At B=8, T=1024, C=768 it takes 51.5 us and a copy of its 100.7 MB
takes 42.4 us. Its bytes are 75.5 MB read (dout, inp, dinp) and 25.2 MB written (dinp), and
reads are cheaper than writes: the bench file (results/h100-bench-2026-11-23-b9aa6f9-partial.json)
fits t = 4.5 us + reads / 3.17 TB/s + writes / 2.65 TB/s (matmul_backward_bias 5, 100.7 MB read,
36.2 us; global_norm 2, 498 MB read, 161.3 us; residual_forward 2 and gelu_backward 2, two reads
to a write, 30.0 us and 105.4 us). This op's bytes then need 4.5 + 23.8 + 9.5 = 37.9 us: below the
copy. Nsight Compute put the row kernel of version 7 (version 5's bf16 twin) at about the copy's
time, so the ~9 us above the copy are the column sums: a second launch on 24 blocks (the same
step cost matmul_backward_bias 6.6 us, 36.2 -> 42.8, when its atomics became partials and a
reduce kernel). Folding it in with tickets (version 8) needed a memset launch and left two
serial team sums, each a single SM reading ~100 KB from L2, after the last row: 53.8 us.

What changes.
1. The column sums never leave the SM until the end. A warp owns a row (C <= 768; wider rows
   take two or three warps, see below) and lane l holds packs l, l + 32, ... : the same 24
   columns in every row, so its dbias and dweight sums are 48 registers for the whole kernel.
   Version 5 read and wrote a shared-memory slice per row (four 16-byte shared accesses per
   float4 per row). At the end the block's warps write their sums to shared memory, one barrier,
   and each thread adds one column over the block's warps in warp order.
2. One float atomic per column per block, straight into dweight and dbias: they are fp32 and
   accumulate (+=), which is exactly what an atomic add does, so there is nothing to zero, no
   scratch, no memset and no second kernel. At the default sizes the grid is 114 blocks of 384
   threads: 114 x 1536 = 175K red.global.add.f32, 114 adds per address, issued as the blocks
   finish. For scale: matmul_backward_bias 5 adds 393K float atomics (128 per column) and still
   runs in the read model's time (36.2 us for 36.3). A deterministic sum cannot finish in one
   launch without a serial tail: whichever block finishes last must then read every other
   block's partial (or a tree of them) through one SM, ~1 us per level (version 8), or the sums
   wait for a second launch (~3 us and more, above). So this version trades bitwise
   reproducibility for those microseconds: the 114 block sums land in arbitrary order (a few
   ulps of a sum of ~8192 terms: ~1e-6 relative, against an atol of 5e-3), hence
   deterministic = false; version 5 stays the deterministic one for train --deterministic.
3. Every byte of a row in flight at once. Each lane issues its 18 loads of 16 bytes (6 float4 of
   each of dout, inp and dinp) and the row's mean and rstd before any arithmetic: 9 KB per
   warp-row. Version 5 loaded dinp only after the row's two sums, a second DRAM round trip per
   row. The kernel needs 167 registers (__launch_bounds__(384, 1): 168 at most), so 12 warps
   fit an SM: ~110 KB requested per SM per round, where Little's law asks ~14 KB (3 TB/s x ~0.6
   us unloaded latency / 132 SMs) and ~35 KB at a loaded 1.5 us. Loading the next row during the
   current one (version 11 does, in bf16) would take 245 registers here and cost a third of the
   warps, for bytes in flight this kernel already has.
4. Rounds of equal length. A round is one row per row slot of the grid; the grid is sized so that
   every round but the last is full and the last nearly so: rounds = cdiv(N, SMS x 12 warps) and
   groups = cdiv(N, rounds x slots). At the default sizes: 6 rounds, 114 blocks of 12 warps (or
   342 of 4, 228 of 6), every warp 6 rows but the last few. A full wave of 132 x 12 = 1584 warps
   would do 5.17 rows each: a sixth round at 17% of the machine, a whole DRAM round trip for a
   sixth of the rows. Each round the grid works on one contiguous band of rows.
5. Wider rows (GPT-2 medium to XL, C = 1024 to 1600): a row takes WPR = cdiv(C, 768) warps of the
   block (kernels _w2 and _w3, C <= 2304), each with the same 6 float4 a lane; the two row sums
   cross the WPR warps through shared memory with one barrier a round (the slots alternate
   between two buffers, so a round's reads never race the next round's writes). WPR is a
   template constant: with it known the pack offsets are immediates and all three kernels stay
   inside 168 registers with no spills on sm_80 and sm_90 (a runtime WPR spilled).

Prediction: ~38 us for the row pass (the model above; the rows are now the only traffic) plus
about 1 us at the end: the block's sums cross shared memory once (12 warps x 6 KB written and
read back, ~0.65 us of an SM's 128 B/clock) and the atomics follow: 38-40 us, 1.06-1.1x the
copy's speed, against version 5's 51.5 us. The model was fitted on kernels that read two bytes
for each one written; mixes of one to one run ~3 us above it (the copy itself: 42.4 us for
39.4), so a 3:1 mix should not, but if it does, 41-42 us is still at the copy. The row code is
shared with version 11 (bf16) in kernels/common/layernorm_backward_rows.cuh.
"""
# 16-byte rows (C % 4 == 0: cudaMalloc'd buffers are 256-byte aligned); a row takes at most three
# warps of 768 columns. Every block size keeps 12 warps per SM (3, 2 or 1 blocks).
preconditions = ["C % 4 == 0", "C <= 2304"]
block_sizes = [128, 192, 384]
deterministic = false

[derived]
warps_per_row = "cdiv(C, 768)"
row_slots = "(block_size // 32) // warps_per_row"  # rows a block works on at once
blocks_per_sm = "12 // (block_size // 32)"         # 12 warps of <= 168 registers per SM
rounds = "cdiv(N, SMS * blocks_per_sm * row_slots)"
groups = "cdiv(N, rounds * row_slots)"             # as few blocks as keep every round full

[[launch]]
kernel = "layernorm_backward10_w1"
when = "warps_per_row == 1"
grid = "groups"
block = "block_size"
shared = "4 * (128 + 2 * C * row_slots)"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward10_w2"
when = "warps_per_row == 2"
grid = "groups"
block = "block_size"
shared = "4 * (128 + 2 * C * row_slots)"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "layernorm_backward10_w3"
when = "warps_per_row == 3"
grid = "groups"
block = "block_size"
shared = "4 * (128 + 2 * C * row_slots)"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]
*/
// ---- begin layernorm_backward_rows.cuh ----
// layernorm_backward_rows.cuh: the one pass over the rows that layernorm_backward versions 10
// (fp32) and 11 (bf16) share: dinp += its row formula, and each block's column sums of dout and
// dout * xhat handed out, one float per column, for the version to add into dbias and dweight.
//
// Shared because the two versions differ only in the width of a 16-byte pack (4 floats or 8 bf16)
// and in where a block's column sums go (fp32: atomics into dweight and dbias; bf16: atomics into
// an fp32 accumulator, then one rounding by the last block). Version 10's header tells the design.
//
// Pack16<T>: T's 16-byte pack (float4 or Pack8), its width P (4 or 8); load16 / load16_stream /
// store16_stream move one pack, widen16 / the store narrow it to and from P floats (bf16: exact
// widening, one rounding to nearest even on the way back).
//
// layernorm_backward_rows<T, VEC, WPR, PREFETCH>(dinp, dout, inp, weight, mean, rstd, N, C, smem,
//                                               add_total)
//   * A row of C values is C/P packs. Each lane holds VEC packs of a row; the versions use
//     VEC * P = 24 values, so a warp covers 768 columns and a row takes WPR = cdiv(C, 768) warps
//     (a compile-time 1, 2 or 3: with it known the pack offsets are immediates, which keeps the
//     kernels inside 168 registers). Lane `lane` of part q (0 <= q < WPR) of a row's warps owns
//     packs k * 32 * WPR + 32 * q + lane, k < VEC: the same columns in every row, so its dbias and
//     dweight sums (2 * VEC * P floats) stay in registers for the whole kernel.
//   * Warp w of the block works on row slot w / WPR (slots = warps / WPR; a leftover warp idles).
//     Round i, slot s of block b takes row i * gridDim.x * slots + b * slots + s: each round the
//     grid covers one contiguous band of rows. Every block runs the same number of rounds
//     (cdiv(N, gridDim.x * slots)), so the barrier inside a round (WPR > 1 only) is reached by all.
//   * PREFETCH: the next row's dout, inp and dinp are loaded before the current row is worked on
//     (twice the row registers).
//   * smem: dynamic shared memory of 4 * (128 + 2 * C * slots) bytes, 16-byte aligned: [0, 128)
//     floats for the WPR > 1 row sums (two rounds' worth, so one barrier a round suffices), then
//     slots rows of 2 * C floats for the block's column sums. Passed in because the kernel's file
//     declares its extern __shared__ array.
//   * add_total(e, total) is called once for every e in [0, 2C) by one thread of the block, after
//     the block's rows are done: e < C is column e of dbias's sum, e >= C column e - C of
//     dweight's. total adds the block's slots in slot order. Threads take e = threadIdx.x,
//     threadIdx.x + blockDim.x, ...: consecutive threads, consecutive columns.
//   * Preconditions: C % P == 0 (16-byte aligned rows), C <= 32 * VEC * P * WPR, blockDim.x a
//     multiple of 32 with at least WPR warps and at most 32 (the row sums' slots). Every thread
//     of the block must call (barriers).

#ifndef KERNELS_COMMON_LAYERNORM_BACKWARD_ROWS_CUH
#define KERNELS_COMMON_LAYERNORM_BACKWARD_ROWS_CUH
// ---- begin bf16.cuh ----
// bf16.cuh: bfloat16 storage for the bf16 versions: the type, 128-bit packs of eight, and
// conversions, so every bf16 kernel moves memory the same way.
//
// Shared because each bf16 version of a memory-bound family reads and writes 16 bytes per thread
// per access (eight bf16 values), converts to float for its arithmetic and back to bf16 to store.
//
// bf16 (= __nv_bfloat16): 1 sign, 8 exponent, 7 mantissa bits; float's range, ~3 significant
//   digits. Arithmetic is done in float; only storage is bf16.
// Pack8: eight bf16 in 16 bytes, aligned to 16. load8/store8 are plain 128-bit accesses;
//   load8_stream/store8_stream use the streaming cache hints (__ldcs/__stcs: data touched once,
//   evict first) for inputs and outputs no later kernel of the same launch reads again.
//   The pointer must be 16-byte aligned: an index that is a multiple of 8 elements from a
//   cudaMalloc'd base.
// to_float / to_bf16: the conversions, round to nearest even.

#ifndef KERNELS_COMMON_BF16_CUH
#define KERNELS_COMMON_BF16_CUH

#include <cuda_bf16.h>

typedef __nv_bfloat16 bf16;

struct alignas(16) Pack8 {
    bf16 v[8];
};

__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ Pack8 load8(const bf16* p) {
    Pack8 out;
    *reinterpret_cast<int4*>(&out) = *reinterpret_cast<const int4*>(p);
    return out;
}

__device__ __forceinline__ void store8(bf16* p, const Pack8& x) {
    *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&x);
}

__device__ __forceinline__ Pack8 load8_stream(const bf16* p) {
    Pack8 out;
    *reinterpret_cast<int4*>(&out) = __ldcs(reinterpret_cast<const int4*>(p));
    return out;
}

__device__ __forceinline__ void store8_stream(bf16* p, const Pack8& x) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&x));
}

#endif  // KERNELS_COMMON_BF16_CUH

// ---- end bf16.cuh ----
// ---- begin reduce.cuh ----
// reduce.cuh: warp and block reductions of floats (sum and max).
//
// Shared because the same five-shuffle butterfly and the same two-level block reduction were
// written out in more than a dozen versions across seven families. The versions whose lesson is
// the reduction itself (layernorm_forward 5, softmax_forward 3 and 4, reduce 5, and
// matmul_backward_bias 2's inline loop) still write it out; every other version includes this
// header.
//
// warp_sum<LANES>(v), warp_max<LANES>(v)
//   An xor butterfly over aligned groups of LANES lanes (LANES a power of two <= 32; the default
//   is the whole warp). Every lane of a group gets the group's result. The shuffles use the full
//   mask: all 32 lanes of the warp must make the call (a warp may only leave early as a whole).
//
// block_sum(v), block_max(v)
//   Over every thread of the block: each warp reduces with warp_sum/warp_max, one shared slot per
//   warp, then warp 0 reduces the slots. Every thread gets the result.
//   * blockDim.x must be a multiple of 32 (full warps), at most 1024; every thread must call
//     (there are __syncthreads() inside: never call under a condition that splits the block).
//   * 33 floats of static shared memory (32 warp slots and the result), one buffer for both
//     functions; no dynamic shared memory, so a launch's `shared` does not change.
//   * The barrier after the warp step also orders every thread's earlier shared-memory writes
//     before anything after the call; the last barrier frees the slots, so calls may follow
//     each other directly.

#ifndef KERNELS_COMMON_REDUCE_CUH
#define KERNELS_COMMON_REDUCE_CUH

template <int LANES = 32>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

template <int LANES = 32>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

// The two-level block reduction behind block_sum and block_max (is_max is a constant at every
// call site, so the unused branches compile away).
__device__ __forceinline__ float block_reduce(float v, bool is_max) {
    __shared__ float slots[33];  // [0, 32): one per warp; [32]: the result
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) slots[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < warps ? slots[lane] : (is_max ? -INFINITY : 0.0f);
        w = is_max ? warp_max(w) : warp_sum(w);
        if (lane == 0) slots[32] = w;
    }
    __syncthreads();
    float result = slots[32];
    __syncthreads();  // the slots are free for the next call
    return result;
}

__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, false); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, true); }

#endif  // KERNELS_COMMON_REDUCE_CUH

// ---- end reduce.cuh ----

template <class T> struct Pack16;
template <> struct Pack16<float> {
    typedef float4 type;
    static constexpr int P = 4;
};
template <> struct Pack16<bf16> {
    typedef Pack8 type;
    static constexpr int P = 8;
};

__device__ __forceinline__ float4 load16(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ Pack8 load16(const bf16* p) { return load8(p); }
__device__ __forceinline__ float4 load16_stream(const float* p) { return __ldcs(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ Pack8 load16_stream(const bf16* p) { return load8_stream(p); }

__device__ __forceinline__ void widen16(const float4& v, float (&f)[4]) {
    f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
}
// bf16 is the top half of a float: widening is a shift or a mask of each 32-bit word (value 2i
// is the low half of word i). Done on words, not on the bf16 fields, so that the compiler keeps
// the packs in 32-bit registers (on the fields it moved 16-bit halves and spilled them).
__device__ __forceinline__ void widen16(const Pack8& v, float (&f)[8]) {
    const unsigned* u = reinterpret_cast<const unsigned*>(&v);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(u[i] << 16);
        f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ void store16_stream(float* p, const float (&f)[4]) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(f[0], f[1], f[2], f[3]));
}
__device__ __forceinline__ void store16_stream(bf16* p, const float (&f)[8]) {
    Pack8 out;
    __nv_bfloat162* two = reinterpret_cast<__nv_bfloat162*>(out.v);
#pragma unroll
    for (int j = 0; j < 4; j++) two[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    store8_stream(p, out);
}

// One row's share of a lane: its VEC packs of dout, inp and dinp, and the row's mean and rstd.
// Packs past the row and rows past N are zeros (m = s = 0): they add nothing to any sum.
template <class T, int VEC>
struct RowShare {
    typename Pack16<T>::type g[VEC], x[VEC], d[VEC];
    float m, s;

    __device__ __forceinline__ void load(const T* dout, const T* inp, const T* dinp, const float* mean,
                                         const float* rstd, int row, bool valid, int first, int step,
                                         int CP, int C) {
        constexpr int P = Pack16<T>::P;
        const typename Pack16<T>::type zero = {};
        size_t offset = (size_t)row * C;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int p = k * step + first;
            bool ok = valid && p < CP;
            g[k] = ok ? load16_stream(dout + offset + (size_t)p * P) : zero;
            x[k] = ok ? load16_stream(inp + offset + (size_t)p * P) : zero;
            d[k] = ok ? load16_stream(dinp + offset + (size_t)p * P) : zero;
        }
        m = valid ? mean[row] : 0.0f;
        s = valid ? rstd[row] : 0.0f;
    }
};

template <class T, int VEC, int WPR, bool PREFETCH, class AddTotal>
__device__ __forceinline__ void layernorm_backward_rows(T* dinp, const T* dout, const T* inp,
                                                        const T* weight, const float* mean,
                                                        const float* rstd, int N, int C, float* smem,
                                                        AddTotal add_total) {
    constexpr int P = Pack16<T>::P;
    typedef typename Pack16<T>::type Pack;
    const Pack zero = {};
    const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int CP = C / P;
    const int slots = warps / WPR, slot = warp / WPR;
    const bool active = slot < slots;
    const int first = (warp % WPR) * 32 + lane, step = 32 * WPR;
    const int band = gridDim.x * slots;  // rows a round
    const int rounds = (N + band - 1) / band;
    float2* row_sums = reinterpret_cast<float2*>(smem);  // [2 rounds][32 warps]
    float* block_sums = smem + 128;                      // [slots][2C]

    float acc_db[VEC][P], acc_dw[VEC][P];
#pragma unroll
    for (int k = 0; k < VEC; k++) {
#pragma unroll
        for (int j = 0; j < P; j++) acc_db[k][j] = acc_dw[k][j] = 0.0f;
    }

    int row = blockIdx.x * slots + slot;
    RowShare<T, VEC> cur;
    cur.load(dout, inp, dinp, mean, rstd, row, active && row < N, first, step, CP, C);
    for (int round = 0; round < rounds; round++, row += band) {
        RowShare<T, VEC> next;
        if constexpr (PREFETCH) {
            int r = row + band;
            next.load(dout, inp, dinp, mean, rstd, r, active && r < N, first, step, CP, C);
        }
        const bool valid = active && row < N;  // the same for the whole warp
        const float m = cur.m, s = cur.s;

        // The row's two sums: of dnorm = weight * dout, and of dnorm * xhat.
        float sum_dn = 0.0f, sum_dnx = 0.0f;
        if (valid) {
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                int p = k * step + first;
                float g[P], x[P], w[P];
                widen16(cur.g[k], g);
                widen16(cur.x[k], x);
                widen16(p < CP ? load16(weight + (size_t)p * P) : zero, w);
#pragma unroll
                for (int j = 0; j < P; j++) {
                    float dn = w[j] * g[j];
                    sum_dn += dn;
                    sum_dnx += dn * ((x[j] - m) * s);
                }
            }
        }
        sum_dn = warp_sum(sum_dn);
        sum_dnx = warp_sum(sum_dnx);
        if (WPR > 1) {  // a row spans WPR warps: add their sums, in part order, in every one of them
            float2* mine = row_sums + (round & 1) * 32;
            if (lane == 0) mine[warp] = make_float2(sum_dn, sum_dnx);
            __syncthreads();
            if (active) {
                sum_dn = sum_dnx = 0.0f;
                for (int q = 0; q < WPR; q++) {
                    float2 t = mine[slot * WPR + q];
                    sum_dn += t.x;
                    sum_dnx += t.y;
                }
            }
        }
        const float mean_dn = sum_dn / C, mean_dnx = sum_dnx / C;

        if (valid) {
            size_t offset = (size_t)row * C;
            // No branch around a pack's work (packs past the row hold zeros and add nothing),
            // only around its store: the compiler may then issue all the weight loads at once.
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                int p = k * step + first;
                float g[P], x[P], w[P], d[P];
                widen16(cur.g[k], g);
                widen16(cur.x[k], x);
                widen16(cur.d[k], d);
                widen16(p < CP ? load16(weight + (size_t)p * P) : zero, w);
#pragma unroll
                for (int j = 0; j < P; j++) {
                    float xhat = (x[j] - m) * s;
                    d[j] += s * (w[j] * g[j] - mean_dn - xhat * mean_dnx);
                    acc_db[k][j] += g[j];
                    acc_dw[k][j] += g[j] * xhat;
                }
                if (p < CP) store16_stream(dinp + offset + (size_t)p * P, d);
            }
        }

        if constexpr (PREFETCH) {
            cur = next;
        } else if (round + 1 < rounds) {
            int r = row + band;
            cur.load(dout, inp, dinp, mean, rstd, r, active && r < N, first, step, CP, C);
        }
    }

    // The block's column sums: each slot's row of 2C floats, written by the lanes that own the
    // columns (float4 stores, consecutive lanes consecutive addresses), then added in slot order.
    if (active) {
        float* mine = block_sums + (size_t)slot * 2 * C;
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            int p = k * step + first;
            if (p < CP) {
#pragma unroll
                for (int h = 0; h < P / 4; h++) {
                    const float* db = acc_db[k] + 4 * h;
                    const float* dw = acc_dw[k] + 4 * h;
                    reinterpret_cast<float4*>(mine + p * P)[h] = make_float4(db[0], db[1], db[2], db[3]);
                    reinterpret_cast<float4*>(mine + C + p * P)[h] = make_float4(dw[0], dw[1], dw[2], dw[3]);
                }
            }
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 2 * C; e += blockDim.x) {
        float total = 0.0f;
        for (int s = 0; s < slots; s++) total += block_sums[(size_t)s * 2 * C + e];
        add_total(e, total);
    }
}

#endif  // KERNELS_COMMON_LAYERNORM_BACKWARD_ROWS_CUH

// ---- end layernorm_backward_rows.cuh ----  // the row pass and the block's column sums

// WPR warps a row (C <= 768 * WPR); a lane holds 6 float4 of each array.
template <int WPR>
__device__ __forceinline__ void layernorm_backward10(float* dinp, float* dweight, float* dbias,
                                                     const float* dout, const float* inp,
                                                     const float* weight, const float* mean,
                                                     const float* rstd, int N, int C) {
    extern __shared__ float4 ln10_smem4[];
    layernorm_backward_rows<float, 6, WPR, false>(
        dinp, dout, inp, weight, mean, rstd, N, C, reinterpret_cast<float*>(ln10_smem4),
        [&](int e, float total) { atomicAdd(e < C ? dbias + e : dweight + (e - C), total); });
}

// 12 warps per SM: the launch bounds hold the registers to 168.
extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward10_w1(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward10<1>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward10_w2(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward10<2>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

extern "C" __global__ void __launch_bounds__(384, 1)
layernorm_backward10_w3(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    layernorm_backward10<3>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
