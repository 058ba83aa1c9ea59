/*
title = "bf16: loads before the weight staging, each warp holding two rows: one normalized while the other is in flight"
builds_on = 5
precision = "bf16"
changed = "Version 5's persistent blocks, with the first two rows' loads of every warp issued before the block stages weight and bias (version 5 staged first, then loaded), and a two-row pipeline: each warp holds two rows of inp1 and inp2 in registers and refills a row's registers with its row two ahead as soon as that row is written, so one row is in flight while the other is reduced and written. Rows sit in registers as raw 32-bit words (stream_vec.cuh); the fp32 sums are formed where they are used."
why = """
Two things cost version 5 time. (1) Every block first stages weight and bias in shared memory and
waits at a barrier before its first row's loads: at the start a whole DRAM round trip with DRAM
idle. (2) A warp loads a row, then reduces and writes it with nothing in flight, then loads the
next: most warps pay two round trips in series.

Here each warp issues the loads of its first two rows before the block stages the weights, so
the staging's round trip overlaps them. The grid is one resident wave (SMS x 768 threads; the
launch bounds guarantee the ~80 registers two rows of two inputs take), so most of the input is
requested at once; from then on a warp that has written a row refills those registers with its
row two ahead before it touches the other row, so one row is always in flight while the other is
reduced and written: the pipeline never drains. The two buffers take turns (the loop is unrolled
twice), since a register copy of a row still in flight would wait for it. As in version 5 the
statistics and normed come from the fp32 sum inp1 + inp2, not the rounded residual, each output
is one rounding of an fp32 value and the variance is the exact two-pass one. Rows are held as
32-bit words (12 registers a row and input at C = 768): as Pack8 halves or widened floats they
spill. Wider rows keep the scheme at lower occupancy (C <= 1024 at 512 threads an SM, C <= 2048
at 256).

The byte counts, the prediction and the measurements: results/notes/fused_residual_forward.md.
"""
# Rows of packs need C % 8 == 0 (16-byte aligned rows: true for cudaMalloc'd buffers when
# C % 8 == 0); the registers hold at most 2048 values per row.
preconditions = ["C % 8 == 0", "C <= 2048"]
# At most 256: the launch bounds (256 threads; 3, 2 or 1 blocks) cap the registers at 80, 128
# and 255, and a grid of whole blocks fills the 768, 512 or 256 threads an SM they allow.
block_sizes = [64, 128, 256]

[[launch]]
kernel = "fused_residual_forward6_c768"
when = "C <= 768"
grid = "min(cdiv(N, 2 * (block_size // 32)), SMS * (768 // block_size))"
block = "block_size"
shared = "4 * C"
args = ["residual", "normed", "mean", "rstd", "inp1", "inp2", "weight", "bias", "N", "C", "eps"]

[[launch]]
kernel = "fused_residual_forward6_c1024"
when = "C > 768 and C <= 1024"
grid = "min(cdiv(N, 2 * (block_size // 32)), SMS * (512 // block_size))"
block = "block_size"
shared = "4 * C"
args = ["residual", "normed", "mean", "rstd", "inp1", "inp2", "weight", "bias", "N", "C", "eps"]

[[launch]]
kernel = "fused_residual_forward6_c2048"
when = "C > 1024"
grid = "min(cdiv(N, 2 * (block_size // 32)), SMS * (256 // block_size))"
block = "block_size"
shared = "4 * C"
args = ["residual", "normed", "mean", "rstd", "inp1", "inp2", "weight", "bias", "N", "C", "eps"]

[[emulate]]
sizes = ["test", { B = 3, T = 5, C = 8 }, { B = 7, T = 33, C = 760 }, { B = 5, T = 33, C = 776 },
  { B = 2, T = 37, C = 1024 }, { B = 2, T = 9, C = 2048 }]
runs = ["bs=64 seed=0 PRIORITY sms=1", "bs=128 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY sms=1"]
*/

#include "reduce.cuh"      // warp_sum: every lane gets the warp's total
#include "stream_vec.cuh"  // Word8 (eight bf16 as an int4), ld/st_word8*, widen8, round8

// Issue the loads of `row` of both inputs (nothing when row >= N): pack k * 32 + lane of the
// row, zeros past its end.
template <int VEC>
__device__ __forceinline__ void issue_row(Word8 (&a)[VEC], Word8 (&b)[VEC], const bf16* inp1,
                                          const bf16* inp2, int row, int N, int C) {
    const Word8 zero = {0, 0, 0, 0};
    int C8 = C / 8, lane = threadIdx.x % 32;
    bool live = row < N;  // the same for the whole warp
    size_t offset = (size_t)(live ? row : 0) * C;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int i = k * 32 + lane;
        a[k] = live && i < C8 ? ld_word8_stream(inp1 + offset + 8 * i) : zero;
        b[k] = live && i < C8 ? ld_word8_stream(inp2 + offset + 8 * i) : zero;
    }
}

