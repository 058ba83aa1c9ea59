/*
title = "The tree in shared memory, sequential addressing"
builds_on = 1
changed = "The tree moves from global scratch to dynamic shared memory, and the active threads are the first `stride` ones (sequential addressing) instead of every 2*stride-th."
why = """
Shared memory sits in the SM: a level of the tree costs a few cycles instead of an L2 round trip,
and the scratch copy of the input disappears. Sequential addressing (thread tid adds element
tid + stride, stride halving from block_size/2) keeps the working threads packed in the first
warps: whole warps retire instead of every warp running with a few live lanes, there is no
divergence until the last 32 elements, and consecutive lanes read consecutive words (no bank
conflicts). Each thread still adds two inputs as it loads them, so the first level is free.
"""
block_sizes = [64, 128, 256, 512, 1024]

[scratch]
partial = "cdiv(N, 2 * block_size)"

[[launch]]
kernel = "reduce2_blocks"
grid = "cdiv(N, 2 * block_size)"
block = "block_size"
shared = "4 * block_size"
args = ["partial", "inp", "N"]

[[launch]]
kernel = "reduce2_finish"
grid = "1"
block = "block_size"
shared = "4 * block_size"
args = ["out", "partial", "cdiv(N, 2 * block_size)"]
*/

// Sequential-addressing tree over s[0..blockDim.x) (already holding each thread's value).
__device__ float shared_tree(float* s) {
    int tid = threadIdx.x;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    return s[0];
}

extern "C" __global__ void reduce2_blocks(float* partial, const float* inp, int N) {
    extern __shared__ float s[];
    int tid = threadIdx.x;
    // Block b owns 2 * blockDim.x inputs; thread tid adds elements tid and tid + blockDim.x
    // (coalesced: consecutive lanes, consecutive addresses).
    size_t i = (size_t)blockIdx.x * 2 * blockDim.x + tid;
    s[tid] = (i < N ? inp[i] : 0.0f) + (i + blockDim.x < N ? inp[i + blockDim.x] : 0.0f);
    float total = shared_tree(s);
    if (tid == 0) partial[blockIdx.x] = total;
}

extern "C" __global__ void reduce2_finish(float* out, const float* partial, int P) {
    extern __shared__ float s[];
    int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = tid; i < P; i += blockDim.x) v += partial[i];
    s[tid] = v;
    float total = shared_tree(s);
    if (tid == 0) out[0] = total;
}
