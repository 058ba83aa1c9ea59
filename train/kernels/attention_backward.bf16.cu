/*
title = "version 14 without its prep kernel: each block takes D = dout . out for its own diagonal tile and hands it on"
builds_on = 14
precision = "bf16"
deterministic = true  # version 14's fixed-order dQ sums; D is one dot product a row, written once
changed = """
Version 14's first kernel (D = dout . out for every query row, the tickets zeroed) is gone:
* Key block kb's first query tile is its diagonal tile kb, and every query tile is some block's
  diagonal. So block kb computes D for the 128 rows of tile kb itself, as it starts (16 KB of
  dout and 16 KB of out read, eight lanes a row, while its K, V and first Q / dout tiles are
  still on their way), keeps them in shared memory for its first tile, stores them to D (rows
  padded to whole tiles, zeros past T) and, after the loop's first barrier, raises the tile's
  ready flag (red.release.gpu).
* A block reaches tile i > kb only after i - kb tiles of its own work, and block i was launched
  before it: the flag is nearly always up. Warp 0 reads it (relaxed) while the S and dP products
  run and stages D for the next tile with cp.async.cg after the dV and dK products are issued,
  re-reading with ld.acquire only if the flag is still down (version 14's ticket pattern).
* The tickets and the flags are one i32 scratch zeroed by a memset step: no kernel reads the
  whole of dout and out before the backward starts.
"""
why = """
On the H100 at the trainer's shape (B = 16, T = 1024, NH = 12, L2 flushed) version 14 took
342.7-343.2 us against cuDNN's 302.7-304.7 (1.13x; results/h100-session10-2026-11-28/call3). Its
prep kernel streams 50 MB (dout and out) before any tensor core works: ~17 us at the copy
ceiling, about 5% of the backward, spent on a pass whose only output is 0.8 MB of D. Inside the
main kernel the same reads come at each block's start, when the block waits for its first tiles
anyway, and D goes to the consumers through the L2.
"""
preconditions = ["HS == 64"]
arch = "sm_90a"  # wgmma: a Hopper; elsewhere the workbench refuses it (the build there is a trap)

[scratch]
D = "B * NH * cdiv(T, 128) * 128"  # dout . out per row, fp32, (B, NH, T) with each head's rows padded to whole tiles
dq = "B * T * C"                    # the running dQ sums, fp32, laid out (B, T, NH, HS); never zeroed
ticket = { size = "2 * B * NH * cdiv(T, 128)", dtype = "i32" }  # per (head, query tile): dQ shares written, then D's flag

[[launch]]
memset = "ticket"

[[launch]]
kernel = "attention_backward15"
grid = ["cdiv(T, 128)", "B * NH"]   # key blocks fastest, last key block first (version 14)
block = 256
shared = "1024 + 2 * 128 * 128 + 2 * 2 * 128 * 128 + 128 * 256 + 2 * 2 * 128 * 4 + 128 * 72 * 4"
args = ["dq", "ticket", "dqkv", "dout", "out", "qkv", "lse", "D", "T", "NH", "1.4426950408889634 / sqrt(HS)", "1.0 / sqrt(HS)"]
*/
// ---- begin attention_backward_bf16.cuh ----
// attention_backward_bf16.cuh: the warp-level pieces the bf16 tensor-core versions of
// attention_backward (7, 11: dQ by atomics; 8, 10: deterministic split) are built from.
//
// Shared because both versions stage the same bf16 tiles, run the same fragment products and
// store the same way; each version's own file holds its loops (what it computes, in which order,
// and where the barriers go).
//
// Tiles in shared memory: a tile is up to 64 rows (tokens) of one head's HS <= 64 channels, zero
// padded to 64 channels and zero filled past the sequence end, as bf16 rows of AB_PITCH = 72
// elements (144 bytes; see below why 72).
//
// load_tile_async<ROWS, THREADS>(s, base, stride, row0, T, HS, any)
//   Rows row0 .. row0 + ROWS - 1 of the matrix at `base` (row r at base + r * stride, HS channels)
//   into tile s, zero-filled past T and past HS. With HS % 8 == 0 (every row 16-byte aligned: the
//   fast path) by cp.async, 16 bytes (8 channels) a copy, zero-filled copies reading nothing (`any`
//   is a valid address given to those); the caller commits and waits (cp_async_commit /
//   cp_async_wait). Any other HS: element by element with plain loads and stores. Either way the
//   tile is visible to the block after the caller's next __syncthreads(). Every thread calls.
//
// load_queries<THREADS>(q_s, g_s, l_s, d_s, q, q_stride, g, g_stride, lse, D, q0, T, HS)
//   A query tile for the key-tile loops: rows q0 .. q0 + 63 of q (stride q_stride) and dout
//   (stride g_stride) by load_tile_async, and lse[q0 ..], D[q0 ..] into l_s[0..63], d_s[0..63] by
//   4-byte cp.async (zeros past T), then commits: one cp.async group.
//
// load_a16(a, s)
//   The 16 x 64 block of rows s[0..15][0..63] as four A fragments of m16n8k16 (a[kk]: channels
//   16 kk .. 16 kk + 15), by ldmatrix: lane L addresses row L % 8 + 8 ((L / 8) % 2), channel
//   16 kk + 8 (L / 16): matrices 0..3 are (rows 0-7, ch +0), (rows 8-15, ch +0), (rows 0-7, ch +8),
//   (rows 8-15, ch +8), which is a[kk][0..3] (see mma.cuh).
//
// mma_abt<NT>(acc, a, s):  acc (16 x 8 NT) += A (16 x 64, four fragments) . S^T
//   S is a tile of 8 NT rows: the product's column n is S's row n, a dot product over channels
//   (S^T = K Q^T with A = a warp's keys and S = the query tile, dP^T = V dout^T likewise; or
//   S = Q K^T with A = a warp's queries and S = the key tile, dP = dout V^T). The B operand
//   B[k][n] = S[n][k] runs along channels, which is S's own row order: plain ldmatrix. One x4
//   load gives two n-tiles: lane L addresses row 8 j + L % 8 + 8 (L / 16), channel
//   16 kk + 8 ((L / 8) % 2): matrices (rows 8j.., ch +0) = b[0] of tile j, (rows 8j.., ch +8) =
//   b[1] of tile j, (rows 8j+8.., ch +0) = b[0] of tile j+1, (rows 8j+8.., ch +8) = b[1] of j+1.
//
// mma_ab<NT>(acc, a, s):  acc (16 x 8 NT) += A (16 x 16, one fragment) . S[0..15][0..8 NT - 1]
//   A product over the tile's rows (dV += P^T dO over queries, dQ += dS K over keys): B[k][n] =
//   S[k][n] runs down S's columns, so ldmatrix .trans: lane L addresses row L % 8 + 8 ((L/8) % 2),
//   column 8 n + 8 (L / 16): matrices (rows 0-7, col +0) = b[0] of n-tile n, (rows 8-15, col +0) =
//   b[1] of n, (rows 0-7, col +8) = b[0] of n+1, (rows 8-15, col +8) = b[1] of n+1; .trans hands
//   lane (g, t) the elements (rows 2t, 2t+1; column g), as b[] wants.
//
// acc_to_a(a, c): a 16 x 64 fp32 accumulator (8 n-tiles, C layout) as four bf16 A fragments over
//   its 64 columns: a[kk] = {c[2kk][0,1], c[2kk][2,3], c[2kk+1][0,1], c[2kk+1][2,3]} (the C -> A
//   identity in mma.cuh), rounded to bf16.
// store_a_smem(s, a): those four fragments into rows 0..15 of a tile, as 32-bit stores
//   (a[kk][0] -> row g, columns 16 kk + 2t, 2t + 1; [1] -> row g + 8; [2], [3]: columns + 8).
//
// store_rows<NT>(dst, stride, row0, T, col0, HS, c, scale): a 16 x 8 NT accumulator times scale as
//   bf16 to dst[(row0 + r) * stride + col0 + c] (rows g, g + 8; columns 8 n + 2t, 2t + 1), rows
//   < T and columns < HS only. With HS even (so C, the strides and every index even) a pair is one
//   32-bit store; odd HS: two 16-bit stores.
//
// key_pair(dk, dv, ds, k_s, v_s, q_s, g_s, l_s, d_s, kw, q0, T, sl2): one warp's share of a (key
//   tile, query tile) pair when warps own keys: the warp's 16 keys kw .. kw + 15 (their K and V rows
//   at k_s, v_s) against the 64 queries q0 .. q0 + 63 (tiles q_s, g_s of q and dout, their lse and D
//   at l_s[0..63], d_s[0..63]):
//     S^T = K Q^T, dP^T = V dout^T                     (16 x 64 each, fp32 accumulators)
//     P^T = exp(scale S^T - lse) = 2^(S^T sl2 - lse log2 e), 0 where key > query or query >= T
//     dS^T = P^T (dP^T - D)
//     dV += P^T dout, dK += dS^T Q                     (16 x 64 each; dK still without its scale)
//   and returns dS^T in ds as bf16 A fragments (for a dQ product). Accumulator element x[j][e] is
//   (key kw + g + 8 (e / 2), query q0 + 8 j + 2 t + e % 2), so lse and D are per column: lane t
//   reads l_s[8 j + 2 t] and the next one as a float2. The mask is applied only on tiles that
//   touch the diagonal (kw + 15 > q0) or the sequence end.
//
// Two m-tiles a warp (attention_backward 10, 11: a warp owns 32 rows, rows 0-15 and 16-31 of its
// A operand in a[0], a[1]), each B fragment loaded once for both:
// abt2<NT>(acc, a, s): acc[mt] (16 x 8 NT) += A[mt] (16 x 64, four fragments) . S^T, S = 8 NT rows
//   of a tile (mma_abt's product and its ldmatrix addressing, one load feeding four mma).
// ab2(acc, a, s): acc[mt] (16 x 64) += A[mt] (16 x 16, one fragment) . S[0..15][0..63] (mma_ab's,
//   ldmatrix .trans, one load feeding four mma).
// c_to_a<NT>(a, c, kk): accumulator n-tiles 2 kk, 2 kk + 1 of c (16 rows x 16 columns) as one bf16
//   A fragment whose k index is those 16 columns (acc_to_a's identity, one fragment).
// Flag<B>: a compile-time yes / no passed by value, so a loop can pick between two instantiations of
//   one step (e.g. with and without the causal mask): step(..., Flag<true>{}).
//
// rows_to_bf16(dst, dst_stride, src, rows, C, scale): dst[r * dst_stride + c] = bf16(scale *
//   src[r * C + c]) for rows x C fp32 elements (a dQ accumulator into dqkv's q part), 8 consecutive
//   elements a thread: two float4 loads and one Pack8 store when C % 8 == 0 (and dst_stride too),
//   else one by one. Launch cdiv(rows * C, 8) threads.
//
// dot_rows(D, zero, dout, out, B, T, NH, HS): D[b, h, t] = dout[b, t, h, :] . out[b, t, h, :] in
//   fp32 (8 lanes per row: one Pack8 each when HS % 8 == 0, HS <= 64; else element by element),
//   and, if zero != nullptr, zero[b, t, h, 0..HS) = 0 (an fp32 (B, T, C) accumulator). 4 rows per
//   warp; call with every thread of the grid (whole warps: the shuffles).
//
// Bank conflicts: rows of 144 bytes put the 8 rows of an 8 x 8 ldmatrix matrix (same column) at
// 8 different 16-byte offsets modulo 128: conflict-free. store_a_smem's 32 lanes write words
// (g * 36 + t) + const: 32 different banks.

