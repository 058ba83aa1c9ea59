/*
title = "Mixed precision: bf16 gradients in, fp32 master weights and moments, bf16 weights out"
builds_on = 3
precision = "bf16"
changed = "Version 3's single streaming pass, for a bf16 model: the gradients arrive as bf16 (one 16-byte Pack8 holds eight), params, m and v stay fp32 and are updated exactly as before, and the same pass writes params_bf16, the updated params rounded once to bf16 (one Pack8 store per eight). Eight parameters per thread; the tail (N % 8) and unaligned buffers are scalar."
why = """
A bf16 model keeps two copies of its weights: the fp32 master copy the optimizer updates (near
0.02 a bf16 step is 2^-13 = 1.2e-4, as large as a typical update, so bf16 weights updated in
place would round each update to nothing or to a whole step) and the bf16 copy the forward and
backward passes read. Writing the bf16 copy here, from the registers that hold the new fp32
params, saves a separate conversion kernel that would read the 4-byte params again and write 2
bytes: 6 bytes a parameter, a fifth of this kernel's traffic. Reading the gradients as bf16
saves 2 more. So the step moves 28 bytes a parameter (reads: 4 params + 2 grads + 4 m + 4 v;
writes: 4 + 4 + 4 + 2), where fp32 version 3 plus a conversion pass would move 34. Per thread:
one Pack8 of grads, two float4 each of params, m and v in flight, then two float4 stores each
and one Pack8 store, all streaming (nothing is reused). Clipping, bias correction and the hp
layout are version 3's.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "adamw4"
grid = "cdiv(cdiv(N, 8), block_size)"
block = "block_size"
args = ["params", "grads", "m", "v", "params_bf16", "hp", "norm2", "N", "max_norm"]
*/
#include <stdint.h>
#include "bf16.cuh"  // bf16, Pack8, load8_stream/store8_stream, to_float/to_bf16
#include "adamw_step.cuh"  // Step, make_step, adamw_update

extern "C" __global__ void adamw4(float* params, const bf16* grads, float* m, float* v,
                                  bf16* params_bf16, const float* hp, const float* norm2, int N,
                                  float max_norm) {
    int q = blockIdx.x * blockDim.x + threadIdx.x;  // which group of 8 parameters
    int first = 8 * q;
    if (first >= N) return;
    Step s = make_step(hp, norm2, max_norm);
    bool aligned = (((uintptr_t)params | (uintptr_t)grads | (uintptr_t)m | (uintptr_t)v |
                     (uintptr_t)params_bf16) & 15) == 0;
    if (aligned && first + 8 <= N) {
        Pack8 g = load8_stream(grads + first);
        float4 p[2], mi[2], vi[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            p[h] = __ldcs(reinterpret_cast<const float4*>(params + first) + h);
            mi[h] = __ldcs(reinterpret_cast<const float4*>(m + first) + h);
            vi[h] = __ldcs(reinterpret_cast<const float4*>(v + first) + h);
        }
        Pack8 out;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            p[h].x = adamw_update(p[h].x, to_float(g.v[4 * h + 0]), mi[h].x, vi[h].x, s);
            p[h].y = adamw_update(p[h].y, to_float(g.v[4 * h + 1]), mi[h].y, vi[h].y, s);
            p[h].z = adamw_update(p[h].z, to_float(g.v[4 * h + 2]), mi[h].z, vi[h].z, s);
            p[h].w = adamw_update(p[h].w, to_float(g.v[4 * h + 3]), mi[h].w, vi[h].w, s);
            out.v[4 * h + 0] = to_bf16(p[h].x);
            out.v[4 * h + 1] = to_bf16(p[h].y);
            out.v[4 * h + 2] = to_bf16(p[h].z);
            out.v[4 * h + 3] = to_bf16(p[h].w);
            __stcs(reinterpret_cast<float4*>(params + first) + h, p[h]);
            __stcs(reinterpret_cast<float4*>(m + first) + h, mi[h]);
            __stcs(reinterpret_cast<float4*>(v + first) + h, vi[h]);
        }
        store8_stream(params_bf16 + first, out);
    } else {  // the last partial group, or buffers not 16-byte aligned
        for (int i = first; i < min(first + 8, N); i++) {
            float mi = m[i], vi = v[i];
            float p = adamw_update(params[i], to_float(grads[i]), mi, vi, s);
            params[i] = p;
            m[i] = mi;
            v[i] = vi;
            params_bf16[i] = to_bf16(p);
        }
    }
}
