/*
title = "One thread per bias element: the query third's column sums, the value third's dot products"
builds_on = 0
changed = "The starting point: thread c of 3C adds column c of dqkv over the N rows when c is a query column, does nothing for a key column, and sets a value column to the dot product of dproj_bias with column c - 2C of proj_weight."
why = """
The contract as plainly as it goes, and what the faster version is checked and timed against.
Compared with matmul_backward_bias 1 (a thread a column of all 3C), the key threads have nothing
to do and the value threads read C + C values instead of N: at N = 8192 and C = 768 the pass over
dqkv shrinks to its query third. The query threads' loads are coalesced (neighbouring threads,
neighbouring columns of a row), but C of them is few: six blocks of 128 at C = 768, each walking
N rows one after the other.
"""
block_sizes = [64, 128, 256, 512]

[[launch]]
kernel = "qkv_bias_backward1"
grid = "cdiv(3 * C, block_size)"
block = "block_size"
args = ["dbias", "dqkv", "dproj_bias", "proj_weight", "N", "C"]

[[emulate]]
runs = ["bs=64 seed=0 PRIORITY"]
*/

// Thread c: query column (c < C): dbias[c] += its sum over the rows, in row order; key column:
// nothing (its gradient is zero); value column: dbias[c] = sum over j of dproj_bias[j] *
// proj_weight[j][c - 2C], set, not added.
extern "C" __global__ void qkv_bias_backward1(float* dbias, const float* dqkv, const float* dproj_bias,
                                              const float* proj_weight, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < C) {
        float sum = 0.0f;
        for (int row = 0; row < N; row++) sum += dqkv[(size_t)row * 3 * C + c];
        dbias[c] += sum;
    } else if (c >= 2 * C && c < 3 * C) {
        const int k = c - 2 * C;
        float dot = 0.0f;
        for (int j = 0; j < C; j++) dot += dproj_bias[j] * proj_weight[(size_t)j * C + k];
        dbias[c] = dot;
    }
}
