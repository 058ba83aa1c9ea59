/*
title = "bf16 tensor cores: mma.sync m16n8k16 on K, V resident tiles, Q and dout streamed by cp.async, dQ by fp32 atomics"
precision = "bf16"
deterministic = false  # dQ is summed over key tiles with float atomicAdd: its last bits vary run to run
changed = """
Version 5's flash structure (a block per key tile, the query tiles from the diagonal down, D =
dout . out from a first kernel, dQ summed by atomics) with every product on the bf16 tensor cores:
each warp owns 16 keys, and the five products of a (key tile, query tile) pair are
mma.sync.m16n8k16 instructions fed by ldmatrix from padded shared tiles, accumulating in fp32.
qkv, dout, out and dqkv are bf16; dQ is summed in an fp32 scratch (B, T, C) that the first kernel
zeroes and a last kernel scales and rounds into dqkv.
"""
why = """
Version 5 spends 1024 FMAs per thread on each 64 x 64 x 64 product; here a warp issues 32 mma
instructions for its 16 x 64 share, and the H100's bf16 tensor cores have ~15x the fp32 FMA rate.
What keeps them fed:
(1) Operands come from shared memory by ldmatrix, four 8 x 8 blocks per instruction, already in
fragment order; rows padded to 72 bf16 (144 B) make every ldmatrix and cp.async conflict-free.
(2) A product's result feeds the next product from registers: the accumulator layout of S^T
(keys x queries) is the A-operand layout of the next mma, so P^T and dS^T go straight into
dV += P^T dout and dK += dS^T Q. Only dS^T is written to shared memory (once, as bf16), because
dQ = dS K needs it split by queries rather than by keys.
(3) The next Q and dout tiles are copied by cp.async into a second buffer while the current pair
is computed; K and V stay in shared memory for the block's lifetime, and dK and dV in registers
(fp32) until they are written once, as bf16.
(4) The softmax is one FFMA and one exp2 per score (the scale and log2 e folded into one factor),
with the causal mask only on tiles that touch the diagonal or the end of the sequence.
Block size 128: 4 warps, 64 keys per block, 64 KB of shared memory and ~240 registers a thread:
2 blocks (8 warps) per SM. 256: 8 warps, 128 keys, 91 KB, 1 block per SM: the same 8 warps, but
each Q/dout tile and each dQ atomic serves twice the keys (half the L2 traffic).
Head sizes that are not a multiple of 8 (rows not 16-byte aligned) take element-by-element
loads and stores instead of cp.async and 16-byte accesses; the tiles are the same.
"""
preconditions = ["HS <= 64"]  # one 64-channel tile (16-byte cp.async rows when HS % 8 == 0, else element by element)
block_sizes = [128, 256]

[scratch]
D = "B * NH * T"   # dout . out per row, fp32
dq = "B * T * C"   # dQ accumulator, fp32, laid out (B, T, NH, HS)

[[launch]]
kernel = "attention_backward7_prep"
grid = "cdiv(B * T * NH, 32)"   # 8 lanes per (b, t, h) row, 32 rows per block
block = 256
args = ["dq", "D", "dout", "out", "B", "T", "NH", "HS"]

[[launch]]
kernel = "attention_backward7_bc64"
when = "block_size == 128"
grid = ["B * NH", "cdiv(T, 64)"]
block = 128
shared = "2 * 72 * (3 * 64 + 4 * 64) + 16 * 64"
args = ["dq", "dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward7_bc128"
when = "block_size == 256"
grid = ["B * NH", "cdiv(T, 128)"]
block = 256
shared = "2 * 72 * (3 * 128 + 4 * 64) + 16 * 64"
args = ["dq", "dqkv", "dout", "qkv", "lse", "D", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward7_dq"
grid = "cdiv(B * T * C, 8 * 256)"
block = 256
args = ["dqkv", "dq", "B * T", "C", "1.0 / sqrt(HS)"]
*/
// ---- begin attention_backward_bf16.cuh ----
// attention_backward_bf16.cuh: the warp-level pieces the bf16 tensor-core versions of
// attention_backward (7: dQ by atomics, 8: deterministic split) are built from.
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
//   (rows 8-15, ch +8), which is a[kk][0..3] (see mma_backward.cuh).
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
//   identity in mma_backward.cuh), rounded to bf16.
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
// ---- begin mma_backward.cuh ----
// mma_backward.cuh: warp-level tensor-core instructions (mma.sync, ldmatrix, cp.async) as small
// inline-PTX functions, with the fragment layouts they imply written out. Used by the tensor-core
// versions of attention_backward (6: TF32, 7 and 8: bf16).
//
// Written for the attention backward while kernels/common/mma.cuh (the forward's) was being
// written: the same names and signatures (mma_bf16_16816, mma_tf32_1688, ldmatrix_x4[_trans],
// cp_async_16, cp_async_commit, cp_async_wait, to_tf32, pack_bf16x2), plus cp_async_4. Folding
// the two is replacing the include and adding cp_async_4 to mma.cuh.
//
// Notation for every layout below (PTX ISA, "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8"):
//   lane = threadIdx.x % 32,  g = lane / 4 ("groupID", 0..7),  t = lane % 4 ("threadID_in_group").
//   A is M x K ("row": a thread's registers run along K), B is K x N ("col": they run along K
//   too), C and D are M x N. A register holding two bf16 keeps the lower-indexed one in its low
//   16 bits.
//
// mma_bf16_16816(d, a, b0, b1): d += a * b, A 16 x 16 bf16, B 16 x 8 bf16, C/D 16 x 8 fp32.
//   a[0] = A[g    ][2t, 2t+1]     a[1] = A[g + 8][2t, 2t+1]
//   a[2] = A[g    ][2t+8, 2t+9]   a[3] = A[g + 8][2t+8, 2t+9]
//   b[0] = B[2t, 2t+1][g]         b[1] = B[2t+8, 2t+9][g]
//   d[0] = D[g][2t]  d[1] = D[g][2t+1]  d[2] = D[g+8][2t]  d[3] = D[g+8][2t+1]
//   Note that d[0..1] of two horizontally adjacent 16 x 8 accumulators (columns 0..7 and 8..15)
//   hold exactly what a[0] and a[2] of a 16 x 16 A operand hold, and d[2..3] what a[1], a[3]
//   hold: a product computed on the tensor cores can be fed to the next one as its A operand
//   straight from registers (pack_bf16x2 the pairs), with no trip through shared memory.
//
// mma_tf32_1688(d, a, b0, b1): d += a * b, A 16 x 8 tf32, B 8 x 8 tf32, C/D 16 x 8 fp32. Each register
//   holds one 32-bit value (an fp32 bit pattern; the tensor core reads its top 19 bits: round it
//   first with to_tf32 for round-to-nearest rather than truncation).
//   a[0] = A[g][t]  a[1] = A[g + 8][t]  a[2] = A[g][t + 4]  a[3] = A[g + 8][t + 4]
//   b[0] = B[t][g]  b[1] = B[t + 4][g]
//   d: as for m16n8k16.
//
// ldmatrix_x4(r, p): four 8 x 8 matrices of 16-bit elements from shared memory. Lane L passes
//   in p the address of row L % 8 of matrix L / 8 (16 contiguous bytes, 16-byte aligned; rows
//   may lie anywhere). Lane L receives in r[m] row L / 4 of matrix m, elements 2 (L % 4) and
//   2 (L % 4) + 1: (g, 2t) and (g, 2t + 1), the layout of a[], b[] and d[] above.
// ldmatrix_x4_trans(r, p): the same rows, but each matrix is handed out transposed: lane L
//   receives in r[m] the elements (row 2t, column g) and (row 2t + 1, column g) of matrix m
//   (row = the 16-byte row a lane addressed, column = the element within it).
//
// cp_async_16(dst, src, valid): copy 16 bytes global -> shared without passing through registers
//   (cp.async.cg: cached in L2 only). valid == false writes 16 zero bytes instead (src-size 0:
//   nothing is read; src must still be a valid address, e.g. the tensor's base).
// cp_async_4(dst, src, valid): the same for 4 bytes (cp.async.ca).
// cp_async_commit(): closes the group of copies this thread issued since the last commit.
// cp_async_wait<N>(): waits until at most N of this thread's groups are still in flight. Other
//   threads' copies are only visible after a __syncthreads() that follows their wait.
//
// pack_bf16x2(lo, hi): two floats rounded to bf16 and packed (lo in the low half).
// to_tf32(x): x rounded to nearest TF32 (10 mantissa bits, ties away from zero), as the 32-bit
//   register value (low 13 bits zero).

