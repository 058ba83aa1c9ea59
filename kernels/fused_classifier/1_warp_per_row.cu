/*
title = "A warp per row, online softmax"
changed = "The starting point: each warp owns a row; one pass computes the running (max, sum) over the V real columns, a shuffle reduction merges the lanes' pairs, a second pass overwrites the row with the gradient."
why = """
Fusing the three steps of the classic pipeline (softmax to a probability tensor, loss, backward)
means the (B, T, V) probabilities are never written and read back: the logits are read twice and
written once. The online softmax gets the max and the sum in the same pass; (max, sum) pairs
merge associatively, so the lanes combine theirs with five rounds of shuffles. Every element is
read and rewritten by the same lane (element i belongs to lane i % 32 in both passes), and the
lane that read the target's logit writes the loss: in-place updating is race-free by construction.
Simple, but each lane walks V/32 ~ 1,570 elements twice with 4-byte loads.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "fused_classifier1"
grid = "cdiv(N * 32, block_size)"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]
*/
#include <cfloat>
#include "online_softmax.cuh"  // warp_online_merge: (max, sum) pairs, as in softmax_forward 6

extern "C" __global__ void fused_classifier1(float* logits, float* losses, const int* targets,
                                             float dloss, int N, int V, int Vp) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together
    float* x = logits + (size_t)row * Vp;
    int t = targets[row];
    int target = (t >= 0 && t < V) ? t : -1;  // -1 matches no column

    float m = -FLT_MAX, s = 0.0f, x_target = 0.0f;
    for (int i = lane; i < V; i += 32) {
        float xi = x[i];
        if (xi > m) {
            s = s * expf(m - xi) + 1.0f;
            m = xi;
        } else {
            s += expf(xi - m);
        }
        if (i == target) x_target = xi;
    }
    warp_online_merge(m, s);  // five rounds of shuffles; every lane gets the row's pair
    if (target < 0) {
        if (lane == 0) losses[row] = __int_as_float(0x7fc00000);  // NaN: bad target
    } else if (lane == target % 32) {
        losses[row] = logf(s) + m - x_target;
    }

    float inv = 1.0f / s;
    for (int i = lane; i < Vp; i += 32) {
        float g = 0.0f;  // padded columns
        if (i < V) g = (expf(x[i] - m) * inv - (i == target ? 1.0f : 0.0f)) * dloss;
        x[i] = g;
    }
}
