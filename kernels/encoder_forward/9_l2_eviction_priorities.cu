/*
title = "Version 3 with L2 eviction priorities: wte rows evict-first, wpe rows evict-last"
builds_on = 3
changed = "Version 3's grid of float4 threads, unchanged, except how each load asks L2 to keep its line: the gathered wte rows with an evict-first policy and no L1 allocation, the wpe rows (read by every sequence) with an evict-last policy, both through createpolicy and ld.global...L2::cache_hint."
why = """
An L2 line's eviction priority is a hint a load can carry (PTX `createpolicy` makes a 64-bit
policy, `ld ... .L2::cache_hint` passes it; sm_80 and later). The two inputs of this op want
opposite things:
* wte: 8192 rows gathered from a 154 MB table, 7.7% of them repeats at the default sizes. A row
  is used once, so keeping it in L2 only pushes other lines out: evict-first, and no L1
  allocation either (nothing in the block reads it again).
* wpe: 3.1 MB, row t read once per sequence (8 times at B = 8). Its lines should outlive the
  25 MB of streaming wte reads and out writes that pass through L2 between a row's first and last
  use: evict-last.
out keeps version 3's streaming store (__stcs, evict-first).

Versions 6 and 8 tried to beat version 3 by reshaping the work (persistent warps, a thread per
column of eight sequences) and were slower (27.0-27.8 us against 25.9-26.3; their headers say
why). This version leaves the shape alone and changes only the cache policy. Tried on the H100
beside it, in two runs of the family (bench, 2026-11-24): two or four float4 a thread (the
tokens of all of them loaded before any row: more bytes in flight) were slower (26.3-27.5 us);
__ldcs on wte alone (evict-first in L1 and L2, wpe default) 26.4 us; the two policies here
25.9 us in both runs, against version 3's 26.1 and 26.2 in the same runs, and a copy of the same
53.5 MB at 23.6-24.4 us. Written up as this file and run twice more beside version 3: 26.0 and
26.1 us, version 3 26.0 and 26.1 us. So no faster, within the runs' spread: the policies are
worth knowing (the bf16 twin of this change measured 15.1 and 14.8 us against version 7's 15.1 and
15.1), but what keeps this op from the copy's time is elsewhere. ncu of version 3 (one launch, L2 flushed): 18.8 us of kernel at 55% of
DRAM's throughput, warps waiting on global loads 71% of the time (a thread's token load, then
its wte load: two dependent round trips), 75% occupancy. More loads in flight per thread did not
help (above), so the gather itself, 3 KB rows at random places, seems to be what DRAM serves more
slowly than a sequential copy. Not the table's size (address translation): version 3 swept over V
on the H100 (run --sweep V=4096..524288:x4, the copy of the same bytes beside each point) takes
25.7, 26.2, 26.4 and 26.2 us from V = 16384 to 524288 (a 50 MB to a 1.6 GB table), 1.08-1.11x the
copy's time throughout; only at V = 4096, where each row is drawn about twice and the repeats
come from L2, does it match the copy (24.1 against 23.9 us).
Measured later (version 10's header): the pattern is the smaller part. With the ids in table
order version 3 takes 25.7 us against 26.2 with random ids; without the token load at all, 25.0:
the dependent round trip on the token, not the rows' places, is most of the gap.
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
