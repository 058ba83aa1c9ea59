/*
title = "One thread per element"
changed = "The starting point: the formula applied by one thread per element."
why = """
Every element is independent and neighbouring threads read neighbouring floats, so the loads and
stores are coalesced from the start.
A note on accuracy, which matters more than speed here: the workbench compiles with
--use_fast_math, under which tanhf becomes the hardware tanh.approx.f32 (relative error about
2^-11), far outside the 1e-5 tolerance. So the kernel never calls tanhf: it uses the identity
0.5 * (1 + tanh(u)) = 1 / (1 + exp(-2u)), a logistic that the fast exp evaluates to a few ulp and
that has no cancellation for negative x (where 1 + tanh(u) would subtract two numbers near 1).
The exponent is clamped at 80 so exp never overflows to infinity.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "gelu_forward1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["out", "inp", "N"]
*/

#include "gelu.cuh"  // gelu(x): the logistic form described above

extern "C" __global__ void gelu_forward1(float* out, const float* inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = gelu(inp[i]);
}
