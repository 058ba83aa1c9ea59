/*
title = "One thread per output element"
changed = "The starting point: thread (row, col) computes the K-long dot product of row `row` of A and column `col` of B."
why = """
The baseline. Threads of a warp take 32 consecutive columns of one row, so their B loads and C
stores are coalesced and the A element is a broadcast; but every multiply-add needs two loads
from L1/L2, and each A and B element is fetched M or N times in all. Bounded by the load path,
far from the FP32 peak.
"""
preconditions = []
block_sizes = [64, 128, 256, 512, 1024]  # 32 columns x block_size / 32 rows

[[launch]]
kernel = "sgemm1"
grid = ["cdiv(N, 32)", "cdiv(M, block_size // 32)"]
block = [32, "block_size // 32"]
args = ["C", "A", "B", "M", "N", "K"]
*/

extern "C" __global__ void sgemm1(float* C, const float* A, const float* B, int M, int N, int K) {
    const int col = blockIdx.x * 32 + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    const float* a = A + (size_t)row * K;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += a[k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}
