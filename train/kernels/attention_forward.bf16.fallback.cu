/*
title = "bf16 flash attention, 32 query rows a warp: each K/V fragment feeds two mma, P V a tile behind"
precision = "bf16"
changed = """
Version 8's kernel (mma.m16n8k16, ldmatrix, cp.async, P kept in registers) reorganised around the
two things that bound it, shared-memory traffic and instructions issued per mma:
* A warp owns 32 query rows (two m16 tiles) instead of 16, so every K or V fragment it loads
  with ldmatrix feeds two mma; a block is 4 warps x 32 = 128 query rows (was 64), sharing each
  64-key K/V tile.
* P V runs a tile behind Q K^T: iteration j computes the scores of tile j and, independently,
  o += P_{j-1} V_{j-1}, so the scheduler can interleave those mma with the softmax's MUFU and
  FFMA work inside the warp; the V stream is staged one tile behind the K stream.
* One barrier per tile (was two): the copies for tile j + 2 are issued right after the barrier
  that ends tile j - 1, into the buffers that barrier freed; three K and three V buffers.
* The softmax's reference point moves lazily: o is rescaled (64 FMUL a lane) only when a row's
  maximum passes the reference by more than a factor 2^8: almost only on the first tile.
* The steady state is one straight block of code (compile-time step flags), and whole-tile copies
  take a short address path.
For HS > 64 (head padded to 128), a warp keeps 16 rows (Q and O twice the size) in 64-row blocks,
with the other changes.
"""
why = """
Counts per warp and 64-key tile at HS = 64, from the sm_90 SASS (cuobjdump), the steady state:
  version 8, 16 rows: 64 HMMA, 32 LDSM.x4 (16 KB of shared reads), ~420 instructions (the
    softmax and P V 250, Q K^T 60, the K/V copies 110), 2 barriers for 4 warps: 6.6 issued a mma.
  version 10, 32 rows: 128 HMMA, 32 LDSM.x4 (the same 16 KB), ~600 instructions (the step 523 -
    the 64 rescaling FMULs only when the maximum moved - the copies ~55, the loop ~20), 1 barrier:
    4.7 a mma, and half the shared-memory bytes a mma.
An H100 SM reads 128 B of shared memory a clock: version 8's 16 KB per 64 mma is 128 clocks for
64 x 4096 FLOP, a cap of 2048 FLOP/clk/SM, ~470 TFLOP/s at 1.75 GHz, close enough to what mma.sync
delivers (~2/3 of the 4096 FLOP/clk/SM of wgmma) that the two compete; at 32 rows the cap
doubles. Each SM issues one instruction a clock per scheduler: at 6.6 instructions a mma,
version 8 spends ~6.6 clocks of issue per mma against ~6 of tensor time; 4.7 leaves headroom.
The MUFU.EX2 (16 a clock per SM) are 64 per 128 mma: ~8 clocks each per scheduler, 512 against
~770 of tensor time a tile, overlapped with P V of the previous tile (the lag).
K/V from L2: a block's 16 KB per tile now serves 128 query rows, not 64: at B = 4, T = 1024,
NH = 12, 57 MB instead of 107 MB.
Registers: Q fragments 32, o 64, s 64, the lagging P 32 (bf16 pairs), m and l 8: ptxas uses 255
(no spills), so 2 blocks (8 warps) an SM: 128 threads x 255 x 2 fits 64 K registers. Shared
memory: (128 Q rows + 3 x 64 K + 3 x 64 V rows) x 144 B = 72 KB a block, 144 KB for two.
Fewer warps (8 an SM, version 8 had 16) hide less latency: the lag and the two independent m
tiles per warp are what keep the tensor pipe fed.
Scheduling: query tiles are dispatched longest first (blockIdx.y reversed) and the hardware hands
the next block to the SM that frees a slot: at B = 4 that is 384 blocks of 2..16 key tiles on
264 slots (2 an SM). A model of it (an SM's two blocks share its throughput, one alone runs at
0.65 of it) gives 87% of a perfect balance (93% at B = 8); pairing query tile i with 7 - i in one
block (equal work) gives 192 blocks for 264 slots: 73%. Warps 0-1 of a block finish one tile
before warps 2-3 (their rows end 64 keys earlier); the other block on the SM uses the gap.
Only each warp's diagonal tile is masked; rows past T are computed and not stored; a warp with
no row below T only keeps the barriers.
Prediction (to be measured): if version 8 is bound by issue and shared-memory bandwidth, the
ratios above give 68 us x 4.7 / 6.6 = ~48 us at B = 8 (~270 TFLOP/s, cuDNN 52.1 us) and ~27 us at
B = 4 (~240 TFLOP/s), about cuDNN's time. The risk is latency with 8 warps an SM; PV_LAG = 0 and
RESCALE_SLACK = 0 below measure what the lag and the lazy rescaling are worth.
The copy row is no bar here: attention is compute bound (6.4 GFLOP for 25 MB at B = 4).
"""
preconditions = ["HS <= 128"]

# HS a multiple of 8: 16-byte cp.async rows; others: element-wise loads, the same kernel otherwise.
# HSP = 64 for HS <= 64 (smaller heads zero-padded): 32 rows a warp, 128-row blocks, 3 stages.
# HSP = 128: 16 rows a warp (Q and o would need 192 registers at 32), 64-row blocks, 2 stages
# (3 would take 119 KB, one block an SM).
[[launch]]
kernel = "attention_forward10_hs64"
when = "HS % 8 == 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * (128 + 2 * 3 * 64) * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward10_hs128"
when = "HS % 8 == 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * (64 + 2 * 2 * 64) * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward10_hs64_any"
when = "HS % 8 != 0 and HS <= 64"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * (128 + 2 * 3 * 64) * (64 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]

[[launch]]
kernel = "attention_forward10_hs128_any"
when = "HS % 8 != 0 and HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * (64 + 2 * 2 * 64) * (128 + 8)"
args = ["out", "lse", "qkv", "T", "NH", "HS", "1.4426950408889634 / sqrt(HS)"]
*/
// ---- begin attention_fwd_mma.cuh ----
// attention_fwd_mma.cuh: the warp-level pieces of a bf16 flash-attention forward in which a warp
// owns MT m-tiles of 16 query rows (MT = 1 or 2) and every K / V fragment fetched with ldmatrix
// feeds MT mma instructions; and the P V product can lag the scores by one key tile.
//
// Shared so that a later forward (another tile shape, or the backward's recomputation of P) can
// reuse the fragment maps; attention_forward 10 is their first user. The instructions and their
// fragment layouts are in mma.cuh; the maps below are version 8's (attention_forward
// 8_flash_mma_bf16.cu tells them element by element), generalised to MT m-tiles. No inline PTX
// but mma.cuh's wrappers (and no blockIdx), so the CPU emulator (tests/gpu_emu) runs it as is.
//
// Layouts (g = lane / 4, t = lane % 4):
//   s[mt][n][e]  score of row row0 + 16 mt + g + 8 (e / 2) and key key0 + 8 n + 2 t + (e % 2),
//                for NT = 8 n-tiles of 8 keys (a 64-key tile).
//   o[mt][n][e]  output of the same row and channel 8 n + 2 t + (e % 2), DT = HSP / 8 n-tiles.
//   p[mt][kk][4] the probabilities of keys 16 kk .. 16 kk + 15 as P V's A fragment, bf16 pairs:
//                { s[2kk][0,1], s[2kk][2,3], s[2kk+1][0,1], s[2kk+1][2,3] }.
//   m[mt][r], l[mt][r]  row r (0: g, 1: g + 8) of m-tile mt: the softmax's reference point (a
//                past running maximum, see softmax_tile), kept already scaled (score x sl,
//                sl = log2(e) / sqrt(HS)), and this lane's share of the row sum of 2^(s sl - m).
// Shared-memory tiles: rows of S = HSP + 8 bf16 (HSP + 16 bytes: a 16-mod-128-byte stride, so the
// 8 row addresses of one ldmatrix matrix fall in 8 different 16-byte bank groups).
//
// stage_rows<ROWS, HSP, S, THREADS, ASYNC>(dst, src, row_stride, rows_left, HS)
//   dst[r * S + d] = src[r * row_stride + d] for r < ROWS, d < HSP, zeros where r >= rows_left or
//   d >= HS (zero keys score 0 and zero values add nothing; never NaN). ASYNC: 16-byte cp.async
//   (zero-filled, no read, where invalid; the caller commits and waits), needs HS % 8 == 0 and
//   16-byte aligned rows. Else element by element, synchronously (any HS).
// TilePieces<HSP, S, THREADS>: the same ASYNC copy of a whole 64-row tile with the thread's part of
//   the addresses computed once (see below).
// k_lane<S>(tile), v_lane<S>(tile): this lane's ldmatrix row address in a K / V tile (shared space).
// q_fragments<MT, KT, S>(qf, q_rows): the warp's Q A-fragments, q_rows = its first Q row in shared.
// qk<MT, KT, S>(s, qf, k): s = Q K^T for one 64-key tile (set, not accumulated).
// mask_causal<MT>(s, key0, row0): s = -inf where key > row.
// softmax_tile<MT>(s, p, m, l, alpha, sl, slack): folds the tile into m and l; p = 2^(s sl - m_new)
//   packed to bf16; alpha = 2^(m_old - m_new), by which the caller must rescale o (after adding
//   any P V computed against m_old). m is a reference point, not always the maximum: it moves (to
//   the running maximum) only when a tile's maximum exceeds it by more than slack (0: on every
//   increase), so p <= 2^slack. Returns whether any of this lane's rows moved (alpha != 1): if
//   none did, o needs no rescaling. s is consumed. The final out = o / l and
//   lse = m + log2(l) are exact for any reference point.
// pv<MT, DT, S>(o, p, v): o += P V for one 64-key tile.
// rescale<MT, DT>(o, alpha): o *= alpha, row by row.
// store_rows<MT, PAIRS>(out, lse, o, m, l, row0, b, h, T, NH, HS): the epilogue: the row sums over
//   the 4 lanes, lse = ln sum exp(score / sqrt(HS)) (fp32, lane t == 0), out = o / sum (bf16;
//   PAIRS: two channels in one 4-byte store, needs HS even). Rows >= T are skipped. All 32 lanes
//   must call (shuffles).

