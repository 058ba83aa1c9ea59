/*
title = "The row held in registers: one read and one write of the logits"
builds_on = 3
changed = "Each thread loads its float4 slots of the row into registers once (all loads up front), keeps exp(x - its own max) there, and after the block merge writes softmax * dloss from registers: the second read of the logits is gone. The one-hot term is patched in by one thread after a barrier."
why = """
Versions 2-3 read every row twice and count on L2 for the second read. An SM's 256 KB register
file holds a 200 KB row: each thread keeps K float4 slots (compile-time, hence one kernel per
block size: K = 50 at 256 threads, 25 at 512, covering rows of 51,200 floats; 13 and 9 at 768 and
1024 threads, whose 64-80 register budget holds 37-40K floats), so the logits cross the memory bus
once each way, the minimum the op allows. With the values on chip a thread takes an exact max
over its slots and keeps e = exp(x - m_thread) in place (one exp per element); after the merge
the output is e * (exp(m_thread - M) / S * dloss), a multiply. To keep the unrolled slot loops
free of per-column tests (registers are the budget here), the slots cover only whole float4 of
real columns; the head, the float4 holding column V - 1 and the padding are scalar loops, and the
padding is written without being read. Thread 0 reads the target's logit before the first
barrier; after a last barrier (which orders every thread's stores before it) it writes the loss
and overwrites the target's entry with (p - 1) * dloss. The cost: one block per SM, so an SM
stops loading while its block reduces; the 62 waves drift out of step across SMs, which should
hide much of it. Float4 beyond the slots (longer rows, or 20-27% of the row at 768/1024 threads)
are folded online and read a second time, as in version 3: correct at any V and Vp.
"""
block_sizes = [256, 512, 768, 1024]

[[launch]]
kernel = "fused_classifier4_b256"
when = "block_size == 256"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]

[[launch]]
kernel = "fused_classifier4_b512"
when = "block_size == 512"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]

[[launch]]
kernel = "fused_classifier4_b768"
when = "block_size == 768"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]

[[launch]]
kernel = "fused_classifier4_b1024"
when = "block_size == 1024"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]
*/
#include <cfloat>
#include <cstdint>
#include "online_softmax.cuh"  // online_update/4, online_merge, block_online_merge

// BLOCK threads per row, K float4 register slots per thread: slot k holds float4 tid + k*BLOCK.
template <int BLOCK, int K>
__device__ void classifier_row(float* logits, float* losses, const int* targets, float dloss,
                               int V, int Vp) {
    int row = blockIdx.x, tid = threadIdx.x;
    float* x = logits + (size_t)row * Vp;
    int t = targets[row];
    bool valid = t >= 0 && t < V;

    // [0, head): scalars up to the first 16-byte boundary; [head, rest): n4 float4 of real
    // columns only; [rest, Vp): scalars, real up to V, then padding.
    int head = min((int)((16 - ((uintptr_t)x & 15)) & 15) / 4, Vp);
    int n4 = V > head ? (V - head) / 4 : 0;
    int rest = head + 4 * n4;
    float4* x4 = reinterpret_cast<float4*>(x + head);

    float4 r[K];
#pragma unroll
    for (int k = 0; k < K; k++) {  // every load issued before any is used
        int i = tid + k * BLOCK;
        r[k] = i < n4 ? __ldcs(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float x_target = (tid == 0 && valid) ? x[t] : 0.0f;  // read before any thread writes

    // The slots: exact max, then e = exp(x - m_reg) kept in place.
    float m_reg = -FLT_MAX;
#pragma unroll
    for (int k = 0; k < K; k++)
        if (tid + k * BLOCK < n4) m_reg = fmaxf(m_reg, fmaxf(fmaxf(r[k].x, r[k].y), fmaxf(r[k].z, r[k].w)));
    float s_reg = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        if (tid + k * BLOCK < n4) {
            r[k] = make_float4(expf(r[k].x - m_reg), expf(r[k].y - m_reg), expf(r[k].z - m_reg),
                               expf(r[k].w - m_reg));
            s_reg += (r[k].x + r[k].y) + (r[k].z + r[k].w);
        }
    }

    // Everything else that is real (head, float4 beyond the slots, the last 0-3 columns), online;
    // it is read again below.
    float m = -FLT_MAX, s = 0.0f;
    for (int col = tid; col < min(head, V); col += BLOCK) online_update(m, s, x[col]);
    for (int col = rest + tid; col < V; col += BLOCK) online_update(m, s, x[col]);
    for (int i = tid + K * BLOCK; i < n4; i += BLOCK) online_update4(m, s, x4[i]);

    online_merge(m, s, m_reg, s_reg);
    block_online_merge<BLOCK / 32>(m, s);  // its barriers also order the reads above before the writes below
    float inv = 1.0f / s;

    float a = expf(m_reg - m) * inv * dloss;  // e * a = softmax * dloss for the slots
#pragma unroll
    for (int k = 0; k < K; k++) {
        int i = tid + k * BLOCK;
        if (i < n4) __stcs(x4 + i, make_float4(r[k].x * a, r[k].y * a, r[k].z * a, r[k].w * a));
    }
    float b = inv * dloss;
    for (int col = tid; col < head; col += BLOCK) x[col] = col < V ? expf(x[col] - m) * b : 0.0f;
    for (int col = rest + tid; col < Vp; col += BLOCK) x[col] = col < V ? expf(x[col] - m) * b : 0.0f;
    for (int i = tid + K * BLOCK; i < n4; i += BLOCK) {
        float4 v = __ldcs(x4 + i);
        __stcs(x4 + i, make_float4(expf(v.x - m) * b, expf(v.y - m) * b, expf(v.z - m) * b,
                                   expf(v.w - m) * b));
    }

    __syncthreads();  // every thread's store of the target's column comes before the patch below
    if (tid == 0) {
        if (valid) {
            losses[row] = logf(s) + m - x_target;
            x[t] = (expf(x_target - m) * inv - 1.0f) * dloss;
        } else {
            losses[row] = __int_as_float(0x7fc00000);  // NaN: bad target
        }
    }
}

// One block per SM is the design (the row fills the register file), so each kernel may use
// all 65536 / BLOCK registers per thread.
extern "C" __global__ void __launch_bounds__(256, 1)
fused_classifier4_b256(float* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    classifier_row<256, 50>(logits, losses, targets, dloss, V, Vp);
}
extern "C" __global__ void __launch_bounds__(512, 1)
fused_classifier4_b512(float* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    classifier_row<512, 25>(logits, losses, targets, dloss, V, Vp);
}
extern "C" __global__ void __launch_bounds__(768, 1)
fused_classifier4_b768(float* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    classifier_row<768, 13>(logits, losses, targets, dloss, V, Vp);
}
extern "C" __global__ void __launch_bounds__(1024, 1)
fused_classifier4_b1024(float* logits, float* losses, const int* targets, float dloss, int N, int V, int Vp) {
    classifier_row<1024, 9>(logits, losses, targets, dloss, V, Vp);
}
