/*
title = "Separate mean, rstd and normalize kernels with shared-memory reductions"
builds_on = 1
changed = "Three kernels: a block per row reduces the mean, another the variance, then one thread per element normalizes."
why = """
Now a whole block cooperates on a row: its threads read consecutive addresses (coalesced), each
sums a strided slice, and a tree reduction in shared memory combines the partial sums. The
normalize kernel has N*C threads, plenty to hide memory latency. The price: the row is read
three times from memory, and every tree step needs a __syncthreads().
"""
preconditions = []
block_sizes = [32, 64, 128, 256, 512, 1024]  # powers of two: the tree halves the block each step

[[launch]]
kernel = "row_mean"
grid = "N"
block = "block_size"
shared = "4 * block_size"
args = ["mean", "inp", "N", "C"]

[[launch]]
kernel = "row_rstd"
grid = "N"
block = "block_size"
shared = "4 * block_size"
args = ["rstd", "inp", "mean", "N", "C", "eps"]

[[launch]]
kernel = "normalize"
grid = "cdiv(N * C, block_size)"
block = "block_size"
args = ["out", "inp", "mean", "rstd", "weight", "bias", "N", "C"]
*/

// Sum over the block of each thread's `value`, by halving: after the loop, partial[0] holds it.
__device__ float block_tree_sum(float value, float* partial) {
    int tid = threadIdx.x;
    partial[tid] = value;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) partial[tid] += partial[tid + stride];
        __syncthreads();
    }
    return partial[0];
}

extern "C" __global__ void row_mean(float* mean, const float* inp, int N, int C) {
    extern __shared__ float partial[];
    const float* x = inp + (size_t)blockIdx.x * C;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) sum += x[i];
    float total = block_tree_sum(sum, partial);
    if (threadIdx.x == 0) mean[blockIdx.x] = total / C;
}

extern "C" __global__ void row_rstd(float* rstd, const float* inp, const float* mean, int N, int C,
                                    float eps) {
    extern __shared__ float partial[];
    const float* x = inp + (size_t)blockIdx.x * C;
    float m = mean[blockIdx.x];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float d = x[i] - m;
        sum += d * d;
    }
    float total = block_tree_sum(sum, partial);
    if (threadIdx.x == 0) rstd[blockIdx.x] = rsqrtf(total / C + eps);
}

extern "C" __global__ void normalize(float* out, const float* inp, const float* mean,
                                     const float* rstd, const float* weight, const float* bias,
                                     int N, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    int row = idx / C, c = idx % C;
    out[idx] = (inp[idx] - mean[row]) * rstd[row] * weight[c] + bias[c];
}