#ifndef KERNELS_COMMON_ATTENTION_FWD_MMA_CUH
#define KERNELS_COMMON_ATTENTION_FWD_MMA_CUH

#include <stdint.h>
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
// ---- begin mma.cuh ----
// mma.cuh: warp-level tensor-core instructions (mma.sync, ldmatrix) and asynchronous copies
// (cp.async) as inline PTX, with the fragment layouts that say which lane holds which element.
//
// Shared because every tensor-core version (attention_forward 7 and 8, and any later matmul-like
// kernel that feeds the tensor cores from registers) needs the same few instructions, and the
// layouts below are the part that is easy to get wrong. Everything here is sm_80+ (Ampere, Hopper).
//
// ---- Notation --------------------------------------------------------------------------------
// A warp's 32 lanes are seen as 8 groups of 4:
//     g = lane / 4   ("groupID" in the PTX ISA): 0..7, picks a ROW of A, C and a COLUMN of B
//     t = lane % 4   ("threadID_in_group"):      0..3, picks the columns (the k index) of A and B
// An mma computes D (M x N) = A (M x K) * B (K x N) + C, "row.col": A is read as rows of K, B as
// columns of K. Each lane holds a few elements of each matrix in registers ("its fragment").
// Registers that hold 16-bit elements hold two: the element with the smaller column (A, C) or
// row (B) index sits in the LOW 16 bits.
//
// ---- mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (mma_bf16_16816) -------------------
// A: 16 x 16 bf16, 4 registers of 2:     a[0] = A[g    ][2t, 2t+1]     a[1] = A[g + 8][2t, 2t+1]
//                                        a[2] = A[g    ][2t+8, 2t+9]   a[3] = A[g + 8][2t+8, 2t+9]
//    i.e. the four 8 x 8 quarters of A in the order top-left, bottom-left, top-right, bottom-right,
//    each quarter spread over the warp the same way: lane (g, t) holds row g, columns 2t, 2t+1.
// B: 16 x 8 bf16 (K x N), 2 registers:  b[0] = B[2t, 2t+1  ][g]       b[1] = B[2t+8, 2t+9][g]
//    i.e. the top and bottom 8 x 8 halves of B; lane (g, t) holds column g, rows 2t, 2t+1.
//    If B = K^T for a row-major K (N rows of K elements), B[k][n] = K[n][k]: b[0] is the pair
//    K[g][2t], K[g][2t+1], adjacent in memory. That is what ".col" means.
// C, D: 16 x 8 f32, 4 registers:        c[0], c[1] = C[g    ][2t], C[g    ][2t+1]
//                                        c[2], c[3] = C[g + 8][2t], C[g + 8][2t+1]
//
// ---- mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (mma_tf32_1688) ----------------------
// tf32 elements are 32-bit registers (fp32 bits with the low 13 mantissa bits cleared: to_tf32).
// A: 16 x 8, 4 registers:   a[0] = A[g][t]   a[1] = A[g + 8][t]   a[2] = A[g][t + 4]   a[3] = A[g + 8][t + 4]
// B: 8 x 8 (K x N), 2:      b[0] = B[t][g]   b[1] = B[t + 4][g]
// C, D: 16 x 8 f32: the same layout as for m16n8k16 above.
// Note that A's columns (t, t + 4) differ from C's (2t, 2t + 1): a C fragment cannot be fed back
// as an A fragment directly, unless the k index is renumbered (see attention_forward 7).
//
// ---- ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (ldmatrix_x4, ldmatrix_x4_trans) -------
// Loads four 8 x 8 matrices of 16-bit elements from shared memory, one register per matrix.
// Each matrix row is 8 consecutive elements (16 bytes, 16-byte aligned), and each lane supplies
// the address of ONE row: lanes 0-7 the rows 0-7 of matrix 0, lanes 8-15 those of matrix 1,
// lanes 16-23 matrix 2, lanes 24-31 matrix 3. The rows may be anywhere (any stride).
// Result, register i from matrix i:
//   plain:  lane (g, t) gets row g, elements 2t and 2t+1      (= an A quarter or a B half of K^T)
//   .trans: lane (g, t) gets rows 2t and 2t+1 of column g    (= a B half when B is stored K-major,
//           e.g. V in P V: B[k][n] = V[k][n] with V rows in memory)
// So one ldmatrix_x4 fills a whole m16n8k16 A fragment (matrices = the four quarters, in the
// order above), or the B fragments of two n-tiles (matrices = n-tile 0 top/bottom, n-tile 1
// top/bottom). Bank conflicts: the 8 rows of one matrix are read together; they are conflict-free
// when their start addresses fall in 8 different 16-byte bank groups (row stride = 16 mod 128
// bytes, e.g. a padded row, or an XOR swizzle).
//
// ---- cp.async (cp_async_16, cp_async_4, cp_async_commit, cp_async_wait<N>) --------------------
// cp_async_16(dst, src, valid): copies 16 bytes global -> shared without passing through
// registers (and without L1: .cg). If !valid, src is not read and dst is filled with zeros
// (src-size 0); src must still be a valid-looking address (pass the tensor's base). Both
// addresses 16-byte aligned. The copy is asynchronous: cp_async_commit() closes a group of the
// copies issued so far by this thread; cp_async_wait<N>() waits until at most N of this thread's
// groups are still in flight. Other threads' copies are visible only after a barrier
// (__syncthreads) that follows every thread's wait.
//
// ---- Conversions ----
// to_tf32(x): cvt.rna.tf32.f32, x rounded to the nearest tf32 (10 mantissa bits; ties away from 0).
// pack_bf16x2(lo, hi): two floats rounded to bf16 (nearest even), lo in the low half.

