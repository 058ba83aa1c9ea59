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

// (m, s) <- (m, s) + (m2, s2); (-FLT_MAX, 0) is the empty pair (its terms vanish, never NaN).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

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
    for (int offset = 16; offset > 0; offset /= 2) {
        float m2 = __shfl_xor_sync(0xffffffff, m, offset);
        float s2 = __shfl_xor_sync(0xffffffff, s, offset);
        merge(m, s, m2, s2);
    }
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
