/*
title = "A tree in global memory, interleaved pairs"
changed = "The starting point: each block copies its 2 * block_size inputs into scratch as pair sums, then halves them in place in global memory, neighbours first (interleaved addressing); a one-block second kernel does the same over the block sums."
why = """
The classic first reduction: log2(block_size) levels, each adding pairs, with a __syncthreads()
between levels so a level sees the previous one's writes. The input must not be modified, so the
first level (x[2i] + x[2i+1]) is written to a scratch copy and the tree works in place there.
Everything is slow on purpose: every level reads and writes global memory (L2 at best), and
interleaved addressing (thread tid works when tid is a multiple of 2*stride) leaves most lanes of
each warp idle, with divergent branches, while the busy lanes touch addresses far apart. The
block sums then meet in one block, which loops over them and runs the same tree.
"""
block_sizes = [64, 128, 256, 512, 1024]  # powers of two: the tree halves the block each level

[scratch]
work = "cdiv(N, 2 * block_size) * block_size"
partial = "cdiv(N, 2 * block_size)"
final = "block_size"

[[launch]]
kernel = "reduce1_blocks"
grid = "cdiv(N, 2 * block_size)"
block = "block_size"
args = ["partial", "work", "inp", "N"]

[[launch]]
kernel = "reduce1_finish"
grid = "1"
block = "block_size"
args = ["out", "final", "partial", "cdiv(N, 2 * block_size)"]
*/

// Interleaved tree over w[0..blockDim.x) in global memory; the sum ends in w[0].
__device__ void global_tree(float* w) {
    int tid = threadIdx.x;
    for (int stride = 1; stride < blockDim.x; stride *= 2) {
        if (tid % (2 * stride) == 0) w[tid] += w[tid + stride];
        __syncthreads();  // also makes this level's global writes visible to the whole block
    }
}

extern "C" __global__ void reduce1_blocks(float* partial, float* work, const float* inp, int N) {
    int tid = threadIdx.x;
    size_t i = (size_t)blockIdx.x * 2 * blockDim.x + 2 * tid;
    float* w = work + (size_t)blockIdx.x * blockDim.x;
    w[tid] = (i < N ? inp[i] : 0.0f) + (i + 1 < N ? inp[i + 1] : 0.0f);
    __syncthreads();
    global_tree(w);
    if (tid == 0) partial[blockIdx.x] = w[0];
}

// One block: each thread adds a strided share of the P block sums, then the same global tree.
extern "C" __global__ void reduce1_finish(float* out, float* final, const float* partial, int P) {
    int tid = threadIdx.x;
    float s = 0.0f;
    for (int i = tid; i < P; i += blockDim.x) s += partial[i];
    final[tid] = s;
    __syncthreads();
    global_tree(final);
    if (tid == 0) out[0] = final[0];
}