#ifndef KERNELS_COMMON_MMA_CUH
#define KERNELS_COMMON_MMA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

// D = A B + D (accumulates in place).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// `row` is this lane's row address (see the layout above): a generic pointer into shared memory,
// or a 32-bit shared-space address (smem_addr; half the registers of a pointer, and a constant
// offset folds into the instruction).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(row));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4(r, smem_addr(row)); }
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix_x4_trans(r, smem_addr(row)); }

// dst: a generic pointer into shared memory, or its 32-bit shared-space address (smem_addr).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) { cp_async_16(smem_addr(dst), src, valid); }

// cp_async_4(dst, src, valid): the same for 4 bytes (.ca: cached in L1; 16 is the only size .cg
// takes), 4-byte aligned addresses. The backward kernels stage each row's log-sum-exp this way.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
}

__device__ __forceinline__ uint32_t to_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
    return *reinterpret_cast<uint32_t*>(&v);
}

#endif  // KERNELS_COMMON_MMA_CUH

// ---- end mma.cuh ----
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

template <int ROWS, int HSP, int S, int THREADS, bool ASYNC>
__device__ __forceinline__ void stage_rows(bf16* dst, const bf16* src, int row_stride, int rows_left, int HS) {
    if constexpr (ASYNC) {
        constexpr int PER_ROW = HSP / 8;                 // 16-byte pieces per row
        constexpr int ROWS_PER_PASS = THREADS / PER_ROW;
        static_assert(THREADS % PER_ROW == 0 && ROWS % ROWS_PER_PASS == 0, "whole rows, whole passes");
        const int r0 = threadIdx.x / PER_ROW, d = threadIdx.x % PER_ROW * 8;
        const uint32_t to = smem_addr(dst + r0 * S + d);
        // A piece past HS reads nothing (zero-fill), but its address must still lie inside the
        // tensor: it names the row's last real piece instead.
        const bf16* from = src + (size_t)r0 * row_stride + min(d, HS - 8);
        if (rows_left >= ROWS) {  // a whole tile (uniform): no row tests, one add per piece
#pragma unroll
            for (int k = 0; k < ROWS / ROWS_PER_PASS; k++)
                cp_async_16(to + k * ROWS_PER_PASS * S * 2, from + (size_t)k * ROWS_PER_PASS * row_stride, d < HS);
        } else {
#pragma unroll
            for (int k = 0; k < ROWS / ROWS_PER_PASS; k++) {
                const bool valid = r0 + k * ROWS_PER_PASS < rows_left && d < HS;
                const bf16* piece = valid ? from + (size_t)k * ROWS_PER_PASS * row_stride : src;
                cp_async_16(to + k * ROWS_PER_PASS * S * 2, piece, valid);
            }
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * HSP; i += THREADS) {
            const int r = i / HSP, d = i % HSP;
            dst[r * S + d] = r < rows_left && d < HS ? src[(size_t)r * row_stride + d] : to_bf16(0.0f);
        }
    }
}

