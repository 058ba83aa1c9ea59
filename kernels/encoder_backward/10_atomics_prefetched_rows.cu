/*
title = "Version 7 with each dwte chunk prefetched into L2 as soon as its token is known"
builds_on = 7
deterministic = false  # dwte: float atomics land in any order when tokens repeat (dwpe is fixed-order)
changed = "Version 7's one pass (a thread owns (t, four channels), walks b, sums dwpe in registers, sends dwte one float4 reduction a row), plus one instruction a row: as soon as a thread's token ids have landed, and while its dout loads are still in flight, it asks L2 to fetch the dwte chunk its reduction will update (prefetch.global.L2::evict_last). Only widths that are a multiple of 4 (version 7 keeps the scalar path)."
why = """
A reduction (RED) on a line L2 does not hold waits in L2 for the line to come from DRAM before it
can add; every dwte row is cold here (L2 is flushed before each launch, and the rows are
scattered over a 154 MB table). In version 7 the first request for a dwte line is the reduction
itself, issued only once the thread's dout chunks have arrived, so each row costs two DRAM round
trips back to back: dout, then dwte. The token ids arrive first (4 bytes, one broadcast address a
time step), so the dwte addresses are known one round trip before the dout data: a prefetch then
puts the dwte fetch in flight beside the dout loads, and the reduction, when it comes, finds its
line in L2. evict_last keeps the prefetched lines from being pushed out by the streaming dout
reads before their reduction arrives. A prefetch holds no register and nobody waits for it.

Tried beside version 7 with other cache policies for dout; this one was the best of them
(results/notes/encoder_backward.md).
"""
preconditions = ["C % 4 == 0"]
block_sizes = [128, 256, 512]

[[launch]]
kernel = "encoder_backward10"
grid = "cdiv(T * (C // 4), block_size)"
block = "block_size"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V"]

[[emulate]]
when = "V * C <= 1000000"
runs = ["bs=128 seed=0 PRIORITY", "bs=512 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY"]

[[emulate]]
sizes = [{ B = 1, T = 7, C = 1600, V = 50257 }]
runs = ["bs=512 seed=1 SHUFFLE"]
*/
#include "encoder_backward_atomic.cuh"  // version 7's kernel body; PREFETCH = true adds the prefetches

extern "C" __global__ void __launch_bounds__(512, 2)
encoder_backward10(float* __restrict__ dwte, float* __restrict__ dwpe, const float* __restrict__ dout,
                   const int* __restrict__ inp, int B, int T, int C, int V) {
    ebatomic::encoder_backward_vec4<true>(dwte, dwpe, dout, inp, B, T, C, V);
}
