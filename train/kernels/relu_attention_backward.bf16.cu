/*
title = "bf16 tensor cores: mma.sync m16n8k16 fed by ldmatrix, streamed tiles by cp.async, a dK/dV kernel and a dQ kernel (no atomics)"
precision = "bf16"
changed = """
From version 2: bf16 storage (qkv, dout, dqkv) and every product on the tensor cores:
mma.sync.m16n8k16 (bf16 x bf16 -> fp32) fed by ldmatrix from padded shared tiles, instead of
fp32 FMAs on 4 x 4 register micro-tiles. Each warp owns 16 rows of the block's 64; the streamed
tiles are double-buffered by cp.async. dQ no longer goes through atomics and a memset: a second
kernel owns 64 queries per block, walks the key tiles up to the diagonal, recomputes S and dP
there and sums dQ = dS K in registers, so every element of dqkv is written once, by one thread,
in a fixed order (deterministic). Head sizes up to 128 (version 2: 64, multiples of 4): the
channel tile is 64 or 128 (HS zero-padded), chosen by the launch's `when`.
From attention_backward 7 (the softmax flash backward in bf16): no lse and no D = rowsum(dout *
out) (so no prep kernel and no out argument), P = relu(S) and dS = [S > 0] dP instead of the
exponentials; the mask is the exact sign of the fp32 q.k, tested before any scaling. dQ by
recomputation in its own kernel (as attention_backward 8 does) instead of fp32 atomics into a
scratch. P and dS enter the tensor cores unscaled (relu(S), [S > 0] dP rounded to bf16); the one
factor scale / T is applied in fp32 to dQ, dK and dV on their way out.
"""
why = """
Version 2 spends 64 FFMAs per thread per 4 x 4 x 4 step of each of its five 64 x 64 x 64
products; here a warp issues 32 mma instructions (16 x 64 x 64) per product, and the H100's bf16
tensor cores have ~15x the fp32 FMA rate. bf16 also halves the bytes of every tile.
What keeps them fed:
(1) Operands come from shared memory by ldmatrix, four 8 x 8 blocks per instruction, already in
fragment order; rows padded to HSP + 8 bf16 (144 or 272 bytes) make every ldmatrix and cp.async
conflict-free.
(2) A product's result feeds the next one from registers: the accumulator layout of S^T and dP^T
(the warp's 16 keys x the tile's queries) is the A-operand layout of the next mma, so relu(S^T)
and [S > 0] dP^T go straight into dV += P^T dout and dK += dS^T Q without shared memory (the dQ
kernel likewise feeds dS into dQ += dS K). No shared-memory round trip of dS and one barrier per
tile (attention_backward 7: two).
(3) The next streamed tile pair is copied by cp.async into the second buffer while the current one
is computed; the block's own rows stay in shared memory for its lifetime, and its outputs in fp32
registers until they are written once, as bf16.
(4) The ReLU is one compare per score; the causal mask only on tiles that touch the diagonal.
Recomputing S and dP for dQ costs 7 products per (key tile, query tile) pair instead of 5 (1.4x
the tensor work) but removes version 2's 64 x 64 fp32 atomics per pair, the memset of dqkv, and
attention_backward 7's fp32 dQ scratch with its zeroing and conversion passes. Blocks with the
most work are launched first (low key tiles, high query tiles).
Head sizes that are not a multiple of 8 (rows not 16-byte aligned) take element-by-element loads
and stores instead of cp.async; the tiles and fragments are the same. HS > 64 uses 128-channel
tiles with 32-row streamed tiles (halving the score fragments keeps the fp32 dK and dV
accumulators, 128 registers a thread, in registers).
"""
preconditions = ["HS <= 128"]  # channel tile 64 (HS <= 64) or 128, HS zero-padded
block_sizes = [128]            # 4 warps, 16 own rows each: 64 keys (dK/dV) or 64 queries (dQ) per block

# HS <= 64: 64-channel tiles (pitch 72), 64-row streamed tiles. Shared memory: the block's own
# two 64-row tiles plus two buffers of two streamed tiles.
[[launch]]
kernel = "relu_attention_backward3_dkdv64"
when = "HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 72 * (2 * 64 + 4 * 64)"
args = ["dqkv", "dout", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

[[launch]]
kernel = "relu_attention_backward3_dq64"
when = "HS <= 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 72 * (2 * 64 + 4 * 64)"
args = ["dqkv", "dout", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

# 64 < HS <= 128: 128-channel tiles (pitch 136), 32-row streamed tiles.
[[launch]]
kernel = "relu_attention_backward3_dkdv128"
when = "HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 136 * (2 * 64 + 4 * 32)"
args = ["dqkv", "dout", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]

[[launch]]
kernel = "relu_attention_backward3_dq128"
when = "HS > 64"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 136 * (2 * 64 + 4 * 32)"
args = ["dqkv", "dout", "qkv", "T", "NH", "HS", "1.0 / sqrt(HS) / T"]
*/
// ---- begin relu_attention_bwd_bf16.cuh ----
// relu_attention_bwd_bf16.cuh: the warp-level pieces of relu_attention_backward 3 (bf16 tensor
// cores), written for a head-size tile HSP of 64 or 128 channels.
//
// The helpers in attention_backward_bf16.cuh are fixed at 64 channels (AB_DH, AB_PITCH); these
// are the same fragment products with the channel count and the row pitch as template
// parameters, so that one kernel template covers every HS <= 128. Layouts follow mma.cuh.
//
// Tiles in shared memory: ROWS rows (tokens) of one head's HS channels, zero padded to HSP
// channels and zero filled past the sequence end, as bf16 rows of RB_PITCH(HSP) = HSP + 8
// elements (144 or 272 bytes: 16 mod 128, so the 8 rows of an ldmatrix 8 x 8 matrix fall in 8
// different 16-byte bank groups: conflict-free).
//
// rb_load_tile<ROWS, HSP, THREADS>(s, base, stride, row0, T, HS, any)
//   Rows row0 .. row0 + ROWS - 1 of the matrix at base (row r at base + r * stride) into tile s:
//   by 16-byte cp.async when HS % 8 == 0 (zero-filled copies read nothing; `any` is a valid
//   address for them), else element by element with plain loads and stores. The caller commits
//   and waits; the tile is visible to the block after the caller's next __syncthreads().
//
// rb_abt<HSP, NT>(x, y, a_rows, b_rows, c_rows, d_rows): two products over channels at once,
//   x (16 x 8 NT) += A . B^T and y += C . D^T, with A, C the 16 rows at a_rows, c_rows (a warp's
//   own rows) and B, D the 8 NT rows at b_rows, d_rows (the streamed tile). B[k][n] = B_tile[n][k]
//   runs along channels, the tile's own row order: plain ldmatrix (see the addressing below).
//
// rb_ab<HSP, NF>(acc, f, tile): acc (16 x HSP) += F (16 x 16 NF, NF A fragments) . tile[0..16 NF)
//   A product over the tile's rows: B[k][n] = tile[k][n] runs down the tile's columns, so
//   ldmatrix .trans.
//
// rb_to_a<NT>(f, c): a 16 x 8 NT fp32 accumulator (C layout) as NT / 2 bf16 A fragments over its
//   columns: f[kk] = {c[2kk][0,1], c[2kk][2,3], c[2kk+1][0,1], c[2kk+1][2,3]}, rounded to bf16
//   (nearest even): C's (row g, columns 8j + 2t, + 1) is exactly A's (row g, k 2t, 2t + 1) of
//   k-block j / 2.
//
// rb_store<NT>(dst, stride, row0, T, HS, c, scale): a 16 x 8 NT accumulator times scale, as bf16,
//   to dst[(row0 + r) * stride + col] for rows < T and columns < HS; one 32-bit store a pair when
//   HS is even (every index even), two 16-bit stores otherwise.

