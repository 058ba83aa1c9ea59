/*
title = "One thread per position"
changed = "The starting point: each thread reads its target, then the one probability it selects."
why = """
There is nothing to reduce: a loss needs one probability out of the row. One thread per (b, t)
is the natural mapping; the loads are scattered (one 32-byte sector per row for a 4-byte value)
and dependent (the target first, then the probability), so the kernel is as fast as two memory
latencies plus a launch. A target outside [0, V) gives a NaN loss rather than a read out of
bounds.

Could the second latency be shortened? The probability's address is known, up to the target,
before the target arrives: its row's page. Tried on the H100 (2026-11-25, experiment copies
beside this version, L2 flushed, three rounds): a prefetch of the row's first line, or of its
middle, or a plain load of it, issued before the target's load, so that the page's translation is
warm when the dependent load goes: 3.65-3.97 us against this version's 3.36-3.66, no faster. With
V = 1024 (a probs array 50 times smaller, the same bytes moved) 3.36-3.52 us: translation costs
little here; the time is the two dependent round trips and the launch, which a copy of the same
bytes (one round trip) does not have: 0.72-0.79x the copy is this op's shape, not its kernel.
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