#ifndef KERNELS_COMMON_ATTENTION_BACKWARD_BF16_CUH
#define KERNELS_COMMON_ATTENTION_BACKWARD_BF16_CUH
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

#define AB_DH 64      // channels per tile row (HS zero-padded to 64)
#define AB_PITCH 72   // bf16 per tile row in shared memory (64 + 8: 144 bytes)
#define AB_LOG2E 1.4426950408889634f

template <int ROWS, int THREADS>
__device__ __forceinline__ void load_tile_async(bf16* s, const bf16* base, size_t stride, int row0, int T,
                                                int HS, const bf16* any) {
    if (HS % 8 == 0) {  // every row starts 16-byte aligned: cp.async, 8 channels a copy
        constexpr int CHUNKS = ROWS * (AB_DH / 8);
#pragma unroll
        for (int k = 0; k < (CHUNKS + THREADS - 1) / THREADS; k++) {
            int i = threadIdx.x + k * THREADS;
            if (CHUNKS % THREADS != 0 && i >= CHUNKS) break;
            int r = i / (AB_DH / 8), c = 8 * (i % (AB_DH / 8));
            bool valid = row0 + r < T && c < HS;
            const bf16* src = base + (size_t)(row0 + r) * stride + c;
            cp_async_16(s + r * AB_PITCH + c, valid ? src : any, valid);
        }
    } else {  // odd head sizes: element by element, plain loads and stores
        for (int i = threadIdx.x; i < ROWS * AB_DH; i += THREADS) {
            int r = i / AB_DH, c = i % AB_DH;
            s[r * AB_PITCH + c] = row0 + r < T && c < HS ? base[(size_t)(row0 + r) * stride + c] : to_bf16(0.0f);
        }
    }
}

