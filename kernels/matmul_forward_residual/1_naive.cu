/*
title = "One thread per output element: the dot product, its bias and the stream's value"
changed = "The starting point: thread (row, oc) walks the C-long dot product of an inp row and a weight row, adds the bias and residual[row, oc], and writes the sum."
why = """
The contract in its plainest form, and what the library versions are measured against. Compared
with matmul_forward 1, each thread reads one more value (the stream's element at its own output
position, coalesced like the store) and the sum is written once: nothing about the product
changes. Whether that extra read is free is the question of the fused versions; here the product's
2 * C * OC * N operand loads dominate everything.
"""
preconditions = []
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "matmul_forward_residual1"
grid = "cdiv(N * OC, block_size)"
block = "block_size"
args = ["out", "inp", "weight", "bias", "residual", "N", "C", "OC"]
*/

extern "C" __global__ void matmul_forward_residual1(float* out, const float* inp, const float* weight,
                                                    const float* bias, const float* residual, int N, int C,
                                                    int OC) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)N * OC) return;
    const int row = (int)(i / OC), oc = (int)(i % OC);
    const float* x = inp + (size_t)row * C;
    const float* w = weight + (size_t)oc * C;
    float dot = 0.f;
    for (int c = 0; c < C; ++c) dot += x[c] * w[c];
    out[i] = residual[i] + (dot + bias[oc]);
}
