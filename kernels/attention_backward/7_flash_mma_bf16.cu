/*
title = "bf16 tensor cores: mma.sync m16n8k16 on K, V resident tiles, Q and dout streamed by cp.async, dQ by fp32 atomics"
builds_on = 5
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

[[emulate]]
runs = ["bs=128 seed=0 PRIORITY"]

[[emulate]]
sizes = [{ B = 2, T = 100, NH = 3, HS = 16 }]
runs = ["bs=256 seed=1 EARLY SHUFFLE"]
*/

#include "attention_backward_bf16.cuh"  // load_tile_async, key_pair, mma_ab, store_a_smem, store_rows, dot_rows

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
