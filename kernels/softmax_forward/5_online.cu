/*
title = "Online softmax: the maximum and the sum in one pass"
builds_on = 4
changed = "Each thread keeps a running maximum and a running sum rescaled whenever the maximum grows, so the max pass disappears; the block then reduces the maxima and the rescaled sums."
why = """
Versions 2-4 read the row three times: max, sum, write. The sum of exp(x - m) does not need the
final m in advance: keep a running m and sum, and when a larger value arrives multiply the sum by
exp(m_old - m_new). One read then yields both statistics, and the row crosses the memory bus
twice instead of three times (the second read may also hit L2). Naive on purpose: two exps per
element (rescale and add), and two block reductions (maxima, then sums rescaled to the common
maximum).
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "softmax_forward5"
grid = "N"
block = "block_size"
args = ["out", "inp", "N", "V"]
*/
#include <cfloat>
#include "reduce.cuh"  // block_max, block_sum: version 4's two-level reduction

extern "C" __global__ void softmax_forward5(float* out, const float* inp, int N, int V) {
    int row = blockIdx.x;
    const float* x = inp + (size_t)row * V;
    float* y = out + (size_t)row * V;

    // -FLT_MAX rather than -inf: exp(m_old - m_new) stays exp(finite or -inf) = 0, never inf - inf.
    float m = -FLT_MAX, s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float xi = x[i];
        float m_new = fmaxf(m, xi);
        s = s * expf(m - m_new) + expf(xi - m_new);
        m = m_new;
    }
    float m_row = block_max(m);
    // A thread that saw no element has s = 0, so its rescaled sum adds nothing.
    float s_row = block_sum(s * expf(m - m_row));

    float inv = 1.0f / s_row;
    for (int i = threadIdx.x; i < V; i += blockDim.x) y[i] = expf(x[i] - m_row) * inv;
}