#ifndef KERNELS_COMMON_RELU_ATTENTION_BWD_BF16_CUH
#define KERNELS_COMMON_RELU_ATTENTION_BWD_BF16_CUH
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

template <int HSP>
struct RbTile {
    static constexpr int PITCH = HSP + 8;
};

template <int ROWS, int HSP, int THREADS>
__device__ __forceinline__ void rb_load_tile(bf16* s, const bf16* base, size_t stride, int row0, int T, int HS,
                                             const bf16* any) {
    constexpr int P = RbTile<HSP>::PITCH;
    if (HS % 8 == 0) {
        constexpr int CHUNKS = ROWS * (HSP / 8);
#pragma unroll
        for (int k = 0; k < (CHUNKS + THREADS - 1) / THREADS; k++) {
            const int i = threadIdx.x + k * THREADS;
            if (CHUNKS % THREADS != 0 && i >= CHUNKS) break;
            const int r = i / (HSP / 8), c = 8 * (i % (HSP / 8));
            const bool valid = row0 + r < T && c < HS;
            const bf16* src = base + (size_t)(row0 + r) * stride + c;
            cp_async_16(s + r * P + c, valid ? src : any, valid);
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * HSP; i += THREADS) {
            const int r = i / HSP, c = i % HSP;
            s[r * P + c] = row0 + r < T && c < HS ? base[(size_t)(row0 + r) * stride + c] : to_bf16(0.0f);
        }
    }
}

