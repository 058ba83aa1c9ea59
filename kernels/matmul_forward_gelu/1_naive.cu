/*
title = "One thread per output element, the GELU applied before the store"
changed = "The starting point: matmul_forward's version 1 with the bias added and the GELU applied to the finished dot product while it is still in a register; the thread stores both the GELU's input (pre) and its output."
why = """
The fusion in its plainest form: a linear layer followed by a GELU costs the GELU's own round
trip of N*OC values (read pre back, write out) when they are two launches; here the value never
leaves the register between the two. The product itself is matmul_forward 1's, with its strided
weight reads, so this is the correct baseline, not a fast one.
"""
preconditions = []
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "matmul_forward_gelu1"
grid = "cdiv(N * OC, block_size)"
block = "block_size"
args = ["out", "pre", "inp", "weight", "bias", "N", "C", "OC"]
*/
#include "gelu.cuh"  // gelu(x), the tanh approximation, as gelu_forward computes it

extern "C" __global__ void matmul_forward_gelu1(float* out, float* pre, const float* inp, const float* weight,
                                                const float* bias, int N, int C, int OC) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)N * OC) return;
    int row = (int)(idx / OC);
    int oc = (int)(idx % OC);
    const float* x = inp + (size_t)row * C;
    const float* w = weight + (size_t)oc * C;
    float acc = bias[oc];
    for (int c = 0; c < C; c++) acc += x[c] * w[c];
    pre[idx] = acc;
    out[idx] = gelu(acc);
}
