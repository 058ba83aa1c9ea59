/*
title = "bf16 tensor cores, deterministic: version 8's two kernels with 32 rows a warp, each fragment feeding two mma"
builds_on = 8
precision = "bf16"
changed = """
Version 8's split (a dK/dV kernel over key tiles, a dQ kernel over query tiles, no atomics), with
each warp owning 32 rows (two m16 tiles) instead of 16, in blocks of 4 warps x 32 = 128 rows:
* dK/dV: a warp's 32 keys keep their K rows as A fragments in registers for the whole loop (V's
  are reloaded every step: the registers for both are not there); the 64-query tile streamed
  through the cp.async double buffer is taken 16 queries at a time, and every Q or dout fragment
  fetched by ldmatrix (for S^T = K Q^T, dP^T = V dout^T, and through .trans for dV += P^T dout,
  dK += dS^T Q) feeds the warp's two key m-tiles. Whole query tiles take a short copy path (one
  pointer a thread and tensor), and only sub-tiles that touch the diagonal or T are masked (a
  second instantiation of the step).
* dQ: a warp's 32 queries keep their q and dout rows as A fragments; the 64-key tile is taken
  16 keys at a time, and every K or V fragment (for S, dP, and dQ += dS K) feeds two query m-tiles.
* Sub-tiles wholly above the diagonal (every key after every query) are skipped warp by warp.
"""
why = """
Per warp and sub-tile, from the fragment counts (HS = 64):
  dK/dV, 32 keys x 16 queries: 64 mma (16 each for S^T, dP^T, dV, dK) for 24 ldmatrix.x4 (4 each
    of Q, dout, dout^T, Q^T, and 8 of V): 2.7 mma a load. Version 8: 160 mma for 80 loads (2 a
    load), its K and V fragments reloaded every tile.
  dQ, 32 queries x 16 keys: 48 mma (16 each for S, dP, dQ) for 12 ldmatrix.x4 (K, V, K^T): 4 a
    load. Version 8: 96 mma for 48 loads (2 a load).
An SM reads 128 B of shared memory a clock, an ldmatrix.x4 512 B: 4 clocks; an m16n8k16 is
~1.5 clocks of an SM's mma.sync throughput. At 2 mma a load the loads cap the tensor pipe at ~2/3;
at 4 a load they fit under it. The seven products (S and dP computed twice) stay: ~1.4x the
tensor work of one kernel with dQ by atomics (version 11 is that kernel), against no atomics, no
fp32 dQ scratch and one barrier a tile.
Registers (ptxas, sm_90): dK/dV holds K fragments (32), dK and dV (128), S^T and dP^T of a sub-tile
(32) and V's fragments while dP^T is formed (32): 252 (250 at 8 warps), no spills; with V's
fragments kept too it spilled 130-160 bytes. dQ holds q and dout fragments (64), dQ (64), S and dP
of a sub-tile (32): 246 (234), no spills; 32-key sub-tiles spilled. sm_80 spills 16-56 bytes in
dK/dV. Shared memory: 128 K + 128 V rows and 2 x (64 Q + 64 dout) rows of 144 B, 73 KB a block
(dQ: 128 q + 128 dout rows and 2 x (64 K + 64 V)), two blocks an SM.
Block counts at B = 16, T = 1024, NH = 12: 192 heads x 8 tiles = 1536 blocks a kernel on 264
slots, longest first (the first key tiles see the most queries; the last query tiles the most keys).
Block size 256: 8 warps, 256 rows a block, one block an SM; each streamed tile serves twice the rows.
Not yet measured: to be timed on the H100 against versions 7, 8 and cuDNN's 9 in one call.
"""
preconditions = ["HS <= 64"]  # one 64-channel tile (16-byte cp.async rows when HS % 8 == 0, else element by element)
block_sizes = [128, 256]

[scratch]
D = "B * NH * T"

[[launch]]
kernel = "attention_backward10_prep"
grid = "cdiv(B * T * NH, 32)"
block = 256
args = ["D", "dout", "out", "B", "T", "NH", "HS"]

[[launch]]
kernel = "attention_backward10_dkdv4"
when = "block_size == 128"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * 72 * (2 * 128 + 4 * 64) + 16 * 64"
args = ["dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward10_dkdv8"
when = "block_size == 256"
grid = ["B * NH", "cdiv(T, 256)"]
block = 256
shared = "2 * 72 * (2 * 256 + 4 * 64) + 16 * 64"
args = ["dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward10_dq4"
when = "block_size == 128"
grid = ["B * NH", "cdiv(T, 128)"]
block = 128
shared = "2 * 72 * (2 * 128 + 4 * 64)"
args = ["dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward10_dq8"
when = "block_size == 256"
grid = ["B * NH", "cdiv(T, 256)"]
block = 256
shared = "2 * 72 * (2 * 256 + 4 * 64)"
args = ["dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[emulate]]
runs = ["seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 2, T = 100, NH = 3, HS = 16 }]
runs = ["bs=256 seed=1 EARLY SHUFFLE"]

# whole 64-row tiles over several key and query blocks, HS 32 and 48, T just past and short of a
# 128-row block; both block sizes, the 256-thread blocks in a shuffled order
[[emulate]]
sizes = [{ B = 1, T = 300, NH = 1, HS = 64 }, { B = 2, T = 256, NH = 2, HS = 32 },
  { B = 1, T = 520, NH = 1, HS = 48 }, { B = 1, T = 129, NH = 2, HS = 64 }, { B = 1, T = 127, NH = 1, HS = 24 }]
runs = ["bs=128 seed=3 PRIORITY sched_seed=3", "bs=256 seed=3 PRIORITY sched_seed=3 order=7"]
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

// ---- end attention_backward_bf16.cuh ----  // load_tile_async, load_queries, load_a16, abt2, ab2, c_to_a, Flag, store_rows, dot_rows

#define BQ 64  // queries per streamed tile of the dK/dV kernel
#define BK 64  // keys per streamed tile of the dQ kernel

extern "C" __global__ void attention_backward10_prep(float* D, const bf16* dout, const bf16* out,
                                                     int B, int T, int NH, int HS) {
    dot_rows(D, nullptr, dout, out, B, T, NH, HS);
}

// dK and dV of 32 WARPS keys: warp w owns keys kw = k0 + 32 w .. kw + 31 (m-tiles kw, kw + 16) and
// walks the query tiles from the block's first key to T, 16 queries at a time. Accumulator element
// x[mt][j][e] of S^T, dP^T is (key kw + 16 mt + g + 8 (e / 2), query qs + 8 j + 2 t + e % 2).
template <int WARPS>
__device__ __forceinline__ void dkdv10(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                       const float* D, int T, int NH, int HS, float scale) {
    constexpr int THREADS = 32 * WARPS, BC = 32 * WARPS, DT = AB_DH / 8, KT = AB_DH / 16;
    constexpr int PASS = THREADS / 8;  // rows a pass of 16-byte copies covers (8 a row)
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sK = reinterpret_cast<bf16*>(smem);  // [BC][PITCH]
    bf16* sV = sK + BC * AB_PITCH;             // [BC][PITCH]
    bf16* sQ = sV + BC * AB_PITCH;             // [2][BQ][PITCH]
    bf16* sG = sQ + 2 * BQ * AB_PITCH;         // [2][BQ][PITCH]
    float* sL = reinterpret_cast<float*>(sG + 2 * BQ * AB_PITCH);  // [2][BQ]
    float* sD = sL + 2 * BQ;                                        // [2][BQ]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.y * BC, kw = k0 + 32 * warp;
    const int C = NH * HS;
    const size_t rs = 3 * (size_t)C;
    const bf16* qbase = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16* gbase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float* lrow = lse + (size_t)bh * T;
    const float* drow = D + (size_t)bh * T;
    const float sl2 = scale * AB_LOG2E;

    // A whole query tile with HS % 8 == 0 (every tile but a sequence's last): this thread's 16-byte
    // pieces sit at one pointer plus multiples of PASS rows; pieces past HS are zero-filled from
    // the row's start. Anything else goes through load_queries' general path.
    const int cr = threadIdx.x / 8, cc = 8 * (threadIdx.x % 8);
    const bool cvalid = cc < HS;
    const bf16* qsrc = qbase + (size_t)cr * rs + (cvalid ? cc : 0);
    const bf16* gsrc = gbase + (size_t)cr * C + (cvalid ? cc : 0);
    auto stage = [&](int q0, int buf) {  // one cp.async group: the query tile q0 into buffer buf
        if (HS % 8 == 0 && q0 + BQ <= T) {
            const uint32_t qd = smem_addr(sQ + (buf * BQ + cr) * AB_PITCH + cc);
            const uint32_t gd = smem_addr(sG + (buf * BQ + cr) * AB_PITCH + cc);
            const bf16* qp = qsrc + (size_t)q0 * rs;
            const bf16* gp = gsrc + (size_t)q0 * C;
#pragma unroll
            for (int k = 0; k < BQ / PASS; k++) {
                cp_async_16(qd + 2 * k * PASS * AB_PITCH, qp + (size_t)k * PASS * rs, cvalid);
                cp_async_16(gd + 2 * k * PASS * AB_PITCH, gp + (size_t)k * PASS * C, cvalid);
            }
            if (threadIdx.x < BQ) {
                cp_async_4(sL + buf * BQ + threadIdx.x, lrow + q0 + threadIdx.x, true);
                cp_async_4(sD + buf * BQ + threadIdx.x, drow + q0 + threadIdx.x, true);
            }
            cp_async_commit();
        } else {
            load_queries<THREADS>(sQ + buf * BQ * AB_PITCH, sG + buf * BQ * AB_PITCH, sL + buf * BQ, sD + buf * BQ,
                                  qbase, rs, gbase, C, lrow, drow, q0, T, HS);
        }
    };
    load_tile_async<BC, THREADS>(sK, qbase + C, rs, k0, T, HS, qkv);
    load_tile_async<BC, THREADS>(sV, qbase + 2 * C, rs, k0, T, HS, qkv);
    stage(k0, 0);  // group 0: K, V and the first query tile

    unsigned ka[2][KT][4];  // this warp's K rows as A fragments
    float dk[2][DT][4] = {}, dv[2][DT][4] = {};

    // 16 queries qs = q0 + 16 sub of the tile in buffer buf against the warp's 32 keys. MASK: the
    // sub-tile touches the diagonal or the sequence end (p = 0 where key > query or query >= T).
    auto step = [&](int q0, int sub, int buf, auto MASK) {
        const bf16* q_s = sQ + (buf * BQ + 16 * sub) * AB_PITCH;
        const bf16* g_s = sG + (buf * BQ + 16 * sub) * AB_PITCH;
        const int col = buf * BQ + 16 * sub + 2 * t;  // lse / D of query q0 + 16 sub + 2 t + 8 j + (e & 1)
        float s[2][2][4] = {}, dp[2][2][4] = {};
        abt2<2>(s, ka, q_s);  // S^T = K Q^T
        {
            unsigned va[2][KT][4];  // V's fragments, reloaded every step: not the registers to keep them
#pragma unroll
            for (int mt = 0; mt < 2; mt++) load_a16(va[mt], sV + (32 * warp + 16 * mt) * AB_PITCH);
            abt2<2>(dp, va, g_s);  // dP^T = V dout^T
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const float2 l2 = *reinterpret_cast<const float2*>(sL + col + 8 * j);
            const float2 d2 = *reinterpret_cast<const float2*>(sD + col + 8 * j);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = exp2f(fmaf(s[mt][j][e], sl2, -((e & 1) ? l2.y : l2.x) * AB_LOG2E));
                    if constexpr (decltype(MASK)::value) {
                        const int query = q0 + 16 * sub + 2 * t + 8 * j + (e & 1), key = kw + 16 * mt + g + 8 * (e >> 1);
                        if (key > query || query >= T) p = 0.0f;
                    }
                    s[mt][j][e] = p;
                    dp[mt][j][e] = p * (dp[mt][j][e] - ((e & 1) ? d2.y : d2.x));
                }
        }
        unsigned a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) c_to_a<2>(a[mt], s[mt], 0);  // P^T (32 keys x 16 queries)
        ab2(dv, a, g_s);                                            // dV += P^T dout
#pragma unroll
        for (int mt = 0; mt < 2; mt++) c_to_a<2>(a[mt], dp[mt], 0);  // dS^T
        ab2(dk, a, q_s);                                             // dK += dS^T Q
    };

    int buf = 0;
    for (int q0 = k0; q0 < T; q0 += BQ, buf ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this tile landed everywhere; every warp is done with the other buffer
        if (q0 == k0) {
#pragma unroll
            for (int mt = 0; mt < 2; mt++) load_a16(ka[mt], sK + (32 * warp + 16 * mt) * AB_PITCH);
        }
        if (q0 + BQ < T) stage(q0 + BQ, buf ^ 1);
#pragma unroll 1
        for (int sub = 0; sub < BQ / 16; sub++) {
            const int qs = q0 + 16 * sub;
            if (qs >= T || qs + 15 < kw) continue;  // past the end, or every query before every key
            if (kw + 31 > qs || qs + 16 > T) step(q0, sub, buf, Flag<true>{});
            else step(q0, sub, buf, Flag<false>{});
        }
    }
    bf16* out = dqkv + (size_t)b * T * rs + (size_t)h * HS;
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
        store_rows<DT>(out + C, rs, kw + 16 * mt, T, 0, HS, dk[mt], scale);
        store_rows<DT>(out + 2 * C, rs, kw + 16 * mt, T, 0, HS, dv[mt], 1.0f);
    }
}

// dQ of 32 WARPS queries: warp w owns queries qw = q0 + 32 w .. qw + 31 (m-tiles qw, qw + 16) and
// walks the key tiles 0, BK, ... up to its block's last query, 16 keys at a time. Accumulator
// element x[mt][j][e] of S, dP is (query qw + 16 mt + g + 8 (e / 2), key ks + 8 j + 2 t + e % 2).
template <int WARPS>
__device__ __forceinline__ void dq10(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                                     const float* D, int T, int NH, int HS, float scale) {
    constexpr int THREADS = 32 * WARPS, BR = 32 * WARPS, DT = AB_DH / 8, KT = AB_DH / 16;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sQ = reinterpret_cast<bf16*>(smem);  // [BR][PITCH] (read once into registers)
    bf16* sG = sQ + BR * AB_PITCH;             // [BR][PITCH]
    bf16* sK = sG + BR * AB_PITCH;             // [2][BK][PITCH]
    bf16* sV = sK + 2 * BK * AB_PITCH;         // [2][BK][PITCH]

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int q0 = (gridDim.y - 1 - blockIdx.y) * BR, qw = q0 + 32 * warp;  // last tiles first
    const int C = NH * HS;
    const size_t rs = 3 * (size_t)C;
    const bf16* qbase = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const float sl2 = scale * AB_LOG2E;

    // lse (times log2 e) and D of this thread's four rows, qw + 16 mt + g + 8 r.
    float l2[2][2], d[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int row = qw + 16 * mt + g + 8 * r;
            l2[mt][r] = row < T ? lse[(size_t)bh * T + row] * AB_LOG2E : 0.0f;
            d[mt][r] = row < T ? D[(size_t)bh * T + row] : 0.0f;
        }

    auto stage = [&](int k0, int buf) {
        load_tile_async<BK, THREADS>(sK + buf * BK * AB_PITCH, qbase + C, rs, k0, T, HS, qkv);
        load_tile_async<BK, THREADS>(sV + buf * BK * AB_PITCH, qbase + 2 * C, rs, k0, T, HS, qkv);
        cp_async_commit();
    };
    load_tile_async<BR, THREADS>(sQ, qbase, rs, q0, T, HS, qkv);
    load_tile_async<BR, THREADS>(sG, dout + (size_t)b * T * C + (size_t)h * HS, C, q0, T, HS, dout);
    stage(0, 0);  // one group: Q, dout and the first key tile

    unsigned qa[2][KT][4], ga[2][KT][4];  // this warp's q and dout rows as A fragments
    float dq[2][DT][4] = {};
    const int kend = min(q0 + BR, T);  // keys after the block's last query are masked for all of it
    int buf = 0;
    for (int k0 = 0; k0 < kend; k0 += BK, buf ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this key tile landed everywhere; every warp is done with the other buffer
        if (k0 == 0) {
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                load_a16(qa[mt], sQ + (32 * warp + 16 * mt) * AB_PITCH);
                load_a16(ga[mt], sG + (32 * warp + 16 * mt) * AB_PITCH);
            }
        }
        if (k0 + BK < kend) stage(k0 + BK, buf ^ 1);
#pragma unroll 1
        for (int sub = 0; sub < BK / 16; sub++) {
            const int ks = k0 + 16 * sub;
            if (qw >= T || ks > qw + 31) continue;  // no row of this warp, or every key after every query
            const bf16* k_s = sK + (buf * BK + 16 * sub) * AB_PITCH;
            float s[2][2][4] = {}, dp[2][2][4] = {};
            abt2<2>(s, qa, k_s);                                     // S = Q K^T
            abt2<2>(dp, ga, sV + (buf * BK + 16 * sub) * AB_PITCH);  // dP = dout V^T
            const bool edge = ks + 15 > qw;  // some key after some query of this warp
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int j = 0; j < 2; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int r = e >> 1, query = qw + 16 * mt + g + 8 * r, key = ks + 8 * j + 2 * t + (e & 1);
                        float p = exp2f(fmaf(s[mt][j][e], sl2, -l2[mt][r]));
                        if (edge && key > query) p = 0.0f;  // keys >= T are after every query < T
                        dp[mt][j][e] = p * (dp[mt][j][e] - d[mt][r]);
                    }
            unsigned a[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++) c_to_a<2>(a[mt], dp[mt], 0);
            ab2(dq, a, k_s);  // dQ += dS K over the sub-tile's 16 keys
        }
    }
    bf16* out = dqkv + (size_t)b * T * rs + (size_t)h * HS;
#pragma unroll
    for (int mt = 0; mt < 2; mt++) store_rows<DT>(out, rs, qw + 16 * mt, T, 0, HS, dq[mt], scale);
}

#define ENTRY(name, body, WARPS, MIN_BLOCKS)                                                               \
    extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)                                   \
    name(bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D, int T, int NH,  \
         int HS, float scale) {                                                                            \
        body<WARPS>(dqkv, dout, qkv, lse, D, T, NH, HS, scale);                                            \
    }
ENTRY(attention_backward10_dkdv4, dkdv10, 4, 2)
ENTRY(attention_backward10_dkdv8, dkdv10, 8, 1)
ENTRY(attention_backward10_dq4, dq10, 4, 2)
ENTRY(attention_backward10_dq8, dq10, 8, 1)