// A fragments: lane L addresses row L % 8 + 8 ((L / 8) % 2), channel 16 kk + 8 (L / 16): matrices
// (rows 0-7, +0), (rows 8-15, +0), (rows 0-7, +8), (rows 8-15, +8) = a[0..3].
// B fragments of two n-tiles j, j + 1: lane L addresses row 8 j + L % 8 + 8 (L / 16), channel
// 16 kk + 8 ((L / 8) % 2): matrices (rows 8j.., +0) = b[0] of j, (rows 8j.., +8) = b[1] of j,
// (rows 8j+8.., +0) = b[0] of j+1, (rows 8j+8.., +8) = b[1] of j+1.
template <int HSP, int NT>
__device__ __forceinline__ void rb_abt(float (&x)[NT][4], float (&y)[NT][4], const bf16* a_rows, const bf16* b_rows,
                                       const bf16* c_rows, const bf16* d_rows) {
    static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4 each)");
    constexpr int P = RbTile<HSP>::PITCH;
    const int lane = threadIdx.x % 32;
    const int aoff = (lane % 8 + 8 * ((lane / 8) % 2)) * P + 8 * (lane / 16);
    const int boff = (lane % 8 + 8 * (lane / 16)) * P + 8 * ((lane / 8) % 2);
#pragma unroll 2  // not fully: at HSP = 128 a full unroll of rb_abt pushed dkdv128 to 255 registers and spills
    for (int kk = 0; kk < HSP / 16; kk++) {
        unsigned a[4], c[4];
        ldmatrix_x4(a, a_rows + aoff + 16 * kk);
        ldmatrix_x4(c, c_rows + aoff + 16 * kk);
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            unsigned b[4], d[4];
            ldmatrix_x4(b, b_rows + boff + 8 * j * P + 16 * kk);
            mma_bf16_16816(x[j], a, b[0], b[1]);
            mma_bf16_16816(x[j + 1], a, b[2], b[3]);
            ldmatrix_x4(d, d_rows + boff + 8 * j * P + 16 * kk);
            mma_bf16_16816(y[j], c, d[0], d[1]);
            mma_bf16_16816(y[j + 1], c, d[2], d[3]);
        }
    }
}

// B fragments (.trans) of n-tiles n, n + 1 from rows 16 kk ..: lane L addresses row
// 16 kk + L % 8 + 8 ((L / 8) % 2), column 8 n + 8 (L / 16): matrices (rows 0-7, col +0) = b[0] of
// n, (rows 8-15, +0) = b[1] of n, (rows 0-7, +8) = b[0] of n+1, (rows 8-15, +8) = b[1] of n+1;
// .trans hands lane (g, t) rows 2t, 2t + 1 of column g, as b[] wants.
template <int HSP, int NF>
__device__ __forceinline__ void rb_ab(float (&acc)[HSP / 8][4], const unsigned (&f)[NF][4], const bf16* tile) {
    constexpr int P = RbTile<HSP>::PITCH;
    const int lane = threadIdx.x % 32;
    const bf16* p = tile + (lane % 8 + 8 * ((lane / 8) % 2)) * P + 8 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < NF; kk++) {
#pragma unroll
        for (int n = 0; n < HSP / 8; n += 2) {
            unsigned b[4];
            ldmatrix_x4_trans(b, p + 16 * kk * P + 8 * n);
            mma_bf16_16816(acc[n], f[kk], b[0], b[1]);
            mma_bf16_16816(acc[n + 1], f[kk], b[2], b[3]);
        }
    }
}

