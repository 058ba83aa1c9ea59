/*
title = "One pass: the last block to finish adds the block sums"
builds_on = 5
changed = "Version 5's two kernels become one: each block writes its sum, then takes a ticket from a device counter; the block that draws the last ticket adds all the block sums (in order) and resets the counter for the next launch."
why = """
The second kernel of version 5 costs a launch and the gap between two kernels: a few
microseconds against ~150 us of streaming, but the whole cost of the reduction's tail. Here the
blocks learn who finished last through an atomic ticket on a counter in a static device
variable (zero when the module loads): __threadfence() before taking the ticket makes each
block's sum visible in L2 to whichever block turns out last, which reads the sums with L1-bypassing
loads and adds them in block order. The result stays bit-reproducible (the sums' order is fixed)
and the counter is left at zero, so the kernel can be launched again, or replayed in a graph.
Launches of this module must not run concurrently on two streams: they would share the counter.
"""
block_sizes = [64, 128, 256, 512, 1024]

[scratch]
partial = "min(cdiv(N, 4 * block_size), SMS * 2048 // block_size)"

[[launch]]
kernel = "reduce6"
# One wave of resident blocks (SMS multiprocessors x 2048 threads); fewer when N is small.
grid = "min(cdiv(N, 4 * block_size), SMS * 2048 // block_size)"
block = "block_size"
args = ["out", "partial", "inp", "N"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = [{ N = 3 }, { N = 5000 }]
runs = ["bs=64 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE order=3"]
*/

#include "reduce.cuh"  // block_sum: it ends with a barrier, so it may be called twice in a row

__device__ unsigned int blocks_done = 0;  // zero at module load; the last block puts it back to 0

__device__ __forceinline__ float sum4(float4 a) { return (a.x + a.y) + (a.z + a.w); }

__device__ float thread_sum(const float* inp, int N) {
    int tid = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
    int n4 = ((size_t)inp & 15) == 0 ? N / 4 : 0;
    const float4* in4 = reinterpret_cast<const float4*>(inp);
    int i = tid;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        s0 += sum4(__ldcs(in4 + i));
        s1 += sum4(__ldcs(in4 + i + stride));
        s2 += sum4(__ldcs(in4 + i + 2 * stride));
        s3 += sum4(__ldcs(in4 + i + 3 * stride));
    }
    for (; i < n4; i += stride) s0 += sum4(__ldcs(in4 + i));
    for (int j = 4 * n4 + tid; j < N; j += stride) s1 += inp[j];
    return (s0 + s1) + (s2 + s3);
}

extern "C" __global__ void reduce6(float* out, float* partial, const float* inp, int N) {
    __shared__ bool last;
    float total = block_sum(thread_sum(inp, N));
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = total;
        __threadfence();  // the sum is visible device-wide before this block's ticket is
        last = atomicAdd(&blocks_done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    // Every other block has published its sum; __ldcg reads them from L2, past this SM's L1.
    float s = 0.0f;
    for (int i = threadIdx.x; i < gridDim.x; i += blockDim.x) s += __ldcg(partial + i);
    s = block_sum(s);
    if (threadIdx.x == 0) {
        out[0] = s;
        blocks_done = 0;  // ready for the next launch (kernel completion orders it before that)
    }
}
