/*
title = "One thread per row, three passes"
changed = "The starting point: the CPU reference moved onto the GPU as is."
why = """
Rows are independent, so each thread takes one: a pass for the maximum (subtracted so exp cannot
overflow), a pass for the sum of exponentials, a pass to write them normalized. Correct and
simple, but slow: neighbouring threads read addresses V floats apart (no coalescing), each thread
walks 150,000 elements one after another, and only N = 8192 threads exist to hide the latency.
"""
# Few threads exist at all (one per row): small blocks at least spread them over more SMs.
block_sizes = [32, 64, 128]

[[launch]]
kernel = "softmax_forward1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["out", "inp", "N", "V"]
*/
#include <cfloat>

extern "C" __global__ void softmax_forward1(float* out, const float* inp, int N, int V) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* x = inp + (size_t)row * V;
    float* y = out + (size_t)row * V;

    float m = -FLT_MAX;
    for (int i = 0; i < V; i++) m = fmaxf(m, x[i]);
    float s = 0.0f;
    for (int i = 0; i < V; i++) s += expf(x[i] - m);
    float inv = 1.0f / s;
    for (int i = 0; i < V; i++) y[i] = expf(x[i] - m) * inv;
}
