/*
title = "One thread per output element"
changed = "The starting point: thread (row, oc) walks the C-long dot product of an inp row and a weight row."
why = """
The simplest correct kernel, and the baseline every later version is measured against. Neighbour
threads share a row and take consecutive oc, so the inp element is a broadcast and the output
store is coalesced, but the weight reads of a warp are C floats apart: 32 separate cache lines
per step, held in L1 only as long as luck allows. Every operand is fetched from memory (or cache)
once per multiply-add: about 2 * C * OC * N loads for as many FLOPs, far from compute-bound.
"""
preconditions = []
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "matmul_forward1"
grid = "cdiv(N * OC, block_size)"
block = "block_size"
args = ["out", "inp", "weight", "bias", "N", "C", "OC"]
*/

extern "C" __global__ void matmul_forward1(float* out, const float* inp, const float* weight,
                                           const float* bias, int N, int C, int OC) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)N * OC) return;
    int row = (int)(idx / OC);
    int oc = (int)(idx % OC);
    const float* x = inp + (size_t)row * C;
    const float* w = weight + (size_t)oc * C;
    float acc = bias[oc];
    for (int c = 0; c < C; c++) acc += x[c] * w[c];
    out[idx] = acc;
}
