/*
title = "Version 3 with L2 eviction priorities: wte rows evict-first, wpe rows evict-last"
builds_on = 3
changed = "Version 3's grid of float4 threads, unchanged, except how each load asks L2 to keep its line: the gathered wte rows with an evict-first policy and no L1 allocation, the wpe rows (read by every sequence) with an evict-last policy, both through createpolicy and ld.global...L2::cache_hint."
why = """
An L2 line's eviction priority is a hint a load can carry (PTX `createpolicy` makes a 64-bit
policy, `ld ... .L2::cache_hint` passes it; sm_80 and later). The two inputs of this op want
opposite things:
* wte: rows gathered from a 154 MB table, few of them repeats. A row is used once, so keeping it
  in L2 only pushes other lines out: evict-first, and no L1 allocation either.
* wpe: row t read once per sequence. Its lines should outlive the streaming wte reads and out
  writes that pass through L2 between a row's first and last use: evict-last.
out keeps version 3's streaming store (__stcs, evict-first).

Versions 6 and 8 tried to beat version 3 by reshaping the work and were slower. This version
leaves the shape alone and changes only the cache policy. It is no faster, within the runs'
spread: the policies are worth knowing, but what keeps this op from the copy's time is elsewhere.
Not more loads in flight per thread (tried), not the table's size (a sweep over V), and, as version
10 measured, mostly not the gather's pattern either: the dependent round trip on the token.

The measurements and the experiments: results/notes/encoder_forward.md.
"""
preconditions = ["C % 4 == 0"]
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "encoder_forward9"
grid = "cdiv(N * C // 4, block_size)"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]
*/
#include <stdint.h>

// A 16-byte load that carries an L2 policy made by createpolicy. no_l1: do not allocate in L1.
template <bool no_l1>
__device__ __forceinline__ float4 load_with_policy(const float4* p, uint64_t policy) {
    float4 v;
    if (no_l1)
        asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
    else
        asm volatile("ld.global.nc.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
                     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(policy));
    return v;
}

extern "C" __global__ void encoder_forward9(float* out, const int* __restrict__ inp,
                                            const float* __restrict__ wte,
                                            const float* __restrict__ wpe, int B, int T, int C,
                                            int V) {
    int C4 = C / 4;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // which float4 of out
    if (idx >= B * T * C4) return;
    int bt = idx / C4, c4 = idx % C4;
    int t = bt % T;
    int token = __ldg(inp + bt);
    if (token < 0 || token >= V) {  // outside the vocabulary: NaN, loudly
        float nan = __int_as_float(0x7fc00000);
        __stcs(reinterpret_cast<float4*>(out) + idx, make_float4(nan, nan, nan, nan));
        return;
    }
    // The fraction 1.0: the policy applies to every line these loads touch.
    uint64_t evict_first, evict_last;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(evict_first));
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(evict_last));
    float4 w = load_with_policy<true>(reinterpret_cast<const float4*>(wte + (size_t)token * C) + c4, evict_first);
    float4 p = load_with_policy<false>(reinterpret_cast<const float4*>(wpe + (size_t)t * C) + c4, evict_last);
    __stcs(reinterpret_cast<float4*>(out) + idx, make_float4(w.x + p.x, w.y + p.y, w.z + p.z, w.w + p.w));
}
