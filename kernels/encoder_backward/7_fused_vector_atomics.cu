/*
title = "One pass over dout: a thread sums dwpe's B rows itself and sends dwte four floats per atomic"
builds_on = 1
deterministic = false  # dwte: float atomics land in any order when tokens repeat (dwpe is fixed-order)
changed = "Version 1's element threads become (t, four channels) threads that walk b: each reads the B float4 of dout at (b, t, c..c+3) once, adds them into a register sum in order of b and, once, into dwpe's float4 (no atomics: it is that chunk's only writer), and sends each to its token's dwte row with one vector atomic (atomicAdd on float4: a 16-byte reduction in L2 on sm_90; four scalar atomics on older GPUs). Rows of one thread that share a token are added in registers first and sent as one atomic. dwpe is now deterministic; dwte still takes atomics."
why = """
Version 1 sends 2 * N * C scalar atomics to L2: half to dwte, half to dwpe, where the B positions
of a time step collide on every element. Version 5 has no atomics but pays for its token
partition (every block reads all ids and sorts before its first dout load, and dout is read
twice).

Here dwpe needs no atomics at all: the thread that owns dwpe's (t, c..c+3) is the one that reads
the B dout chunks at t, so it sums them in registers (in order of b: deterministic) and does one
16-byte read-modify-write of dwpe. That removes half the atomics and all their collisions. dwte
keeps atomics, but vector ones: sm_90 reduces a float4 in L2 in one operation (atomicAdd(float4*,
float4), compiled to REDG.E.ADD.F32x4 since the result is unused): a quarter as many reductions,
a warp's instruction covering 512 contiguous bytes of a dwte row. Before sending, a thread adds
together its rows that share a token: fewer atomics for frequent tokens, and shorter chains of
fp32 additions in arbitrary order, which keeps a row collecting hundreds of rows within the
tolerance. The sm_80 build gets four scalar atomics instead of the vector one.

dout is read once with 16-byte loads, a thread's dwpe load and its eight dout loads all issued
before any is used; 64 registers (the launch bounds) keep 1024 threads an SM, several times the
bytes in flight Little's law asks for. The reductions are fire and forget: no thread waits for
them. Widths that are not a multiple of 4 take the same kernel one channel a thread.

The byte counts, the prediction and the measurements: results/notes/encoder_backward.md.
"""
block_sizes = [128, 256, 512]

[[launch]]
kernel = "encoder_backward7_vec4"
when = "C % 4 == 0"
grid = "cdiv(T * (C // 4), block_size)"
block = "block_size"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V"]

[[launch]]
kernel = "encoder_backward7_scalar"
when = "C % 4 != 0"
grid = "cdiv(T * C, block_size)"
block = "block_size"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V"]

[[emulate]]
when = "V * C <= 1000000"
runs = ["bs=128 seed=0 PRIORITY", "bs=512 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY"]

[[emulate]]
sizes = [{ B = 1, T = 7, C = 1600, V = 50257 }]
runs = ["bs=512 seed=1 SHUFFLE"]
*/

#include "encoder_backward_atomic.cuh"  // the vec4 kernel's body (shared with version 10), BGROUP

using ebatomic::BGROUP;

// A thread per (t, c..c+3): dout[b, t, c..c+3] for every b, eight b at a time.
extern "C" __global__ void __launch_bounds__(512, 2)
encoder_backward7_vec4(float* __restrict__ dwte, float* __restrict__ dwpe, const float* __restrict__ dout,
                       const int* __restrict__ inp, int B, int T, int C, int V) {
    ebatomic::encoder_backward_vec4<false>(dwte, dwpe, dout, inp, B, T, C, V);
}

// The same, one channel a thread (C not a multiple of 4), with scalar atomics.
extern "C" __global__ void __launch_bounds__(512, 2)
encoder_backward7_scalar(float* __restrict__ dwte, float* __restrict__ dwpe, const float* __restrict__ dout,
                         const int* __restrict__ inp, int B, int T, int C, int V) {
    int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= T * C) return;
    int t = u / C, c = u % C;
    float pe = dwpe[(size_t)t * C + c];
    float sum = 0.0f;
    for (int b0 = 0; b0 < B; b0 += BGROUP) {
        int tok[BGROUP];
        float d[BGROUP];
#pragma unroll
        for (int j = 0; j < BGROUP; j++) {
            tok[j] = -1;
            d[j] = 0.0f;
            if (b0 + j < B) {
                int n = (b0 + j) * T + t;
                tok[j] = __ldg(inp + n);
                d[j] = __ldg(dout + n * C + c);
            }
        }
#pragma unroll
        for (int j = 0; j < BGROUP; j++)
            if (b0 + j < B) sum += d[j];
#pragma unroll
        for (int j = 1; j < BGROUP; j++) {
#pragma unroll
            for (int i = 0; i < j; i++) {
                if (tok[j] >= 0 && tok[i] == tok[j]) {
                    d[i] += d[j];
                    tok[j] = -1;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < BGROUP; j++)
            if ((unsigned)tok[j] < (unsigned)V) atomicAdd(dwte + tok[j] * C + c, d[j]);
    }
    dwpe[(size_t)t * C + c] = pe + sum;
}