template <int THREADS>
__device__ __forceinline__ void load_queries(bf16* q_s, bf16* g_s, float* l_s, float* d_s, const bf16* q,
                                             size_t q_stride, const bf16* g, size_t g_stride, const float* lse,
                                             const float* D, int q0, int T, int HS) {
    load_tile_async<64, THREADS>(q_s, q, q_stride, q0, T, HS, q);
    load_tile_async<64, THREADS>(g_s, g, g_stride, q0, T, HS, g);
    if (threadIdx.x < 64) {
        const int r = threadIdx.x;
        const bool valid = q0 + r < T;
        cp_async_4(l_s + r, valid ? lse + q0 + r : lse, valid);
        cp_async_4(d_s + r, valid ? D + q0 + r : D, valid);
    }
    cp_async_commit();
}

__device__ __forceinline__ void load_a16(unsigned (&a)[AB_DH / 16][4], const bf16* s) {
    const int lane = threadIdx.x % 32;
    const bf16* p = s + (lane % 8 + 8 * ((lane / 8) % 2)) * AB_PITCH + 8 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++) ldmatrix_x4(a[kk], p + 16 * kk);
}

template <int NT>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const unsigned (&a)[AB_DH / 16][4], const bf16* s) {
    static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4 each)");
    const int lane = threadIdx.x % 32;
    const bf16* p = s + (lane % 8 + 8 * (lane / 16)) * AB_PITCH + 8 * ((lane / 8) % 2);
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++) {
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            unsigned b[4];
            ldmatrix_x4(b, p + 8 * j * AB_PITCH + 16 * kk);
            mma_bf16_16816(acc[j], a[kk], b[0], b[1]);
            mma_bf16_16816(acc[j + 1], a[kk], b[2], b[3]);
        }
    }
}

template <int NT>
__device__ __forceinline__ void mma_ab(float (&acc)[NT][4], const unsigned (&a)[4], const bf16* s) {
    static_assert(NT % 2 == 0, "n-tiles come in pairs (one ldmatrix.x4 each)");
    const int lane = threadIdx.x % 32;
    const bf16* p = s + (lane % 8 + 8 * ((lane / 8) % 2)) * AB_PITCH + 8 * (lane / 16);
#pragma unroll
    for (int n = 0; n < NT; n += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, p + 8 * n);
        mma_bf16_16816(acc[n], a, b[0], b[1]);
        mma_bf16_16816(acc[n + 1], a, b[2], b[3]);
    }
}

__device__ __forceinline__ void acc_to_a(unsigned (&a)[AB_DH / 16][4], const float (&c)[AB_DH / 8][4]) {
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++) {
        a[kk][0] = pack_bf16x2(c[2 * kk][0], c[2 * kk][1]);
        a[kk][1] = pack_bf16x2(c[2 * kk][2], c[2 * kk][3]);
        a[kk][2] = pack_bf16x2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[kk][3] = pack_bf16x2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

__device__ __forceinline__ void store_a_smem(bf16* s, const unsigned (&a)[AB_DH / 16][4]) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++) {
        bf16* p = s + g * AB_PITCH + 16 * kk + 2 * t;
        *reinterpret_cast<unsigned*>(p) = a[kk][0];
        *reinterpret_cast<unsigned*>(p + 8 * AB_PITCH) = a[kk][1];
        *reinterpret_cast<unsigned*>(p + 8) = a[kk][2];
        *reinterpret_cast<unsigned*>(p + 8 * AB_PITCH + 8) = a[kk][3];
    }
}

template <int NT>
__device__ __forceinline__ void store_rows(bf16* dst, size_t stride, int row0, int T, int col0, int HS,
                                           const float (&c)[NT][4], float scale) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        int col = col0 + 8 * n + 2 * t;
        if (col >= HS) continue;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            int row = row0 + g + 8 * half;
            if (row >= T) continue;
            bf16* p = dst + (size_t)row * stride + col;
            if (HS % 2 == 0) {  // HS even: every index even, the pair is one aligned 32-bit store
                *reinterpret_cast<unsigned*>(p) = pack_bf16x2(c[n][2 * half] * scale, c[n][2 * half + 1] * scale);
            } else {
                p[0] = to_bf16(c[n][2 * half] * scale);
                if (col + 1 < HS) p[1] = to_bf16(c[n][2 * half + 1] * scale);
            }
        }
    }
}

__device__ __forceinline__ void key_pair(float (&dk)[AB_DH / 8][4], float (&dv)[AB_DH / 8][4],
                                         unsigned (&ds)[AB_DH / 16][4], const bf16* k_s, const bf16* v_s,
                                         const bf16* q_s, const bf16* g_s, const float* l_s, const float* d_s,
                                         int kw, int q0, int T, float sl2) {
    constexpr int NT = 8;  // 64 queries: n-tiles of S^T, dP^T; also k-steps * 2 of dV, dK
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    float s[NT][4] = {}, dp[NT][4] = {};
    unsigned a[AB_DH / 16][4];
    load_a16(a, k_s);
    mma_abt<NT>(s, a, q_s);   // S^T = K Q^T
    load_a16(a, v_s);
    mma_abt<NT>(dp, a, g_s);  // dP^T = V dout^T
    const bool edge = kw + 15 > q0 || q0 + 64 > T;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int col = 8 * j + 2 * t;
        const float2 l2 = *reinterpret_cast<const float2*>(l_s + col);
        const float2 d2 = *reinterpret_cast<const float2*>(d_s + col);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int query = q0 + col + (e & 1), key = kw + g + 8 * (e >> 1);
            float p = exp2f(fmaf(s[j][e], sl2, -((e & 1) ? l2.y : l2.x) * AB_LOG2E));
            if (edge && (key > query || query >= T)) p = 0.0f;
            s[j][e] = p;
            dp[j][e] = p * (dp[j][e] - ((e & 1) ? d2.y : d2.x));
        }
    }
    acc_to_a(a, s);  // P^T as A fragments
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) mma_ab<AB_DH / 8>(dv, a[kk], g_s + 16 * kk * AB_PITCH);  // dV += P^T dout
    acc_to_a(ds, dp);
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) mma_ab<AB_DH / 8>(dk, ds[kk], q_s + 16 * kk * AB_PITCH);  // dK += dS^T Q
}