#ifndef KERNELS_COMMON_MMA_BACKWARD_CUH
#define KERNELS_COMMON_MMA_BACKWARD_CUH

#include <cuda_bf16.h>

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_tf32_1688(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ unsigned smem_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_address(p)));
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(smem_address(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :: "r"(smem_address(dst)), "l"(src), "r"(valid ? 4 : 0) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }

__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x = lo (low 16 bits), .y = hi
    return *reinterpret_cast<unsigned*>(&v);
}

__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

#endif  // KERNELS_COMMON_MMA_BACKWARD_CUH

// ---- end mma_backward.cuh ----
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

// ---- end attention_backward_bf16.cuh ----  // load_tile_async, key_pair, mma_ab, store_a_smem, store_rows, dot_rows

#define BR 64  // queries per step

// D = dout . out per (b, t, h) row, and the fp32 dQ accumulator zeroed.
extern "C" __global__ void attention_backward7_prep(float* dq, float* D, const bf16* dout, const bf16* out,
                                                    int B, int T, int NH, int HS) {
    dot_rows(D, dq, dout, out, B, T, NH, HS);
}

// dqkv's q part = bf16(scale * dq), 8 consecutive elements of dq (B T rows of C) per thread: one
// float4 pair and one Pack8 when C % 8 == 0 (rows 16-byte aligned), else one by one.
extern "C" __global__ void attention_backward7_dq(bf16* dqkv, const float* dq, int BT, int C, float scale) {
    const long long i = 8 * ((long long)blockIdx.x * blockDim.x + threadIdx.x), n = (long long)BT * C;
    if (i >= n) return;
    if (C % 8 == 0) {
        const long long bt = i / C;
        const int c = (int)(i % C);
        const float4* src = reinterpret_cast<const float4*>(dq + i);
        float4 x0 = src[0], x1 = src[1];
        float x[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        Pack8 p;
#pragma unroll
        for (int k = 0; k < 8; k++) p.v[k] = to_bf16(x[k] * scale);
        store8(dqkv + bt * 3 * C + c, p);
    } else {
        for (long long e = i; e < i + 8 && e < n; e++) dqkv[(e / C) * 3 * C + e % C] = to_bf16(dq[e] * scale);
    }
}

// Two adjacent floats added to global memory (one vector atomic where the GPU has it).
__device__ __forceinline__ void atomic_add2(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(x, y));
#else
    atomicAdd(p, x);
    atomicAdd(p + 1, y);
#endif
}

