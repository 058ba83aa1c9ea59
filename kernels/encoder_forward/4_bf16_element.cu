/*
title = "bf16 tables and output, one thread per element"
builds_on = 2
precision = "bf16"
changed = "Version 2 at bf16: wte, wpe and out hold bf16. Each thread widens its two table values to fp32, adds them there and rounds the sum once to bf16; the token ids stay int32."
why = """
The first step from fp32 to bf16, on the simplest layout: half the bytes for every table read
and every output write, so a gather that was limited by memory moves twice the elements per
second. The rule every bf16 version follows starts here: bf16 is only how values are stored;
arithmetic happens in fp32 (widening a bf16 is exact) and the result is rounded once, when it
is stored. One thread per element still means 2-byte accesses, a quarter of what a 16-byte
access carries: version 5 packs eight channels per access. This version handles every C.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "encoder_forward4"
grid = "cdiv(N * C, block_size)"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]
*/
#include "bf16.cuh"  // bf16, to_float/to_bf16

extern "C" __global__ void encoder_forward4(bf16* out, const int* inp, const bf16* wte,
                                            const bf16* wpe, int B, int T, int C, int V) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // 32-bit: the family's precondition
    if (idx >= B * T * C) return;
    int bt = idx / C, c = idx % C;
    int t = bt % T;
    int token = inp[bt];
    // A token outside the vocabulary gives NaN, loudly, rather than a gather from anywhere.
    float sum = __int_as_float(0x7fc00000);
    if (token >= 0 && token < V)
        sum = to_float(wte[(size_t)token * C + c]) + to_float(wpe[(size_t)t * C + c]);
    out[idx] = to_bf16(sum);
}