template <int NT>
__device__ __forceinline__ void abt2(float (&acc)[2][NT][4], const unsigned (&a)[2][AB_DH / 16][4], const bf16* s) {
    const int lane = threadIdx.x % 32;
    const uint32_t p = smem_addr(s + (lane % 8 + 8 * (lane / 16)) * AB_PITCH + 8 * ((lane / 8) % 2));
#pragma unroll
    for (int kk = 0; kk < AB_DH / 16; kk++)
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            unsigned b[4];
            ldmatrix_x4(b, p + 2 * (8 * j * AB_PITCH + 16 * kk));
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                mma_bf16_16816(acc[mt][j], a[mt][kk], b[0], b[1]);
                mma_bf16_16816(acc[mt][j + 1], a[mt][kk], b[2], b[3]);
            }
        }
}

__device__ __forceinline__ void ab2(float (&acc)[2][AB_DH / 8][4], const unsigned (&a)[2][4], const bf16* s) {
    const int lane = threadIdx.x % 32;
    const uint32_t p = smem_addr(s + (lane % 8 + 8 * ((lane / 8) % 2)) * AB_PITCH + 8 * (lane / 16));
#pragma unroll
    for (int n = 0; n < AB_DH / 8; n += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, p + 2 * 8 * n);
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            mma_bf16_16816(acc[mt][n], a[mt], b[0], b[1]);
            mma_bf16_16816(acc[mt][n + 1], a[mt], b[2], b[3]);
        }
    }
}

template <int NT>
__device__ __forceinline__ void c_to_a(unsigned (&a)[4], const float (&c)[NT][4], int kk) {
    a[0] = pack_bf16x2(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pack_bf16x2(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pack_bf16x2(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pack_bf16x2(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

__device__ __forceinline__ void rows_to_bf16(bf16* dst, int dst_stride, const float* src, int rows, int C,
                                             float scale) {
    const long long i = 8 * ((long long)blockIdx.x * blockDim.x + threadIdx.x), n = (long long)rows * C;
    if (i >= n) return;
    if (C % 8 == 0 && dst_stride % 8 == 0) {
        const float4 x0 = reinterpret_cast<const float4*>(src + i)[0], x1 = reinterpret_cast<const float4*>(src + i)[1];
        const float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        Pack8 p;
#pragma unroll
        for (int k = 0; k < 8; k++) p.v[k] = to_bf16(x[k] * scale);
        store8(dst + (i / C) * dst_stride + i % C, p);
    } else {
        for (long long e = i; e < i + 8 && e < n; e++) dst[(e / C) * dst_stride + e % C] = to_bf16(src[e] * scale);
    }
}

// dst[0] += x, dst[1] += y as one vector reduction (sm_90; dst 8-byte aligned), no result read.
__device__ __forceinline__ void red_add_v2(float* dst, float x, float y) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(x), "f"(y) : "memory");
}

// A warp's 16 keys of dK (times scale) and dV into dqkv's k and v parts: acc[n][e] is the key
// kr + 8 (e / 2) (kr: the lane's first, warp's first + lane / 4) and channel 8 n + 2 (lane % 4) +
// e % 2 of head h, the m16n8 accumulator layout (eight n-tiles: 64 channels); keys >= T skipped.
__device__ __forceinline__ void store_dk_dv(bf16* dqkv, const float (&dk)[8][4], const float (&dv)[8][4], int kr,
                                            int b, int h, int T, int C, float scale) {
    const int t = threadIdx.x % 4;
    const size_t rs = 3 * (size_t)C;
#pragma unroll
    for (int n = 0; n < 8; n++) {
        const int ch = 8 * n + 2 * t;
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int key = kr + 8 * hr;
            if (key < T) {
                bf16* row = dqkv + ((size_t)b * T + key) * rs + (size_t)h * 64 + ch;
                *reinterpret_cast<uint32_t*>(row + C) = pack_bf16x2(scale * dk[n][2 * hr], scale * dk[n][2 * hr + 1]);
                *reinterpret_cast<uint32_t*>(row + 2 * C) = pack_bf16x2(dv[n][2 * hr], dv[n][2 * hr + 1]);
            }
        }
    }
}

template <bool B>
struct Flag {
    static constexpr bool value = B;
};

__device__ __forceinline__ void dot_rows(float* D, float* zero, const bf16* dout, const bf16* out,
                                         int B, int T, int NH, int HS) {
    const int lane8 = threadIdx.x % 8;
    const long long row = (long long)blockIdx.x * (blockDim.x / 8) + threadIdx.x / 8;  // (b, t, h)
    const bool valid = row < (long long)B * T * NH;
    const int h = (int)(row % NH);
    const long long bt = row / NH;
    const size_t at = (size_t)bt * NH * HS + (size_t)h * HS;  // the row's (B, T, C) index
    float s = 0.0f;
    if (valid && HS % 8 == 0) {  // one Pack8 of each per lane (HS <= 64)
        if (8 * lane8 < HS) {
            Pack8 g = load8_stream(dout + at + 8 * lane8), o = load8_stream(out + at + 8 * lane8);
#pragma unroll
            for (int i = 0; i < 8; i++) s = fmaf(to_float(g.v[i]), to_float(o.v[i]), s);
            if (zero != nullptr) {
                reinterpret_cast<float4*>(zero + at + 8 * lane8)[0] = make_float4(0.f, 0.f, 0.f, 0.f);
                reinterpret_cast<float4*>(zero + at + 8 * lane8)[1] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
    } else if (valid) {  // odd head sizes: element by element
        for (int c = lane8; c < HS; c += 8) {
            s = fmaf(to_float(dout[at + c]), to_float(out[at + c]), s);
            if (zero != nullptr) zero[at + c] = 0.0f;
        }
    }
    s = warp_sum<8>(s);  // the 8 lanes of this row (all 32 lanes call)
    if (lane8 == 0 && valid) {
        int t = (int)(bt % T), b = (int)(bt / T);
        D[((size_t)b * NH + h) * T + t] = s;
    }
}

#endif  // KERNELS_COMMON_ATTENTION_BACKWARD_BF16_CUH

// ---- end attention_backward_bf16.cuh ----  // store_dk_dv
// (already included: bf16.cuh)
// (already included: mma.cuh)                       // cp_async_16, smem_addr
// ---- begin wgmma.cuh ----
// wgmma.cuh: Hopper's warpgroup MMA (wgmma.mma_async, sm_90a only) for 64 x 64 x 16 bf16 products
// with fp32 accumulators, the shared-memory layout it reads (rows of 128 bytes, 128-byte swizzle)
// and the matrix descriptors that describe that layout to it. attention_forward 12-14 and
// attention_backward 12 and 13 use it.
//
// ---- What changes from mma.sync ------------------------------------------------------------
// mma.sync (mma.cuh) is a warp's instruction: 16 x 8 x 16, both operands in registers, each
// fetched from shared memory by ldmatrix first. wgmma is a warpgroup's (4 consecutive warps, 128
// threads, the first warp's index a multiple of 4): 64 x N x 16 in one instruction, B read by
// the tensor cores straight from shared memory, A from shared memory or from registers. It is
// asynchronous: it returns at once, and the accumulators may be read only after
//     wgmma_commit();      // closes a group of the wgmma issued so far by this warpgroup
//     wgmma_wait<N>();     // waits until at most N groups are still in flight
// and before a wgmma uses registers that ordinary instructions wrote (accumulators rescaled, an A
// fragment packed) the warpgroup issues wgmma_fence(). Shared memory written by ordinary stores or
// cp.async must be made visible to the tensor cores' own path (the "async proxy") by
// fence_proxy_async() in each writing thread, before the barrier that precedes the wgmma.
//
// ---- Fragments (per warp w of the warpgroup, g = lane / 4, t = lane % 4) ---------------------
// D (64 x 64 fp32): d[n][e] = D[16 w + g + 8 (e / 2)][8 n + 2 t + (e % 2)], n = 0..7: the warp's
//   16 rows, laid out exactly like eight mma.sync m16n8 accumulators side by side.
// A in registers (64 x 16 bf16): a[0..3] as mma.sync's m16n8k16 A fragment of the warp's 16 rows
//   (mma.cuh): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] =
//   A[g+8][2t+8, 2t+9]. So an accumulator of keys 16 kk .. 16 kk + 15 packed to bf16 pairs
//   ({d[2kk][0,1]}, {d[2kk][2,3]}, {d[2kk+1][0,1]}, {d[2kk+1][2,3]}) is the A fragment of a k-step
//   of the next product: flash attention's P never leaves registers.
//
// ---- The shared-memory tiles ----------------------------------------------------------------
// A tile is rows of 64 bf16 (128 bytes), starting on a 1024-byte boundary. The 16-byte chunk c
// (elements 8c .. 8c + 7) of row r sits at byte r * 128 + 16 (c ^ (r % 8)): sw128(r, c). The XOR
// (the "128-byte swizzle") puts the same chunk of 8 consecutive rows in 8 different bank groups,
// which is what the tensor cores' reads need, and is the pattern the descriptor names (mode 1).
// Each operand is described by its major-ness, the dimension along which its 128-byte rows run:
// * K-major (the product's k index runs along the row): Q and K in S = Q K^T (k = the channel).
//   Rows r are the m (or n) index; 8-row groups 1024 bytes apart (the stride "SBO"). A k-step of
//   16 is 32 bytes further along the row: its descriptor is the tile's plus 32 bytes.
// * MN-major (the n index runs along the row): V in O = P V (k = the key, n = the channel), V's
//   rows as they come from memory. Rows r are the k index; 8-row groups 1024 bytes apart (SBO
//   again); with 64 channels the row is one swizzle width, so the leading offset is unused. A
//   k-step of 16 keys is 16 rows, 2048 bytes further.
//   The instruction's trans-b flag (1) says B is MN-major.
//
// sw128_desc(addr, sbo): the 64-bit descriptor: bits 0-13 the shared address / 16, 16-29 the
// leading byte offset / 16 (1: unused with this swizzle here), 32-45 the stride byte offset / 16,
// 62-63 the swizzle mode (1 = 128-byte). Base offset (bits 49-51) 0: tiles start 1024-aligned.
//
// wgmma_ss(d, da, db, accumulate): d (+)= A B^T-style product with A (64 x 16, K-major) and B
//   (64 x 16 as n x k, K-major) both in shared memory; accumulate = false overwrites d.
// wgmma_rs_bt(d, a, db, accumulate = true): d (+)= A B with A in registers and B (16 x 64 as k x n)
//   MN-major in shared memory; accumulate = false overwrites d.

#ifndef KERNELS_ATTENTION_FORWARD_WGMMA_CUH
#define KERNELS_ATTENTION_FORWARD_WGMMA_CUH

#include <stdint.h>
// (already included: mma.cuh)  // cp_async_16

__device__ __forceinline__ uint32_t sw128(int r, int c) {
    return (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4));
}

// stage_sw128<ROWS, THREADS>(dst, src, rs, valid, any): ROWS rows of 64 bf16 (row r at src + r * rs)
// copied by cp.async into the swizzled tile at shared address dst by THREADS threads (the caller
// commits and waits); rows at or past `valid` are zero-filled, their source `any` (not read).
template <int ROWS, int THREADS>
__device__ __forceinline__ void stage_sw128(uint32_t dst, const bf16* src, size_t rs, int valid, const bf16* any) {
    static_assert(ROWS * 8 % THREADS == 0, "whole passes");
#pragma unroll
    for (int k = 0; k < ROWS * 8 / THREADS; k++) {
        const int i = threadIdx.x + THREADS * k, r = i / 8, c = i % 8;
        const bool ok = r < valid;
        cp_async_16(dst + sw128(r, c), ok ? src + (size_t)r * rs + 8 * c : any, ok);
    }
}

__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(sbo >> 4) << 32) |
           ((uint64_t)1 << 62);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#define WGMMA_D32                                                                                          \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WGMMA_D32_OPERANDS(d)                                                                            \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), \
    "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), \
    "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), \
    "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
    "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])

__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], uint64_t da, uint64_t db, bool accumulate) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32 ", %32, %33, acc, 1, 1, 0, 0;\n}\n"
        : WGMMA_D32_OPERANDS(d)
        : "l"(da), "l"(db), "r"((int)accumulate));
}

