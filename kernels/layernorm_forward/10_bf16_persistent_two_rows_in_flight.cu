/*
title = "bf16: one resident wave of warps, each holding two rows: one normalized while the other is in flight"
builds_on = 9
precision = "bf16"
changed = "Version 9 made persistent and pipelined: the grid is one resident wave of warps looping over rows; each warp issues the loads of its first two rows before it stages the weights, and from then on holds two rows in registers, refilling a row's registers with its row two ahead as soon as that row is written, so one row is always in flight while the other is reduced and written. Rows sit in registers as raw 32-bit words (stream_vec.cuh), widened where they are used; weight and bias sit in shared memory as words."
why = """
Version 9 falls a little short of a copy of its bytes while fp32's version 6, the same design at
twice the bytes, matches it. The difference is bytes in flight: version 6 has 6 float4 per lane in
flight (96 KB an SM at 32 resident warps); version 9 at bf16 has 3 packs per lane, 48 KB an SM,
about what Little's law asks for (3 TB/s x ~2 us of loaded latency / 132 SMs = ~45 KB), and only
while every warp waits for its row: a warp that is reducing, storing or waiting at its block's end
has nothing in flight, and its block's successor issues nothing until it is launched.

Here the grid is one wave (SMS x 1024 threads; the launch bounds hold the registers to 64 so
all of it is resident), sized so that at 8x1024 each of its 4096 warps has exactly two rows:
each warp issues both rows' loads first thing (96 KB an SM, version 6's margin). With more rows
each warp refills the registers of the row it has just written with its row two ahead, so one
row stays in flight while the other is reduced and written: the pipeline never drains. The two
buffers take turns (the loop is unrolled twice), since a register copy of a row still in flight
would wait for it. The arithmetic is version 9's: fp32 sums, the exact two-pass variance, one
rounding per output. Rows are held as 32-bit words (12 registers a row at C = 768), widened where
used: as Pack8 halves or widened floats two rows do not fit in 64 registers. Wider rows keep the
scheme at lower occupancy (C <= 1024 at 768 threads an SM, C <= 2048 at 512).

The prediction and the measurements: results/notes/layernorm_forward.md.
"""
# Rows of packs need C % 8 == 0 (16-byte aligned rows: true for cudaMalloc'd buffers when
# C % 8 == 0); the registers hold at most 2048 values per row.
preconditions = ["C % 8 == 0", "C <= 2048"]
# At most 256: the launch bounds (256 threads; 4, 3 or 2 blocks) cap the registers at 64, 80
# and 128, and a grid of whole blocks fills the 1024, 768 or 512 threads an SM they allow.
block_sizes = [64, 128, 256]

[[launch]]
kernel = "layernorm_forward10_c768"
when = "C <= 768"
grid = "min(cdiv(N, 2 * (block_size // 32)), SMS * (1024 // block_size))"
block = "block_size"
shared = "4 * C"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]

[[launch]]
kernel = "layernorm_forward10_c1024"
when = "C > 768 and C <= 1024"
grid = "min(cdiv(N, 2 * (block_size // 32)), SMS * (768 // block_size))"
block = "block_size"
shared = "4 * C"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]

[[launch]]
kernel = "layernorm_forward10_c2048"
when = "C > 1024"
grid = "min(cdiv(N, 2 * (block_size // 32)), SMS * (512 // block_size))"
block = "block_size"
shared = "4 * C"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]

[[emulate]]
sizes = ["test", { B = 3, T = 5, C = 8 }, { B = 7, T = 33, C = 760 }, { B = 5, T = 33, C = 776 },
  { B = 2, T = 37, C = 1024 }, { B = 2, T = 9, C = 2048 }]
runs = ["bs=64 seed=0 PRIORITY sms=1", "bs=128 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY sms=1"]
*/

#include "reduce.cuh"      // warp_sum: every lane gets the warp's total
#include "stream_vec.cuh"  // Word8 (eight bf16 as an int4), ld/st_word8*, widen8, round8

// Issue the loads of `row` (nothing when row >= N) into p: pack k * 32 + lane of the row, zeros
// past its end.
template <int VEC>
__device__ __forceinline__ void issue_row(Word8 (&p)[VEC], const bf16* inp, int row, int N, int C) {
    const Word8 zero = {0, 0, 0, 0};
    int C8 = C / 8, lane = threadIdx.x % 32;
    bool live = row < N;  // the same for the whole warp
    const bf16* x = inp + (size_t)(live ? row : 0) * C;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int i = k * 32 + lane;
        p[k] = live && i < C8 ? ld_word8_stream(x + 8 * i) : zero;
    }
}

