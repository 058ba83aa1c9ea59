/*
title = "Mixed precision, coalesced: four parameters a thread, each warp access whole sectors"
builds_on = 4
precision = "bf16"
changed = "Version 4's arithmetic with version 3's memory layout: each thread updates 4 consecutive parameters instead of 8, so params, m and v move as one float4 each (16 bytes a lane) and the bf16 grads and params_bf16 as one 8-byte word of four bf16 each, all streaming. Each warp-wide access now covers one contiguous run of whole 32-byte sectors. The tail (N % 4) and unaligned buffers are scalar."
why = """
Version 4 already used 16-byte accesses; what holds it back is what one warp-wide instruction
touches. Memory moves in 32-byte sectors, four to a 128-byte line. In version 4 a thread's eight
fp32 params are 32 contiguous bytes read as two float4s, so each load of a warp touches half of 32
different sectors: every sector of params, m and v is needed by two instructions, the second finds
it only if the line is still in L1 (too small, with dozens of warps streaming), and the stores
reach L2 as half-sector writes. Its SASS also issues the second float4s only after the first have
arrived: each thread waits for DRAM twice. (Probable causes, not measured ones.)

Here lane i of a warp takes float4 number i of a contiguous run: one warp instruction covers 512
consecutive bytes of an fp32 array (four whole lines), and an 8-byte access of a bf16 array 256.
Each sector is fetched or written once, whole, by one instruction, and nothing relies on a cache
holding it: version 3's layout, which ran within a few percent of a copy at fp32. The four loads
(56 bytes) go out back to back before the step's setup (hp loads, clip factor, bias corrections),
so DRAM's latency covers that arithmetic and each thread waits for memory once; 40 registers keep
about 1536 threads an SM resident, well above what Little's law asks. The arithmetic, the clipping
rule, the bias corrections and the single rounding of the bf16 copy are version 4's.

Measurements: results/notes/adamw.md.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "adamw5"
grid = "cdiv(cdiv(N, 4), block_size)"
block = "block_size"
args = ["params", "grads", "m", "v", "params_bf16", "hp", "norm2", "N", "max_norm"]

[[emulate]]
runs = ["bs=64 seed=0 PRIORITY", "bs=1024 seed=1 SHUFFLE"]
*/
#include <stdint.h>
#include "bf16.cuh"  // bf16, to_float/to_bf16

// Four bf16 moved as one 8-byte word: the four gradients (or new bf16 params) of the four
// parameters a thread owns. bf16.cuh's Pack8 holds eight, which would give each thread 32 bytes
// of every fp32 array again (version 4's layout); this version wants four. The pointer must be
// 8-byte aligned: an element index that is a multiple of 4 from an 8-byte aligned base.
struct alignas(8) Pack4 {
    bf16 v[4];
};

__device__ __forceinline__ Pack4 load4_stream(const bf16* p) {
    Pack4 out;
    *reinterpret_cast<unsigned long long*>(&out) =
        __ldcs(reinterpret_cast<const unsigned long long*>(p));
    return out;
}

__device__ __forceinline__ void store4_stream(bf16* p, const Pack4& x) {
    __stcs(reinterpret_cast<unsigned long long*>(p),
           *reinterpret_cast<const unsigned long long*>(&x));
}

#include "adamw_step.cuh"  // Step, make_step, adamw_update: version 4's arithmetic, shared

extern "C" __global__ void adamw5(float* params, const bf16* grads, float* m, float* v,
                                  bf16* params_bf16, const float* hp, const float* norm2, int N,
                                  float max_norm) {
    int q = blockIdx.x * blockDim.x + threadIdx.x;  // which group of 4 parameters
    int first = 4 * q;
    if (first >= N) return;
    // float4 needs 16-byte aligned fp32 arrays, the 8-byte bf16 words 8-byte aligned ones.
    bool aligned = ((((uintptr_t)params | (uintptr_t)m | (uintptr_t)v) & 15) |
                    (((uintptr_t)grads | (uintptr_t)params_bf16) & 7)) == 0;
    if (aligned && first + 4 <= N) {
        // Lane i of a warp takes float4 number i of a contiguous run: whole sectors per access.
        // The four loads go first, so DRAM's latency covers the step's setup below.
        float4 p = __ldcs(reinterpret_cast<const float4*>(params) + q);
        float4 mi = __ldcs(reinterpret_cast<const float4*>(m) + q);
        float4 vi = __ldcs(reinterpret_cast<const float4*>(v) + q);
        Pack4 g = load4_stream(grads + first);
        Step s = make_step(hp, norm2, max_norm);
        p.x = adamw_update(p.x, to_float(g.v[0]), mi.x, vi.x, s);
        p.y = adamw_update(p.y, to_float(g.v[1]), mi.y, vi.y, s);
        p.z = adamw_update(p.z, to_float(g.v[2]), mi.z, vi.z, s);
        p.w = adamw_update(p.w, to_float(g.v[3]), mi.w, vi.w, s);
        Pack4 out;
        out.v[0] = to_bf16(p.x);
        out.v[1] = to_bf16(p.y);
        out.v[2] = to_bf16(p.z);
        out.v[3] = to_bf16(p.w);
        __stcs(reinterpret_cast<float4*>(params) + q, p);
        __stcs(reinterpret_cast<float4*>(m) + q, mi);
        __stcs(reinterpret_cast<float4*>(v) + q, vi);
        store4_stream(params_bf16 + first, out);
    } else {  // the last partial group (N % 4 parameters), or buffers not aligned
        Step s = make_step(hp, norm2, max_norm);
        for (int i = first; i < min(first + 4, N); i++) {
            float mi = m[i], vi = v[i];
            float p = adamw_update(params[i], to_float(grads[i]), mi, vi, s);
            params[i] = p;
            m[i] = mi;
            v[i] = vi;
            params_bf16[i] = to_bf16(p);
        }
    }
}