__device__ __forceinline__ void wgmma_rs_bt(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db,
                                            bool accumulate = true) {
    asm volatile(
        "{\n.reg .pred acc;\nsetp.ne.b32 acc, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32
        ", {%32, %33, %34, %35}, %36, acc, 1, 1, 1;\n}\n"
        : WGMMA_D32_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"((int)accumulate));
}
#undef WGMMA_D32
#undef WGMMA_D32_OPERANDS
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_ATTENTION_FORWARD_WGMMA_CUH

// ---- end wgmma.cuh ----                     // sw128_desc, stage_sw128, wgmma_commit / wait
// ---- begin wgmma_backward.cuh ----
// wgmma_backward.cuh: the per-tile steps of attention_backward 13 and 14 (wgmma, 128 keys a block
// in two 64-key warpgroups, query tiles of 128 in two 64-query halves, HS = 64). Each version's own
// file keeps its loop: the order of these steps, its barriers and waits, and what it does with dQ.
//
// Shared memory as both lay it out (every tile 128-byte swizzled, rows of 64 bf16 = 128 bytes):
// sQ / sG: a query tile of Q / dout (128 rows: two 64-row halves of 8 KB), two buffers each;
// lsD: lse[128] then D[128] (fp32) a buffer; sdS: dS^T as [query half][128 keys][64 queries].
//
// stage_query_tile(tQ, tG, lsD, buf, q_base, g_base, l_row, d_row, rs, C, T, q0, qkv, dout)
//   Queries q0 .. q0 + 127: Q rows (stride rs) into tQ, dout rows (stride C) into tG, their lse
//   (threads 0-127) and D (threads 128-255) into buffer buf of lsD (lsD[256 buf ..]); zeros past
//   T. cp.async, uncommitted.
// products_s_dp(s, dp, descK, descV, tQ, tG)
//   Issues S^T = K Q^T and dP^T = V dout^T for the warpgroup's 64 keys against both query halves
//   (s[hq], dp[hq]: 64 x 64 fp32 accumulators), after a wgmma fence; the caller commits and waits.
// softmax_grads(pa, sa, s, dp, tl, tD, key_r0, q0, T, edge, sl2)
//   P^T = 2^(s sl2 - lse log2 e), zero where key > query or query >= T (tested only when `edge`);
//   dS^T = P^T (dP^T - D); both as bf16 A fragments over the queries (pa, sa [hq][k-step]).
//   key_r0: the key of the thread's accumulator rows e = 0, 1 (e = 2, 3: + 8).
// products_dv_dk(dv, dk, pa, sa, tQ, tG)
//   Issues dV += P^T dout and dK += dS^T Q over the 128 queries (A from registers, dout and Q
//   MN-major), after a wgmma fence; the caller commits.
// store_ds_t(sdS, sa, wg, warp, g, t)
//   The warpgroup's dS^T rows (keys 64 wg + 16 warp + g, + 8) into sdS, half hq at sdS + hq * 16 KB.
// product_dq(dqa, sdS, descK_all, wg, warp, lane)
//   Once both warpgroups' dS^T are in sdS (the caller's barrier): issues dQ = dS K for queries
//   64 wg .. 64 wg + 63 of the tile over all 128 keys, dS read back as A fragments through
//   ldmatrix .trans, K MN-major (descK_all), after a wgmma fence; the caller commits and waits.
// block_sync_256()
//   Both warpgroups wait for each other: named barrier 3, a __syncthreads that leaves barrier 0 to
//   the loop's copies.

#ifndef KERNELS_ATTENTION_BACKWARD_WGMMA_BACKWARD_CUH
#define KERNELS_ATTENTION_BACKWARD_WGMMA_BACKWARD_CUH
// (already included: bf16.cuh)
// (already included: mma.cuh)    // cp_async_4, ldmatrix_x4_trans, pack_bf16x2
// (already included: wgmma.cuh)  // wgmma_ss, wgmma_rs_bt, sw128, sw128_desc, stage_sw128

#define WB_LOG2E 1.4426950408889634f

__device__ __forceinline__ void block_sync_256() { asm volatile("bar.sync 3, 256;\n" ::: "memory"); }

// The products exist only in the sm_90a build (as wgmma.cuh's wrappers do); the versions call
// every step inside their own sm_90a guard.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ void stage_query_tile(uint32_t tQ, uint32_t tG, float* lsD, int buf, const bf16* q_base,
                                                 const bf16* g_base, const float* l_row, const float* d_row,
                                                 size_t rs, int C, int T, int q0, const bf16* qkv,
                                                 const bf16* dout) {
    stage_sw128<128, 256>(tQ, q_base + (size_t)q0 * rs, rs, T - q0, qkv);
    stage_sw128<128, 256>(tG, g_base + (size_t)q0 * C, C, T - q0, dout);
    const int r = threadIdx.x % 128;  // lse (threads 0-127) and D (128-255) of the tile's queries
    const bool ok = q0 + r < T;
    const float* src = (threadIdx.x < 128 ? l_row : d_row) + q0 + r;
    cp_async_4(lsD + buf * 256 + threadIdx.x, ok ? src : l_row, ok);
}