// One block: BC = 16 WARPS keys of one head; warp w owns keys kw = k0 + 16 w .. kw + 15 for
// S^T, dP^T, dV and dK, and query rows 16 (w % 4) .. + 15 (channels split by w / 4) for dQ.
// Thread (g, t) = (lane / 4, lane % 4) holds, of a keys x queries accumulator x[j][e], the
// element (key kw + g + 8 (e / 2), query q0 + 8 j + 2 t + e % 2).
template <int WARPS>
__device__ __forceinline__ void key_tile7(float* dq, bf16* dqkv, const bf16* dout, const bf16* qkv,
                                          const float* lse, const float* D, int T, int NH, int HS, float scale) {
    constexpr int THREADS = 32 * WARPS, BC = 16 * WARPS;
    constexpr int DT = AB_DH / 8;            // n-tiles of channels in dK, dV
    constexpr int DQ_NT = DT / (WARPS / 4);  // n-tiles of channels per warp in dQ
    extern __shared__ __align__(16) unsigned char smem[];
    bf16* sK = reinterpret_cast<bf16*>(smem);  // [BC][PITCH] keys
    bf16* sV = sK + BC * AB_PITCH;             // [BC][PITCH] values
    bf16* sS = sV + BC * AB_PITCH;             // [BC][PITCH] dS^T of the current pair: [key][query]
    bf16* sQ = sS + BC * AB_PITCH;             // [2][BR][PITCH] queries, double-buffered
    bf16* sG = sQ + 2 * BR * AB_PITCH;         // [2][BR][PITCH] dout rows
    float* sL = reinterpret_cast<float*>(sG + 2 * BR * AB_PITCH);  // [2][BR] lse
    float* sD = sL + 2 * BR;                                        // [2][BR] D

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int k0 = blockIdx.y * BC, kw = k0 + 16 * warp;  // low blockIdx.y: most query tiles, launched first
    const int C = NH * HS;
    const size_t rs = 3 * (size_t)C;  // qkv and dqkv row stride
    const bf16* qbase = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const bf16* gbase = dout + (size_t)b * T * C + (size_t)h * HS;
    const float* lrow = lse + (size_t)bh * T;
    const float* drow = D + (size_t)bh * T;
    const float sl2 = scale * AB_LOG2E;  // exp(scale s - lse) = 2^(s sl2 - lse log2 e)

    auto stage = [&](int q0, int buf) {  // queries q0 .. q0 + BR - 1 into buffer buf: one cp.async group
        load_queries<THREADS>(sQ + buf * BR * AB_PITCH, sG + buf * BR * AB_PITCH, sL + buf * BR, sD + buf * BR,
                              qbase, rs, gbase, C, lrow, drow, q0, T, HS);
    };
    load_tile_async<BC, THREADS>(sK, qbase + C, rs, k0, T, HS, qkv);
    load_tile_async<BC, THREADS>(sV, qbase + 2 * C, rs, k0, T, HS, qkv);
    stage(k0, 0);  // one group: K, V and the diagonal query tile

    float dk[DT][4] = {}, dv[DT][4] = {};
    int buf = 0;
    for (int q0 = k0; q0 < T; q0 += BR, buf ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // (A) this tile has landed for all threads, and every warp is done with
                          // the previous pair (its buffer, which is refilled next, and sS)
        if (q0 + BR < T) stage(q0 + BR, buf ^ 1);
        const bf16* q_s = sQ + buf * BR * AB_PITCH;
        const bf16* g_s = sG + buf * BR * AB_PITCH;
        const float* l_s = sL + buf * BR;
        const float* d_s = sD + buf * BR;

        unsigned aS[AB_DH / 16][4] = {};  // dS^T (16 keys x 64 queries) as A fragments, bf16
        if (kw <= q0 + BR - 1)            // else every key of this warp is after every query: P = 0
            key_pair(dk, dv, aS, sK + 16 * warp * AB_PITCH, sV + 16 * warp * AB_PITCH, q_s, g_s, l_s, d_s,
                     kw, q0, T, sl2);
        store_a_smem(sS + 16 * warp * AB_PITCH, aS);
        __syncthreads();  // (B) all of dS^T is in sS

        // dQ rows (queries) 16 wq .. + 15, channels c0 .. c0 + 8 DQ_NT - 1: sum over the BC keys of
        // dS[query][key] K[key][channel]. A = dS: sS holds dS^T, so ldmatrix .trans: lane L
        // addresses key 16 kk + L % 8 + 8 (L / 16), query 16 wq + 8 ((L / 8) % 2): matrices
        // (keys +0, queries +0) = a[0] (rows g, k 2t), (keys +0, queries +8) = a[1] (rows g + 8),
        // (keys +8, queries +0) = a[2] (k 2t + 8), (keys +8, queries +8) = a[3].
        {
            const int wq = warp % 4, c0 = (warp / 4) * 8 * DQ_NT;
            float acc[DQ_NT][4] = {};
            const bf16* p = sS + (lane % 8 + 8 * (lane / 16)) * AB_PITCH + 16 * wq + 8 * ((lane / 8) % 2);
#pragma unroll
            for (int kk = 0; kk < BC / 16; kk++) {
                unsigned a[4];
                ldmatrix_x4_trans(a, p + 16 * kk * AB_PITCH);
                mma_ab<DQ_NT>(acc, a, sK + 16 * kk * AB_PITCH + c0);
            }
#pragma unroll
            for (int n = 0; n < DQ_NT; n++) {
                const int col = c0 + 8 * n + 2 * t;
                if (col >= HS) continue;
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = q0 + 16 * wq + g + 8 * half;
                    if (row >= T) continue;
                    float* dst = dq + ((size_t)b * T + row) * C + (size_t)h * HS + col;
                    if (HS % 2 == 0) {  // every index even: an aligned pair
                        atomic_add2(dst, acc[n][2 * half], acc[n][2 * half + 1]);
                    } else {
                        atomicAdd(dst, acc[n][2 * half]);
                        if (col + 1 < HS) atomicAdd(dst + 1, acc[n][2 * half + 1]);
                    }
                }
            }
        }
    }

    bf16* out = dqkv + (size_t)b * T * rs + (size_t)h * HS;
    store_rows<DT>(out + C, rs, kw, T, 0, HS, dk, scale);  // dK = scale dS^T Q
    store_rows<DT>(out + 2 * C, rs, kw, T, 0, HS, dv, 1.0f);
}

extern "C" __global__ void __launch_bounds__(128, 2)
attention_backward7_bc64(float* dq, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                         const float* D, int T, int NH, int HS, float scale) {
    key_tile7<4>(dq, dqkv, dout, qkv, lse, D, T, NH, HS, scale);
}

extern "C" __global__ void __launch_bounds__(256, 1)
attention_backward7_bc128(float* dq, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                          const float* D, int T, int NH, int HS, float scale) {
    key_tile7<8>(dq, dqkv, dout, qkv, lse, D, T, NH, HS, scale);
}