// TilePieces<HSP, S, THREADS>(head, row_stride, HS): a thread's share of stage_rows' ASYNC copy of a
// whole 64-row tile, with the per-thread part of the addresses computed once: src = the thread's
// first piece in row 0 of `head` (add the tile's offset), copy(dst, src, row_stride) issues its
// four (HSP = 64) or eight (128) 16-byte copies into the tile at shared address dst. Pieces past
// HS are zero-filled from an in-bounds address, as in stage_rows.
template <int HSP, int S, int THREADS>
struct TilePieces {
    static constexpr int PER_ROW = HSP / 8, ROWS_PER_PASS = THREADS / PER_ROW, PASSES = 64 / ROWS_PER_PASS;
    const bf16* src;
    uint32_t offset;  // the thread's first piece in a shared tile, bytes
    bool valid;
    __device__ __forceinline__ TilePieces(const bf16* head, int row_stride, int HS) {
        const int r0 = threadIdx.x / PER_ROW, d = threadIdx.x % PER_ROW * 8;
        src = head + (size_t)r0 * row_stride + min(d, HS - 8);
        offset = (r0 * S + d) * 2;
        valid = d < HS;
    }
    __device__ __forceinline__ void copy(uint32_t dst, const bf16* from, int row_stride) const {
#pragma unroll
        for (int k = 0; k < PASSES; k++)
            cp_async_16(dst + offset + k * ROWS_PER_PASS * S * 2, from + (size_t)k * ROWS_PER_PASS * row_stride,
                        valid);
    }
};