__device__ __forceinline__ void products_s_dp(float (&s)[2][8][4], float (&dp)[2][8][4], uint64_t descK,
                                              uint64_t descV, uint32_t tQ, uint32_t tG) {
    wgmma_fence();
#pragma unroll
    for (int hq = 0; hq < 2; hq++) {
        const uint64_t dq_desc = sw128_desc(tQ + hq * 64 * 128, 1024), dg_desc = sw128_desc(tG + hq * 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(s[hq], descK + 2 * kk, dq_desc + 2 * kk, kk > 0);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss(dp[hq], descV + 2 * kk, dg_desc + 2 * kk, kk > 0);
    }
}

__device__ __forceinline__ void softmax_grads(uint32_t (&pa)[2][4][4], uint32_t (&sa)[2][4][4],
                                              const float (&s)[2][8][4], const float (&dp)[2][8][4],
                                              const float* tl, const float* tD, int key_r0, int q0, int T,
                                              bool edge, float sl2) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int hq = 0; hq < 2; hq++)
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int qc = 64 * hq + 8 * n + 2 * t;  // the query column of e = 0 (e = 1: + 1)
            const float2 l2 = *reinterpret_cast<const float2*>(tl + qc);
            const float2 d2 = *reinterpret_cast<const float2*>(tD + qc);
            float p[4], ds[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = key_r0 + 8 * (e / 2), q = q0 + qc + (e & 1);
                const float lv = (e & 1) ? l2.y : l2.x, dv_ = (e & 1) ? d2.y : d2.x;
                p[e] = exp2f(fmaf(s[hq][n][e], sl2, -lv * WB_LOG2E));
                if (edge && !(key <= q && q < T)) p[e] = 0.0f;
                ds[e] = p[e] * (dp[hq][n][e] - dv_);
            }
            pa[hq][n / 2][2 * (n % 2) + 0] = pack_bf16x2(p[0], p[1]);
            pa[hq][n / 2][2 * (n % 2) + 1] = pack_bf16x2(p[2], p[3]);
            sa[hq][n / 2][2 * (n % 2) + 0] = pack_bf16x2(ds[0], ds[1]);
            sa[hq][n / 2][2 * (n % 2) + 1] = pack_bf16x2(ds[2], ds[3]);
        }
}

__device__ __forceinline__ void products_dv_dk(float (&dv)[8][4], float (&dk)[8][4], const uint32_t (&pa)[2][4][4],
                                               const uint32_t (&sa)[2][4][4], uint32_t tQ, uint32_t tG) {
    wgmma_fence();
#pragma unroll
    for (int hq = 0; hq < 2; hq++) {
        const uint64_t dq_desc = sw128_desc(tQ + hq * 64 * 128, 1024), dg_desc = sw128_desc(tG + hq * 64 * 128, 1024);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(dv, pa[hq][kk], dg_desc + 128 * kk);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_bt(dk, sa[hq][kk], dq_desc + 128 * kk);
    }
}

