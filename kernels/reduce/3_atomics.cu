/*
title = "One kernel: each block's sum goes straight into out with atomicAdd"
builds_on = 2
deterministic = false  # float atomicAdd: the sum's order, and so its last bits, vary from run to run
changed = "The second kernel and the partial-sums buffer are gone: after its shared-memory tree, each block adds its sum to out (zeroed by a memset) with one atomicAdd."
why = """
The second pass of version 2 is a launch of its own and a round trip through a partials buffer;
a float atomicAdd in L2 lets the blocks meet in out directly, in one kernel. At these block
counts (~100k-800k blocks) the atomics on one address serialize, but they are spread over the
whole kernel's run, mostly hidden behind the loads of other blocks. The order of the adds
varies between runs, so the last bits of out do too.
"""
block_sizes = [64, 128, 256, 512, 1024]
# One fp32 accumulator takes up to ~800k block sums: each add rounds at the ulp of a running
# total of up to 5e7 (ulp 4), a random walk of ~2e-5 relative; 1e-4 leaves a safe margin.
tolerance = { rtol = 1e-4 }

[[launch]]
memset = "out"

[[launch]]
kernel = "reduce3"
grid = "cdiv(N, 2 * block_size)"
block = "block_size"
shared = "4 * block_size"
args = ["out", "inp", "N"]
*/

extern "C" __global__ void reduce3(float* out, const float* inp, int N) {
    extern __shared__ float s[];
    int tid = threadIdx.x;
    size_t i = (size_t)blockIdx.x * 2 * blockDim.x + tid;
    s[tid] = (i < N ? inp[i] : 0.0f) + (i + blockDim.x < N ? inp[i + blockDim.x] : 0.0f);
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) s[tid] += s[tid + stride];
        __syncthreads();
    }
    if (tid == 0) atomicAdd(out, s[0]);
}