// K: lane l gives key (l % 8) + 8 (l / 16), channel 8 ((l / 8) % 2): the matrices are the b0, b1 of
// n-tile 2p and the b0, b1 of n-tile 2p + 1. V (.trans): key l % 16, channel 8 (l / 16): the b0, b1
// of channel n-tile 2n, then of 2n + 1. Byte offsets of a 16-key / 16-channel step are constants.
template <int S>
__device__ __forceinline__ uint32_t k_lane(const bf16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 8 + 8 * (lane / 16)) * S + 8 * (lane / 8 % 2));
}

template <int S>
__device__ __forceinline__ uint32_t v_lane(const bf16* tile) {
    const int lane = threadIdx.x % 32;
    return smem_addr(tile + (lane % 16) * S + 8 * (lane / 16));
}

template <int MT, int KT, int S>
__device__ __forceinline__ void q_fragments(uint32_t (&qf)[MT][KT][4], const bf16* q_rows) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < KT; kk++)
            ldmatrix_x4(qf[mt][kk], q_rows + (16 * mt + lane % 16) * S + 16 * kk + 8 * (lane / 16));
}

template <int MT, int KT, int S>
__device__ __forceinline__ void qk(float (&s)[MT][8][4], const uint32_t (&qf)[MT][KT][4], uint32_t k) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KT; kk++)
#pragma unroll
        for (int p = 0; p < 4; p++) {
            uint32_t kb[4];
            ldmatrix_x4(kb, k + (16 * p * S + 16 * kk) * 2);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {  // one fragment, MT mma: the point of MT = 2
                mma_bf16_16816(s[mt][2 * p], qf[mt][kk], kb[0], kb[1]);
                mma_bf16_16816(s[mt][2 * p + 1], qf[mt][kk], kb[2], kb[3]);
            }
        }
}