__device__ __forceinline__ void store_ds_t(uint32_t sdS, const uint32_t (&sa)[2][4][4], int wg, int warp, int g,
                                           int t) {
    const int r0 = 64 * wg + 16 * warp + g;
#pragma unroll
    for (int hq = 0; hq < 2; hq++)
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int half = 0; half < 2; half++) {  // n = 2 kk + half: queries 8n + 2t, + 1
                const int chunk = 2 * kk + half;
                const uint32_t at = sdS + hq * 128 * 128 + 4 * t;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at + sw128(r0, chunk)), "r"(sa[hq][kk][2 * half]) : "memory");
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at + sw128(r0 + 8, chunk)), "r"(sa[hq][kk][2 * half + 1]) : "memory");
            }
}

__device__ __forceinline__ void product_dq(float (&dqa)[8][4], uint32_t sdS, uint64_t descK_all, int wg, int warp,
                                           int lane) {
    uint32_t dsa[8][4];
    const int mi = lane / 8;
    const uint32_t from = sdS + wg * 128 * 128;
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const int key_row = 16 * kk + (lane % 8) + 8 * (mi / 2);
        ldmatrix_x4_trans(dsa[kk], from + sw128(key_row, 2 * warp + (mi % 2)));
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) wgmma_rs_bt(dqa, dsa[kk], descK_all + 128 * kk, kk > 0);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

#endif  // KERNELS_ATTENTION_BACKWARD_WGMMA_BACKWARD_CUH

// ---- end wgmma_backward.cuh ----            // the tile's steps: products, softmax gradients, dS^T, dQ; block_sync_256

#define BK 128   // keys a block: two warpgroups of 64
#define BQ 128   // queries a streamed tile: two halves of 64
#define HSW 64   // the head size this version is written for

// The ticket as the L2 holds it (relaxed, GPU scope: a load that returns whenever its register is
// first used), and the same with acquire: ordered before every later load of this thread. ptxas
// makes the acquire a load plus an L1 invalidation that waits for it, a full L2 round trip.
__device__ __forceinline__ int ticket_relaxed(const int* p) {
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ int ticket_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// ticket += 1, after (release, GPU scope) every store this thread has seen, the block's through its barrier.
__device__ __forceinline__ void ticket_release(int* p) {
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(p) : "memory");
}

// Q, dout and lse of query tile i (version 14's stage_query_tile without D, which has its own copy).
__device__ __forceinline__ void stage_q_dout_lse(uint32_t tQ, uint32_t tG, float* tl, const bf16* q_base,
                                                 const bf16* g_base, const float* l_row, size_t rs, int C, int T,
                                                 int q0, const bf16* qkv, const bf16* dout) {
    stage_sw128<128, 256>(tQ, q_base + (size_t)q0 * rs, rs, T - q0, qkv);
    stage_sw128<128, 256>(tG, g_base + (size_t)q0 * C, C, T - q0, dout);
    if (threadIdx.x < 128) {
        const int r = threadIdx.x;
        const bool ok = q0 + r < T;
        cp_async_4(tl + r, ok ? l_row + q0 + r : l_row, ok);
    }
}

