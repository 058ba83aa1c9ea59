/*
title = "Square tiles staged in shared memory"
builds_on = 1
changed = "A block of TxT threads computes a TxT output tile; inp and weight are read in TxT tiles along C into shared memory, each element once per block instead of once per thread."
why = """
Every element staged in shared memory is used T times (by a whole row or column of the tile), so
global traffic falls by a factor T (8, 16 or 32 here). The tile loads are coalesced: consecutive
threads read consecutive C positions of one row. The weight tile is read across its rows in the
inner loop; one float of padding per row (T+1 stride) sends those T reads to T different banks.
Tiles past the edges are filled with zeros, so any size works. Still one output per thread: two
shared-memory loads per FMA limit it well below the FP32 peak.
"""
preconditions = []
# Threads per block; the tile is sqrt(block_size) wide (8, 16, 32).
block_sizes = [64, 256, 1024]

[[launch]]
kernel = "matmul_forward2"
grid = ["cdiv(OC, int(sqrt(block_size)))", "cdiv(N, int(sqrt(block_size)))"]
block = ["int(sqrt(block_size))", "int(sqrt(block_size))"]
shared = "8 * int(sqrt(block_size)) * (int(sqrt(block_size)) + 1)"
args = ["out", "inp", "weight", "bias", "N", "C", "OC"]
*/

extern "C" __global__ void matmul_forward2(float* out, const float* inp, const float* weight,
                                           const float* bias, int N, int C, int OC) {
    extern __shared__ float smem[];
    const int T = blockDim.x;  // square blocks: blockDim.y == T
    const int stride = T + 1;  // the padding column keeps sw[tx][k] reads conflict-free
    float* sx = smem;               // sx[r][k]: inp rows of this tile
    float* sw = smem + T * stride;  // sw[o][k]: weight rows of this tile
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * T + ty;  // output row this thread computes
    int oc = blockIdx.x * T + tx;   // output column this thread computes
    int wrow = blockIdx.x * T + ty; // weight row this thread helps load
    float acc = 0.0f;
    for (int c0 = 0; c0 < C; c0 += T) {
        int c = c0 + tx;
        sx[ty * stride + tx] = (row < N && c < C) ? inp[(size_t)row * C + c] : 0.0f;
        sw[ty * stride + tx] = (wrow < OC && c < C) ? weight[(size_t)wrow * C + c] : 0.0f;
        __syncthreads();
        for (int k = 0; k < T; k++) acc += sx[ty * stride + k] * sw[tx * stride + k];
        __syncthreads();  // the next tile overwrites what slower threads may still be reading
    }
    if (row < N && oc < OC) out[(size_t)row * OC + oc] = acc + bias[oc];
}