template <int MT>
__device__ __forceinline__ void mask_causal(float (&s)[MT][8][4], int key0, int row0) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int d = key0 + 2 * t - row0 - g;  // key - row for mt = 0, n = 0, e = 0
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (d + 8 * n + (e & 1) - 16 * mt - 8 * (e >> 1) > 0) s[mt][n][e] = -INFINITY;
}

template <int MT>
__device__ __forceinline__ bool softmax_tile(float (&s)[MT][8][4], uint32_t (&p)[MT][4][4], float (&m)[MT][2],
                                             float (&l)[MT][2], float (&alpha)[MT][2], float sl, float slack) {
    bool grew = false;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float a = fmaxf(s[mt][0][2 * r], s[mt][0][2 * r + 1]), b = fmaxf(s[mt][1][2 * r], s[mt][1][2 * r + 1]);
#pragma unroll
            for (int n = 2; n < 8; n += 2) {  // two chains: half the dependent latency
                a = fmaxf(a, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
                b = fmaxf(b, fmaxf(s[mt][n + 1][2 * r], s[mt][n + 1][2 * r + 1]));
            }
            // The reference point m moves only when the tile's maximum passes it by more than
            // slack: until then p <= 2^slack, harmless in fp32 sums and bf16 P (the same relative
            // rounding at any magnitude), and o needs no rescaling. Every row's first tile holds
            // key 0, which no mask removes: after it m is finite, and s sl - m never inf - inf.
            const float mx = warp_max<4>(fmaxf(a, b)) * sl;
            const bool up = mx > m[mt][r] + slack;  // always on the first tile (m = -inf)
            const float mn = up ? mx : m[mt][r];
            alpha[mt][r] = exp2f(m[mt][r] - mn);  // 1 if m stays; 0 on the first tile
            m[mt][r] = mn;
            grew |= up;
            float sa = 0.0f, sb = 0.0f;
#pragma unroll
            for (int n = 0; n < 8; n++) {  // one FFMA and one MUFU.EX2 a score
                s[mt][n][2 * r] = exp2f(fmaf(s[mt][n][2 * r], sl, -mn));
                s[mt][n][2 * r + 1] = exp2f(fmaf(s[mt][n][2 * r + 1], sl, -mn));
                sa += s[mt][n][2 * r];
                sb += s[mt][n][2 * r + 1];
            }
            l[mt][r] = fmaf(l[mt][r], alpha[mt][r], sa + sb);
        }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            p[mt][kk][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            p[mt][kk][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            p[mt][kk][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            p[mt][kk][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
    return grew;
}

template <int MT, int DT, int S>
__device__ __forceinline__ void pv(float (&o)[MT][DT][4], const uint32_t (&p)[MT][4][4], uint32_t v) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int n = 0; n < DT / 2; n++) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, v + (16 * kk * S + 16 * n) * 2);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_bf16_16816(o[mt][2 * n], p[mt][kk], vb[0], vb[1]);
                mma_bf16_16816(o[mt][2 * n + 1], p[mt][kk], vb[2], vb[3]);
            }
        }
}

template <int MT, int DT>
__device__ __forceinline__ void rescale(float (&o)[MT][DT][4], const float (&alpha)[MT][2]) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < DT; n++) {
            o[mt][n][0] *= alpha[mt][0];
            o[mt][n][1] *= alpha[mt][0];
            o[mt][n][2] *= alpha[mt][1];
            o[mt][n][3] *= alpha[mt][1];
        }
}

template <int MT, bool PAIRS, int DT>
__device__ __forceinline__ void store_rows(bf16* out, float* lse, const float (&o)[MT][DT][4], const float (&m)[MT][2],
                                           const float (&l)[MT][2], int row0, int b, int h, int T, int NH, int HS) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int C = NH * HS;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = row0 + 16 * mt + g + 8 * r;
            const float sum = warp_sum<4>(l[mt][r]);  // every lane: shuffles before the row test
            if (row >= T) continue;
            const float inv = 1.0f / sum;
            if (t == 0) lse[((size_t)b * NH + h) * T + row] = (m[mt][r] + log2f(sum)) * 0.6931471805599453f;
            bf16* dst = out + ((size_t)b * T + row) * C + (size_t)h * HS;
#pragma unroll
            for (int n = 0; n < DT; n++) {
                const int d = 8 * n + 2 * t;
                const float x = o[mt][n][2 * r] * inv, y = o[mt][n][2 * r + 1] * inv;
                if (PAIRS) {  // HS even: d < HS covers d + 1
                    if (d < HS) *reinterpret_cast<uint32_t*>(dst + d) = pack_bf16x2(x, y);
                } else {
                    if (d < HS) dst[d] = to_bf16(x);
                    if (d + 1 < HS) dst[d + 1] = to_bf16(y);
                }
            }
        }
}