extern "C" __global__ void __launch_bounds__(256, 1)
attention_backward15(float* dq, int* ticket, bf16* dqkv, const bf16* dout, const bf16* out, const bf16* qkv,
                     const float* lse, float* D, int T, int NH, float sl2, float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;  // swizzled tiles start 1024-aligned
    constexpr uint32_t QT = BQ * 128;                           // a 128-row tile: 16 KB
    constexpr int SP = 72;                                      // floats a row of the running sum (64 + 8)
    const uint32_t sK = base, sV = sK + BK * 128;               // the block's keys and values
    const uint32_t sQ = sV + BK * 128, sG = sQ + 2 * QT;        // Q and dout tiles, two buffers each
    const uint32_t sdS = sG + 2 * QT;                           // dS^T: [query half][128 keys][64 queries]
    const uint32_t sLD = sdS + 2 * BK * 128;                    // lse[2][128], D[2][128] (fp32)
    const uint32_t sSum = sLD + 2 * 2 * 128 * 4;                // the tile's running dQ sum: [128 queries][SP]
    char* const smem = reinterpret_cast<char*>(smem4);
    float* lsD = reinterpret_cast<float*>(smem + (sLD - smem_addr(smem4)));
    const float* sum = reinterpret_cast<const float*>(smem + (sSum - smem_addr(smem4)));

    const int kb = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y;  // last key block first: see the header
    const int k0 = kb * BK;
    const int b = bh / NH, h = bh % NH;
    const int C = NH * HSW;
    const size_t rs = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * rs + (size_t)h * HSW;
    const bf16* g_base = dout + (size_t)b * T * C + (size_t)h * HSW;
    const float* l_row = lse + (size_t)bh * T;  // lse and D are (B, NH, T)
    const int tiles = (T + BQ - 1) / BQ;              // query tiles of a head
    float* d_row = D + (size_t)bh * tiles * BQ;       // D's rows of this head, padded to whole tiles
    float* dq_head = dq + ((size_t)b * T) * C + (size_t)h * HSW;  // row q at + q C
    const int first = k0 / BQ;  // query tiles from the diagonal on
    int* tickets = ticket + (size_t)bh * tiles;
    int* ready = ticket + (size_t)gridDim.y * tiles + (size_t)bh * tiles;  // D of tile i is in d_row

    auto issue = [&](int i) {  // Q, dout and lse of query tile i into buffer i % 2, one cp.async group
        if (i < tiles) {
            const int buf = i % 2;
            stage_q_dout_lse(sQ + buf * QT, sG + buf * QT, lsD + buf * 256, q_base, g_base, l_row, rs, C, T,
                             i * BQ, qkv, dout);
        }
        cp_async_commit();
    };
    stage_sw128<BK, 256>(sK, q_base + (size_t)k0 * rs + C, rs, T - k0, qkv);
    stage_sw128<BK, 256>(sV, q_base + (size_t)k0 * rs + 2 * C, rs, T - k0, qkv);
    issue(first);
    {  // D of our diagonal tile, eight lanes a row, 32 rows a pass: into shared memory and d_row
        const bf16* o_base = out + (size_t)b * T * C + (size_t)h * HSW;
        const int lane8 = threadIdx.x % 8, q0 = first * BQ;
        float* tD = lsD + (first % 2) * 256 + 128;
        Pack8 gv[4], ov[4];
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const int q = q0 + threadIdx.x / 8 + 32 * p;
            if (q < T) {
                gv[p] = load8(g_base + (size_t)q * C + 8 * lane8);
                ov[p] = load8(o_base + (size_t)q * C + 8 * lane8);
            }
        }
#pragma unroll
        for (int p = 0; p < 4; p++) {
            const int r = threadIdx.x / 8 + 32 * p;
            float s = 0.0f;
            if (q0 + r < T) {
#pragma unroll
                for (int j = 0; j < 8; j++) s = fmaf(to_float(gv[p].v[j]), to_float(ov[p].v[j]), s);
            }
            s += __shfl_xor_sync(0xffffffffu, s, 1);
            s += __shfl_xor_sync(0xffffffffu, s, 2);
            s += __shfl_xor_sync(0xffffffffu, s, 4);
            if (lane8 == 0) {
                tD[r] = s;            // zero past T: masked queries must see a finite D
                d_row[q0 + r] = s;    // the padded rows too, for the consumers' 16-byte copies
            }
        }
    }

    const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int kw = k0 + 64 * wg;  // this warpgroup's first key
    float dk[8][4], dv[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const uint64_t descK = sw128_desc(sK + 64 * 128 * wg, 1024), descV = sw128_desc(sV + 64 * 128 * wg, 1024);
    const uint64_t descK_all = sw128_desc(sK, 1024);

    for (int i = first; i < tiles; i++) {
        const int q0 = i * BQ, buf = i % 2;
        cp_async_wait<0>();
        fence_proxy_async();  // this thread's copies, visible to the tensor cores
        __syncthreads();      // everyone's copies; and everyone is done with tile i - 1's buffers, dS and sum
        if (threadIdx.x == 0 && i > first && kb > 0) ticket_release(tickets + i - 1);  // tile i - 1's sum is out
        if (threadIdx.x == 0 && i == first) ticket_release(ready + first);  // every thread's D store is out
        issue(i + 1);
        const uint32_t tQ = sQ + buf * QT, tG = sG + buf * QT;
        const float* tl = lsD + buf * 256;
        const float* tD = tl + 128;
        const bool edge = i == first || q0 + BQ > T;  // the diagonal tile or the last: masks needed

        // S^T = K Q^T and dP^T = V dout^T for this warpgroup's 64 keys, in two 64-query halves.
        float s[2][8][4], dp[2][8][4];
        products_s_dp(s, dp, descK, descV, tQ, tG);
        wgmma_commit();
        // Tile i's ticket, read now and looked at after the dV and dK products are issued.
        int seen = 0, up = 1;
        if (i > first) seen = ticket_relaxed(tickets + i);
        if (threadIdx.x < 32 && i + 1 < tiles) up = ticket_relaxed(ready + i + 1);  // D of the next tile
        wgmma_wait<0>();

        // P^T = 2^(s sl2 - lse log2 e), zero where key > query or query >= T; dS^T = P^T (dP^T - D).
        uint32_t pa[2][4][4], sa[2][4][4];
        softmax_grads(pa, sa, s, dp, tl, tD, kw + 16 * warp + g, q0, T, edge, sl2);

        // dV += P^T dout, dK += dS^T Q over the 128 queries (A from registers, dout and Q MN-major).
        products_dv_dk(dv, dk, pa, sa, tQ, tG);
        wgmma_commit();

        // While those run: wait for key block kb + 1's share of this tile (i - kb shares before ours),
        // then fetch the running sum, 16 bytes a copy, into sum[query][channel]. The fetch cannot
        // start before the ticket's value is back (it depends on the test), and cp.async.cg reads
        // the L2, where the writer's release put its sums before the ticket moved; when the early
        // read already shows our turn it is therefore not repeated with acquire (see the header).
        if (i > first) {
            while (seen < i - kb) seen = ticket_acquire(tickets + i);
#pragma unroll
            for (int c = 0; c < BQ * HSW / 4 / 256; c++) {
                const int chunk = threadIdx.x + 256 * c, r = chunk / 16, col = 4 * (chunk % 16);
                const bool ok = q0 + r < T;
                cp_async_16(sSum + (r * SP + col) * 4, ok ? dq_head + (size_t)(q0 + r) * C + col : dq, ok);
            }
            cp_async_commit();
        }
        if (threadIdx.x < 32 && i + 1 < tiles) {  // warp 0: D of tile i + 1 (set by key block i + 1) into lsD
            while (up == 0) up = ticket_acquire(ready + i + 1);
            cp_async_16(smem_addr(lsD + ((i + 1) % 2) * 256 + 128 + 4 * threadIdx.x), d_row + (i + 1) * BQ + 4 * threadIdx.x,
                        true);
            cp_async_commit();
        }
        // dS^T to shared memory: half hq of the queries at sdS + hq * 16 KB, row = key (0-127).
        store_ds_t(sdS, sa, wg, warp, g, t);
        cp_async_wait<0>();  // this thread's share of the running sum (and tile i + 1's copies)
        block_sync_256();    // both warpgroups' dS^T rows are written; the whole running sum is here
        // dQ = dS K for queries 64 wg .. 64 wg + 63 of the tile over all 128 keys.
        float dqa[8][4];
        product_dq(dqa, sdS, descK_all, wg, warp, lane);
        wgmma_commit();
        wgmma_wait<0>();  // dV, dK and dQ's share

        // Our share plus the sum so far (none on our diagonal tile: we are the first), then either
        // the sum back for key block kb - 1 or, from key block 0 (the last), dQ itself in bf16.
        const int r0 = 64 * wg + 16 * warp + g;  // tile row of e = 0, 1 (e = 2, 3: + 8)
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int ch = 8 * n + 2 * t;
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                const int r = r0 + 8 * hr, qr = q0 + r;
                float x = dqa[n][2 * hr], y = dqa[n][2 * hr + 1];
                if (i > first) {
                    const float2 before = *reinterpret_cast<const float2*>(sum + r * SP + ch);
                    x += before.x;
                    y += before.y;
                }
                if (qr < T) {
                    if (kb == 0)
                        *reinterpret_cast<uint32_t*>(dqkv + ((size_t)b * T + qr) * rs + (size_t)h * HSW + ch) =
                            pack_bf16x2(scale * x, scale * y);
                    else
                        __stcg(reinterpret_cast<float2*>(dq_head + (size_t)qr * C + ch), make_float2(x, y));
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads();  // every thread's part of the last tile's sum is stored
    if (threadIdx.x == 0 && kb > 0) ticket_release(tickets + tiles - 1);

    store_dk_dv(dqkv, dk, dv, kw + 16 * warp + g, b, h, T, C, scale);  // rows: this warpgroup's keys
#else
    __trap();  // wgmma needs sm_90a (a Hopper GPU): see the header
#endif
}
