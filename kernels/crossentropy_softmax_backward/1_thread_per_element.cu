/*
title = "One thread per element"
changed = "The starting point: one thread per (b, t, v), its row and column from a division."
why = """
Every output element is independent, so one thread each: consecutive threads write consecutive
addresses (coalesced), and N*V threads hide the memory latency. Each thread recomputes its row
with a 64-bit division and loads that row's target and dloss (cached: a warp shares one or two
rows). 4-byte accesses and the division are what the next version removes.
"""
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "crossentropy_softmax_backward1"
grid = "cdiv(N * V, block_size)"
block = "block_size"
args = ["dlogits", "dlosses", "probs", "targets", "N", "V"]
*/

extern "C" __global__ void crossentropy_softmax_backward1(float* dlogits, const float* dlosses,
                                                          const float* probs, const int* targets,
                                                          int N, int V) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)N * V) return;
    int row = (int)(idx / V), v = (int)(idx % V);
    float indicator = v == targets[row] ? 1.0f : 0.0f;
    dlogits[idx] = (probs[idx] - indicator) * dlosses[row];
}
