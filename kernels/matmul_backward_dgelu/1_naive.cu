/*
title = "Three naive kernels: dpre, dweight, then dpre_bias from dpre"
changed = "The starting point: a thread per dpre element (its OC-long dot product of a dout row and a weight column, times gelu'(pre)), a thread per dweight element (its N-long sum, added in), and a thread per column of dpre for its sum over the rows."
why = """
The fused op's three results, each by the plainest kernel: correct at every size and the baseline
the library versions are checked against. The GELU's derivative is applied to the dot product in a
register, so the unfused gelu_backward's round trip of N*C values is already gone; the column sums
still read dpre back, which the next version's epilogue avoids.
"""
preconditions = []
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "dpre_naive"
grid = "cdiv(N * C, block_size)"
block = "block_size"
args = ["dpre", "dout", "pre", "weight", "N", "C", "OC"]

[[launch]]
kernel = "dweight_naive"
grid = "cdiv(OC * C, block_size)"
block = "block_size"
args = ["dweight", "dout", "inp", "N", "C", "OC"]

[[launch]]
kernel = "column_sums_naive"
grid = "cdiv(C, block_size)"
block = "block_size"
args = ["dpre_bias", "dpre", "N", "C"]
*/
#include "gelu.cuh"  // gelu_grad(x), the tanh approximation's derivative, as gelu_backward computes it

// dpre[n, c] = gelu'(pre[n, c]) * sum_oc dout[n, oc] * weight[oc, c]
extern "C" __global__ void dpre_naive(float* dpre, const float* dout, const float* pre, const float* weight,
                                      int N, int C, int OC) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)N * C) return;
    int row = (int)(idx / C);
    int c = (int)(idx % C);
    const float* d = dout + (size_t)row * OC;
    float acc = 0.0f;
    for (int oc = 0; oc < OC; oc++) acc += d[oc] * weight[(size_t)oc * C + c];
    dpre[idx] = gelu_grad(pre[idx]) * acc;
}

// dweight[oc, c] += sum_n dout[n, oc] * inp[n, c]
extern "C" __global__ void dweight_naive(float* dweight, const float* dout, const float* inp, int N, int C, int OC) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)OC * C) return;
    int oc = (int)(idx / C);
    int c = (int)(idx % C);
    float acc = 0.0f;
    for (int n = 0; n < N; n++) acc += dout[(size_t)n * OC + oc] * inp[(size_t)n * C + c];
    dweight[idx] += acc;
}

// dpre_bias[c] += sum_n dpre[n, c]: consecutive threads take consecutive columns, so each row's
// reads are coalesced.
extern "C" __global__ void column_sums_naive(float* dpre_bias, const float* dpre, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.0f;
    for (int n = 0; n < N; n++) acc += dpre[(size_t)n * C + c];
    dpre_bias[c] += acc;
}