template <int NT>
__device__ __forceinline__ void rb_to_a(unsigned (&f)[NT / 2][4], const float (&c)[NT][4]) {
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        f[kk][0] = pack_bf16x2(c[2 * kk][0], c[2 * kk][1]);
        f[kk][1] = pack_bf16x2(c[2 * kk][2], c[2 * kk][3]);
        f[kk][2] = pack_bf16x2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        f[kk][3] = pack_bf16x2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

template <int NT>
__device__ __forceinline__ void rb_store(bf16* dst, size_t stride, int row0, int T, int HS, const float (&c)[NT][4],
                                         float scale) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int col = 8 * n + 2 * t;
        if (col >= HS) continue;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = row0 + g + 8 * half;
            if (row >= T) continue;
            bf16* p = dst + (size_t)row * stride + col;
            if (HS % 2 == 0) {
                *reinterpret_cast<unsigned*>(p) = pack_bf16x2(c[n][2 * half] * scale, c[n][2 * half + 1] * scale);
            } else {
                p[0] = to_bf16(c[n][2 * half] * scale);
                if (col + 1 < HS) p[1] = to_bf16(c[n][2 * half + 1] * scale);
            }
        }
    }
}

#endif  // KERNELS_COMMON_RELU_ATTENTION_BWD_BF16_CUH

// ---- end relu_attention_bwd_bf16.cuh ----  // rb_load_tile, rb_abt, rb_ab, rb_to_a, rb_store

#define RB_WARPS 4
#define RB_THREADS (32 * RB_WARPS)
#define RB_ROWS (16 * RB_WARPS)  // the block's own rows: keys (dK/dV kernel) or queries (dQ kernel)

