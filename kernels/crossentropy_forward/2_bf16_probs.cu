/*
title = "bf16 probabilities"
builds_on = 1
precision = "bf16"
changed = "The probabilities are bf16: the thread loads the two bytes of its one probability and widens them to float (exactly) before the log; targets and losses are as in version 1."
why = """
The course's step from fp32 to bf16, on an op that reads one value per row: the kernel is version
1, with a 2-byte load. It does not get faster: each row still costs one scattered 32-byte sector
for the value it selects, and a dependent pair of loads (the target, then the probability), so the
time is two memory latencies plus a launch, as at fp32. What bf16 changes is the softmax that
wrote the probabilities: half the bytes there. The loss is -log of a bf16 value widened exactly
to float, so it is computed exactly as at fp32 and keeps fp32's tolerance.

Version 1's page-warming experiments, repeated in bf16, gained nothing either
(results/notes/crossentropy_forward.md).
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "crossentropy_forward2"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["losses", "probs", "targets", "N", "V"]
*/
#include "bf16.cuh"  // bf16, to_float

extern "C" __global__ void crossentropy_forward2(float* losses, const bf16* probs, const int* targets,
                                                 int N, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int t = targets[i];
    losses[i] = (t >= 0 && t < V) ? -logf(to_float(probs[(size_t)i * V + t])) : __int_as_float(0x7fc00000);
}