#endif  // KERNELS_COMMON_ATTENTION_FWD_MMA_CUH

// ---- end attention_fwd_mma.cuh ----  // stage_rows, the fragment maps, softmax_tile, pv, store_rows
// (already included: bf16.cuh)
// (already included: mma.cuh)

#define BC 64  // keys per tile
template <bool B>
struct Flag {  // a compile-time yes / no passed by value: step(j, Flag<true>{}, ...)
    static constexpr bool value = B;
};
// Two switches, for measuring what each idea is worth (the tests run both settings):
// RESCALE_SLACK: log2 units; p <= 2^slack before the reference point moves (see softmax_tile);
//   0 rescales o on every increase of a row's maximum.
// PV_LAG: 1 multiplies P V a tile behind Q K^T (see "why"); 0 as versions 7 and 8.
#ifndef RESCALE_SLACK
#define RESCALE_SLACK 8.0f
#endif
#ifndef PV_LAG
#define PV_LAG 1
#endif

// One block: WARPS warps x MT m-tiles x 16 query rows = BR rows, key tiles of BC = 64 keys through
// STAGES shared buffers each for K and V. LAG = 1: iteration j multiplies Q K_j and P_{j-1} V_{j-1}.
template <int HSP, int MT, int WARPS, int STAGES, bool LAG, bool ASYNC>
__device__ __forceinline__ void attention_forward10_body(bf16* out, float* lse, const bf16* qkv, int T, int NH,
                                                         int HS, float sl) {
    constexpr int S = HSP + 8, KT = HSP / 16, DT = HSP / 8;
    constexpr int BR = 16 * MT * WARPS, THREADS = 32 * WARPS, TILE = BC * S;
    constexpr uint32_t TILE_BYTES = TILE * sizeof(bf16);
    static_assert(16 * MT <= BC && BR % BC == 0, "a warp's rows inside one key tile; blocks of whole key tiles");
    static_assert(STAGES >= 2, "at least double buffering");
    extern __shared__ float4 smem4[];
    bf16* Qs = reinterpret_cast<bf16*>(smem4);
    bf16* Ks = Qs + BR * S;           // STAGES buffers of BC rows
    bf16* Vs = Ks + STAGES * TILE;    // STAGES buffers of BC rows

    const int warp = threadIdx.x / 32;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;  // the longest query tiles first
    const int row0 = q0 + 16 * MT * warp;               // this warp's first query row
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int C = NH * HS, rs = 3 * C;
    const bf16* q_base = qkv + (size_t)b * T * rs + (size_t)h * HS;  // q of row 0 of this head
    // Key tiles: the block's up to its last valid row; the warp's up to its own diagonal tile, which
    // holds all its rows (they lie in one 64-aligned range), the only tile it masks. A warp past
    // T has none (it only keeps the barriers).
    const int tiles = (min(q0 + BR, T) - 1) / BC + 1;
    const int mine = row0 < T ? row0 / BC + 1 : 0;

    // Copy group i carries K_i and V_{i - LAG}: issued STAGES - 1 tiles ahead, into the buffers
    // that tile i - STAGES used (free since the barrier that ended the iteration reading them).
    // The steady state (tile i whole, so tile i - LAG too; 16-byte copies) takes a short path:
    // this thread's pieces of the two tiles are one pointer and one add apart.
    const TilePieces<HSP, S, THREADS> piece(q_base, rs, HS);
    auto issue = [&](int i) {
        const int iv = i - LAG;
        if (ASYNC && iv >= 0 && i < tiles && (i + 1) * BC <= T) {
            const bf16* k_src = piece.src + (size_t)i * BC * rs + C;
            piece.copy(smem_addr(Ks + i % STAGES * TILE), k_src, rs);
            piece.copy(smem_addr(Vs + iv % STAGES * TILE), k_src + (C - (size_t)LAG * BC * rs), rs);
        } else {
            if (i < tiles)
                stage_rows<BC, HSP, S, THREADS, ASYNC>(Ks + i % STAGES * TILE, q_base + (size_t)i * BC * rs + C, rs,
                                                       T - i * BC, HS);
            if (iv >= 0 && iv < tiles)
                stage_rows<BC, HSP, S, THREADS, ASYNC>(Vs + iv % STAGES * TILE, q_base + (size_t)iv * BC * rs + 2 * C,
                                                       rs, T - iv * BC, HS);
        }
        cp_async_commit();  // possibly empty: one group per tile keeps the wait counts constant
    };

    // Group 0: Q and the first K (and V); then the other STAGES - 2 lookahead groups.
    stage_rows<BR, HSP, S, THREADS, ASYNC>(Qs, q_base + (size_t)q0 * rs, rs, T - q0, HS);
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) issue(i);
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    uint32_t qf[MT][KT][4];
    q_fragments<MT, KT, S>(qf, Qs + (row0 - q0) * S);
    const uint32_t k_base = k_lane<S>(Ks), v_base = v_lane<S>(Vs);

    float o[MT][DT][4], m[MT][2], l[MT][2];
    uint32_t p[MT][4][4];  // LAG: the previous tile's probabilities, waiting for their V
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
        for (int n = 0; n < DT; n++) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
    }

    // One key tile of this warp's work: QK (scores of tile j: mask if its diagonal), PV (o += P V
    // of tile j - LAG). Compile-time flags, so the steady state is one straight block of code.
    auto step = [&](int j, auto QK, auto MASK, auto PV) {
        float s[MT][8][4], alpha[MT][2];
        uint32_t pn[MT][4][4];
        bool grew = false;
        if constexpr (decltype(QK)::value) {
            qk<MT, KT, S>(s, qf, k_base + j % STAGES * TILE_BYTES);
            if constexpr (decltype(MASK)::value) mask_causal<MT>(s, j * BC, row0);
            grew = softmax_tile<MT>(s, pn, m, l, alpha, sl, RESCALE_SLACK);
        }
        if constexpr (LAG) {
            // Independent of the softmax above: the scheduler may interleave these mma with its
            // MUFU and FFMA work. o is rescaled only after it has taken P_{j-1} V_{j-1} (which
            // is relative to the old maximum).
            if constexpr (decltype(PV)::value) pv<MT, DT, S>(o, p, v_base + (j - 1) % STAGES * TILE_BYTES);
            if constexpr (decltype(QK)::value) {
                if (grew) rescale<MT, DT>(o, alpha);
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
#pragma unroll
                        for (int e = 0; e < 4; e++) p[mt][kk][e] = pn[mt][kk][e];
            }
        } else if constexpr (decltype(QK)::value) {
            if (grew) rescale<MT, DT>(o, alpha);
            pv<MT, DT, S>(o, pn, v_base + j % STAGES * TILE_BYTES);
        }
    };
    using Y = Flag<true>;
    using N = Flag<false>;

    for (int j = 0; j < tiles + LAG; j++) {
        issue(j + STAGES - 1);
        const bool qk_on = j < mine, diag = j == mine - 1, pv_on = j >= LAG && j - LAG < mine;
        if (qk_on && !diag && pv_on) step(j, Y{}, N{}, Y{});  // the steady state
        else if (qk_on && diag && pv_on) step(j, Y{}, Y{}, Y{});
        else if (qk_on && !diag) step(j, Y{}, N{}, N{});       // LAG: the first tile
        else if (qk_on) step(j, Y{}, Y{}, N{});                // LAG: the first tile is the diagonal
        else if (pv_on) step(j, N{}, N{}, Y{});                // LAG: the last tile's P V
        cp_async_wait<STAGES - 2>();  // group j + 1 (tile j + 1) has landed, this thread's part
        __syncthreads();              // every thread's part; and tile j's buffers are free
    }

    store_rows<MT, ASYNC>(out, lse, o, m, l, row0, b, h, T, NH, HS);
}

// Two blocks an SM: ptxas may use up to 255 registers (65536 / 256 threads), which the 32-row
// warp needs (see "why"); the shared memory of two blocks fits (144 KB, or 170 KB at HSP 128).
#define ENTRY(name, HSP, MT, STAGES, ASYNC)                                                         \
    extern "C" __global__ void __launch_bounds__(128, 2)                                          \
    name(bf16* out, float* lse, const bf16* qkv, int T, int NH, int HS, float sl) {                \
        attention_forward10_body<HSP, MT, 4, STAGES, PV_LAG, ASYNC>(out, lse, qkv, T, NH, HS, sl); \
    }
ENTRY(attention_forward10_hs64, 64, 2, 3, true)
ENTRY(attention_forward10_hs128, 128, 1, 2, true)
ENTRY(attention_forward10_hs64_any, 64, 2, 3, false)
ENTRY(attention_forward10_hs128_any, 128, 1, 2, false)