// One block of either kernel. KEYS: the block owns keys k0 .. k0 + 63 (their K and V rows resident)
// and streams the query tiles (Q, dout) from k0 to T; else it owns queries q0 .. q0 + 63 (Q, dout
// resident) and streams the key tiles (K, V) from 0 up to the diagonal. Warp w owns rows
// rw = r0 + 16 w .. rw + 15. Per streamed tile of N rows, in the warp's registers:
//   X = A B^T, Y = C D^T (16 x N, fp32): KEYS: S^T = K Q^T, dP^T = V dout^T; else S = Q K^T, dP = dout V^T
//   on = [X > 0] and key <= query (X exact: see the family's inputs), P = on X, dS = on Y (bf16)
//   KEYS: dV += P^T dout, dK += dS^T Q;   else: dQ += dS K        (16 x HSP, fp32)
// and scale / T is applied once, at the store. Accumulator element x[j][e] is (own row
// rw + g + 8 (e / 2), streamed row s0 + 8 j + 2 t + e % 2). Rows past T are zero in every tile, so
// their scores are 0 and the ReLU mask already drops them.
template <bool KEYS, int HSP, int N>
__device__ __forceinline__ void relu_bwd3_block(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS,
                                                float scale_T) {
    constexpr int P = RbTile<HSP>::PITCH, NT = N / 8, DT = HSP / 8;
    static_assert(RB_ROWS % N == 0, "streamed tiles must line up with the block's diagonal");
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sA = reinterpret_cast<bf16*>(smem);  // [64][P] own rows: K (KEYS) or Q
    bf16* sC = sA + RB_ROWS * P;               // [64][P] own rows: V or dout
    bf16* sB = sC + RB_ROWS * P;               // [2][N][P] streamed: Q or K
    bf16* sD = sB + 2 * N * P;                 // [2][N][P] streamed: dout or V

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int C = NH * HS;
    const size_t rs = 3 * (size_t)C;  // qkv and dqkv row stride
    const bf16* q = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16* k = q + C;
    const bf16* v = q + 2 * C;
    const bf16* gr = dout + (size_t)b * T * C + (size_t)h * HS;
    // KEYS: low key tiles see the most queries; else high query tiles see the most keys: first.
    const int r0 = RB_ROWS * (KEYS ? (int)blockIdx.y : (int)(gridDim.y - 1 - blockIdx.y));
    const int rw = r0 + 16 * warp;
    const int first = KEYS ? r0 : 0, end = KEYS ? T : min(r0 + RB_ROWS, T);
    const bf16* a_src = KEYS ? k : q;  // stride rs
    const bf16* c_src = KEYS ? v : gr; // stride rs or C
    const bf16* b_src = KEYS ? q : k;  // stride rs
    const bf16* d_src = KEYS ? gr : v; // stride C or rs
    const size_t c_stride = KEYS ? rs : (size_t)C, d_stride = KEYS ? (size_t)C : rs;

    auto stage = [&](int s0, int buf) {  // streamed rows s0 .. s0 + N - 1 into buffer buf: one group
        rb_load_tile<N, HSP, RB_THREADS>(sB + buf * N * P, b_src, rs, s0, T, HS, qkv);
        rb_load_tile<N, HSP, RB_THREADS>(sD + buf * N * P, d_src, d_stride, s0, T, HS, qkv);
        cp_async_commit();
    };
    rb_load_tile<RB_ROWS, HSP, RB_THREADS>(sA, a_src, rs, r0, T, HS, qkv);
    rb_load_tile<RB_ROWS, HSP, RB_THREADS>(sC, c_src, c_stride, r0, T, HS, qkv);
    stage(first, 0);  // one group: the own rows and the first streamed tile

    float acc[DT][4] = {};   // dK (KEYS) or dQ, unscaled
    float accv[DT][4] = {};  // dV (KEYS only), unscaled
    int buf = 0;
    for (int s0 = first; s0 < end; s0 += N, buf ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this tile has landed for every thread, and every warp is done with the
                          // previous one (whose buffer is refilled next)
        if (s0 + N < end) stage(s0 + N, buf ^ 1);
        // A warp with no (key <= query) pair in this tile skips it (warp-uniform).
        if (KEYS ? rw > s0 + N - 1 : s0 > rw + 15) continue;
        const bf16* b_s = sB + buf * N * P;
        const bf16* d_s = sD + buf * N * P;

        float x[NT][4] = {}, y[NT][4] = {};
        rb_abt<HSP, NT>(x, y, sA + 16 * warp * P, b_s, sC + 16 * warp * P, d_s);
        const bool edge = KEYS ? rw + 15 > s0 : s0 + N - 1 > rw;  // the tile touches the diagonal
#pragma unroll
        for (int j = 0; j < NT; j++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int own = rw + g + 8 * (e >> 1), other = s0 + 8 * j + 2 * t + (e & 1);
                const int key = KEYS ? own : other, query = KEYS ? other : own;
                const bool on = x[j][e] > 0.0f && (!edge || key <= query);
                x[j][e] = on ? x[j][e] : 0.0f;
                y[j][e] = on ? y[j][e] : 0.0f;
            }
        }
        unsigned f[NT / 2][4];
        if (KEYS) {
            rb_to_a<NT>(f, x);
            rb_ab<HSP, NT / 2>(accv, f, d_s);  // dV += relu(S)^T dout
        }
        rb_to_a<NT>(f, y);
        rb_ab<HSP, NT / 2>(acc, f, b_s);  // dK += dS^T Q, or dQ += dS K
    }

    bf16* out = dqkv + (size_t)b * T * rs + (size_t)h * HS;
    if (KEYS) {
        rb_store<DT>(out + C, rs, rw, T, HS, acc, scale_T);
        rb_store<DT>(out + 2 * C, rs, rw, T, HS, accv, scale_T);
    } else {
        rb_store<DT>(out, rs, rw, T, HS, acc, scale_T);
    }
}

extern "C" __global__ void __launch_bounds__(RB_THREADS)
relu_attention_backward3_dkdv64(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS, float scale_T) {
    relu_bwd3_block<true, 64, 64>(dqkv, dout, qkv, T, NH, HS, scale_T);
}

extern "C" __global__ void __launch_bounds__(RB_THREADS)
relu_attention_backward3_dq64(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS, float scale_T) {
    relu_bwd3_block<false, 64, 64>(dqkv, dout, qkv, T, NH, HS, scale_T);
}

extern "C" __global__ void __launch_bounds__(RB_THREADS)
relu_attention_backward3_dkdv128(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS, float scale_T) {
    relu_bwd3_block<true, 128, 32>(dqkv, dout, qkv, T, NH, HS, scale_T);
}

extern "C" __global__ void __launch_bounds__(RB_THREADS)
relu_attention_backward3_dq128(bf16* dqkv, const bf16* dout, const bf16* qkv, int T, int NH, int HS, float scale_T) {
    relu_bwd3_block<false, 128, 32>(dqkv, dout, qkv, T, NH, HS, scale_T);
}