// The mean and rstd of a row held as words (pack k * 32 + lane, zeros past the row), widened as
// they are read: the exact two-pass variance in fp32, as layernorm_bf16.cuh's warp_row_stats
// computes it from floats.
template <int VEC>
__device__ __forceinline__ float2 row_stats(const Word8 (&p)[VEC], int C, float eps) {
    int C8 = C / 8, lane = threadIdx.x % 32;
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        float x[8];
        widen8(p[k], x);
#pragma unroll
        for (int j = 0; j < 8; j++) sum += x[j];  // padding packs hold zeros
    }
    float m = warp_sum(sum) / C;
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        if (k * 32 + lane < C8) {
            float x[8];
            widen8(p[k], x);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float d = x[j] - m;
                sq += d * d;
            }
        }
    }
    return make_float2(m, rsqrtf(warp_sum(sq) / C + eps));
}

// Normalize `row`, held in p (its loads issued earlier), then refill p with the loads of row
// `refill`. The row stays as words, widened where it is used (a shift or a mask per value): held
// as floats it would take twice the registers, and two rows beside each other would not fit in
// 64.
template <int VEC>
__device__ __forceinline__ void finish_row(Word8 (&p)[VEC], int row, int refill, bf16* out, float* mean,
                                           float* rstd, const bf16* inp, const int4* wb, int N, int C,
                                           float eps) {
    int C8 = C / 8, lane = threadIdx.x % 32;
    float2 stats = row_stats<VEC>(p, C, eps);
    if (lane == 0) {
        __stcs(mean + row, stats.x);
        __stcs(rstd + row, stats.y);
    }
    bf16* o = out + (size_t)row * C;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        int i = k * 32 + lane;
        if (i < C8) {
            float x[8], w[8], b[8], r[8];
            widen8(p[k], x);
            widen8(wb[i], w);
            widen8(wb[C8 + i], b);
#pragma unroll
            for (int j = 0; j < 8; j++) r[j] = (x[j] - stats.x) * stats.y * w[j] + b[j];
            st_word8_stream(o + 8 * i, round8(r));
        }
    }
    issue_row(p, inp, refill, N, C);
}

// VEC: packs per lane (rows up to 256 * VEC values). Each warp holds two rows in registers: one
// is normalized while the other is in flight. The two buffers take turns (the loop is unrolled
// twice), so no register copy ever waits on a load still in flight.
template <int VEC>
__device__ __forceinline__ void layernorm_rows(bf16* out, float* mean, float* rstd, const bf16* inp,
                                               const bf16* weight, const bf16* bias, int N, int C,
                                               float eps) {
    extern __shared__ int4 wb[];  // C/8 words of weight, then C/8 of bias
    int C8 = C / 8;
    int warps = gridDim.x * (blockDim.x / 32);
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // the same for the whole warp
    Word8 pa[VEC], pb[VEC];
    issue_row(pa, inp, row, N, C);  // the first two rows fly while the block stages the weights
    issue_row(pb, inp, row + warps, N, C);
    for (int i = threadIdx.x; i < C8; i += blockDim.x) {
        wb[i] = ld_word8(weight + 8 * i);
        wb[C8 + i] = ld_word8(bias + 8 * i);
    }
    __syncthreads();  // every thread, before any leaves: the loop below has no barrier
    for (; row < N; row += 2 * warps) {
        finish_row(pa, row, row + 2 * warps, out, mean, rstd, inp, wb, N, C, eps);
        if (row + warps >= N) break;
        finish_row(pb, row + warps, row + 3 * warps, out, mean, rstd, inp, wb, N, C, eps);
    }
}

// The grids assume 1024 (c768), 768 (c1024) and 512 (c2048) resident threads an SM: the launch
// bounds hold the registers to 64, 80 and 128 so that they are (a block that is not resident
// would run as a second, mostly empty wave).
extern "C" __global__ void __launch_bounds__(256, 4)
layernorm_forward10_c768(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                         const bf16* bias, int N, int C, float eps) {
    layernorm_rows<3>(out, mean, rstd, inp, weight, bias, N, C, eps);
}

extern "C" __global__ void __launch_bounds__(256, 3)
layernorm_forward10_c1024(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                          const bf16* bias, int N, int C, float eps) {
    layernorm_rows<4>(out, mean, rstd, inp, weight, bias, N, C, eps);
}

extern "C" __global__ void __launch_bounds__(256, 2)
layernorm_forward10_c2048(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                          const bf16* bias, int N, int C, float eps) {
    layernorm_rows<8>(out, mean, rstd, inp, weight, bias, N, C, eps);
}
