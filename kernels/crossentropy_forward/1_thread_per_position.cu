/*
title = "One thread per position"
changed = "The starting point: each thread reads its target, then the one probability it selects."
why = """
There is nothing to reduce: a loss needs one probability out of the row. One thread per (b, t)
is the natural mapping; the loads are scattered (one 32-byte sector per row for a 4-byte value)
and dependent (the target first, then the probability), so the kernel is as fast as two memory
latencies plus a launch. A target outside [0, V) gives a NaN loss rather than a read out of
bounds.

Could the second latency be shortened? The probability's page is known before the target
arrives, so its translation could be warmed first. It cannot (results/notes/crossentropy_forward.md:
prefetches and plain loads of the row, and a vocabulary 50 times smaller, change nothing): the
time is the two dependent round trips and the launch, which a copy of the same bytes (one round
trip) does not have, so falling short of the copy is this op's shape, not its kernel's.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "crossentropy_forward1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["losses", "probs", "targets", "N", "V"]
*/

extern "C" __global__ void crossentropy_forward1(float* losses, const float* probs,
                                                 const int* targets, int N, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int t = targets[i];
    losses[i] = (t >= 0 && t < V) ? -logf(probs[(size_t)i * V + t]) : __int_as_float(0x7fc00000);
}