// x = inp1 + inp2 of pack k, in fp32 (exact unless the exponents are more than 16 apart).
__device__ __forceinline__ void sum8(Word8 a, Word8 b, float (&x)[8]) {
    float y[8];
    widen8(a, x);
    widen8(b, y);
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] += y[j];
}

// Write residual, mean, rstd and normed of `row`, held in a and b (their loads issued earlier),
// then refill a and b with the loads of row `refill`.
template <int VEC>
__device__ __forceinline__ void finish_row(Word8 (&a)[VEC], Word8 (&b)[VEC], int row, int refill,
                                           bf16* residual, bf16* normed, float* mean, float* rstd,
                                           const bf16* inp1, const bf16* inp2, const int4* wb, int N,
                                           int C, float eps) {
    int C8 = C / 8, lane = threadIdx.x % 32;
    size_t offset = (size_t)row * C;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        float x[8];
        sum8(a[k], b[k], x);
#pragma unroll
        for (int j = 0; j < 8; j++) sum += x[j];  // padding packs: 0 + 0
        int i = k * 32 + lane;
        if (i < C8) st_word8_stream(residual + offset + 8 * i, round8(x));
    }
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        if (k * 32 + lane < C8) {
            float x[8];
            sum8(a[k], b[k], x);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float d = x[j] - m;
                sq += d * d;
            }
        }
    }
    float s = rsqrtf(warp_sum(sq) / C + eps);  // of the fp32 sums, not of the rounded residual
    if (lane == 0) {
        __stcs(mean + row, m);
        __stcs(rstd + row, s);
    }
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int i = k * 32 + lane;
        if (i < C8) {
            float x[8], w[8], c[8];
            sum8(a[k], b[k], x);
            widen8(wb[i], w);
            widen8(wb[C8 + i], c);
#pragma unroll
            for (int j = 0; j < 8; j++) x[j] = (x[j] - m) * s * w[j] + c[j];
            st_word8_stream(normed + offset + 8 * i, round8(x));
        }
    }
    issue_row(a, b, inp1, inp2, refill, N, C);
}

// VEC: packs per lane (rows up to 256 * VEC values). Each warp holds two rows (of both inputs) in
// registers: one is normalized while the other is in flight. The two buffers take turns (the
// loop is unrolled twice), so no register copy ever waits on a load still in flight.
template <int VEC>
__device__ __forceinline__ void fused_rows(bf16* residual, bf16* normed, float* mean, float* rstd,
                                           const bf16* inp1, const bf16* inp2, const bf16* weight,
                                           const bf16* bias, int N, int C, float eps) {
    extern __shared__ int4 wb[];  // C/8 words of weight, then C/8 of bias
    int C8 = C / 8;
    int warps = gridDim.x * (blockDim.x / 32);
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // the same for the whole warp
    Word8 a0[VEC], b0[VEC], a1[VEC], b1[VEC];
    issue_row(a0, b0, inp1, inp2, row, N, C);  // the first two rows fly while the weights are staged
    issue_row(a1, b1, inp1, inp2, row + warps, N, C);
    for (int i = threadIdx.x; i < C8; i += blockDim.x) {
        wb[i] = ld_word8(weight + 8 * i);
        wb[C8 + i] = ld_word8(bias + 8 * i);
    }
    __syncthreads();  // every thread, before any leaves: the loop below has no barrier
    for (; row < N; row += 2 * warps) {
        finish_row(a0, b0, row, row + 2 * warps, residual, normed, mean, rstd, inp1, inp2, wb, N, C, eps);
        if (row + warps >= N) break;
        finish_row(a1, b1, row + warps, row + 3 * warps, residual, normed, mean, rstd, inp1, inp2, wb, N, C, eps);
    }
}

// The grids assume 768 (c768), 512 (c1024) and 256 (c2048) resident threads an SM: the launch
// bounds hold the registers to 80, 128 and 255 so that they are (a block that is not resident
// would run as a second, mostly empty wave).
extern "C" __global__ void __launch_bounds__(256, 3)
fused_residual_forward6_c768(bf16* residual, bf16* normed, float* mean, float* rstd, const bf16* inp1,
                             const bf16* inp2, const bf16* weight, const bf16* bias, int N, int C, float eps) {
    fused_rows<3>(residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C, eps);
}

extern "C" __global__ void __launch_bounds__(256, 2)
fused_residual_forward6_c1024(bf16* residual, bf16* normed, float* mean, float* rstd, const bf16* inp1,
                              const bf16* inp2, const bf16* weight, const bf16* bias, int N, int C, float eps) {
    fused_rows<4>(residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C, eps);
}

extern "C" __global__ void __launch_bounds__(256, 1)
fused_residual_forward6_c2048(bf16* residual, bf16* normed, float* mean, float* rstd, const bf16* inp1,
                              const bf16* inp2, const bf16* weight, const bf16* bias, int N, int C, float eps) {
    fused_rows<8>(residual, normed, mean, rstd, inp1, inp2, weight, bias, N, C, eps);
}
