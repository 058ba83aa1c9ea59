// encoder_backward's one-pass atomic kernel (versions 7 and 10): a thread owns dwpe's
// (t, c..c+3), reads dout[b, t, c..c+3] for every b (BGROUP b at a time, every load issued
// before any is used), sums them in order of b into dwpe (no atomics: it is that chunk's only
// writer) and sends each row to its token's dwte chunk as one float4 reduction. PREFETCH
// (version 10): as soon as the group's token ids land, ask L2 for those dwte chunks, so the
// reductions find their lines there instead of waiting on DRAM. Needs C % 4 == 0.
#ifndef KERNELS_COMMON_ENCODER_BACKWARD_ATOMIC_CUH
#define KERNELS_COMMON_ENCODER_BACKWARD_ATOMIC_CUH

#include "l2_prefetch.cuh"  // prefetch_l2_line: a dwte line asked of L2 while dout is in flight

namespace ebatomic {

// b values a thread reads before it uses any: eight 16-byte loads in flight (B = 8: all of them).
constexpr int BGROUP = 8;

// dwte[p..p+3] += v as one 16-byte reduction in L2 where the GPU has it (compute capability
// 9.x: atomicAdd on float4 exists only there), as four scalar atomics elsewhere. The result is
// unused, so the compiler issues reductions (RED), which no thread waits for.
__device__ __forceinline__ void add4(float* p, float4 v) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4*>(p), v);
#else
    atomicAdd(p, v.x);
    atomicAdd(p + 1, v.y);
    atomicAdd(p + 2, v.z);
    atomicAdd(p + 3, v.w);
#endif
}

template <bool PREFETCH>
__device__ __forceinline__ void encoder_backward_vec4(float* __restrict__ dwte, float* __restrict__ dwpe,
                                                      const float* __restrict__ dout, const int* __restrict__ inp,
                                                      int B, int T, int C, int V) {
    int units = C / 4;  // float4 columns a row has
    int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= T * units) return;
    int t = u / units, c = (u % units) * 4;
    float* pe_at = dwpe + (size_t)t * C + c;
    float4 pe = *reinterpret_cast<const float4*>(pe_at);  // in flight with the first group's loads
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int b0 = 0; b0 < B; b0 += BGROUP) {
        int tok[BGROUP];
        float4 d[BGROUP];
#pragma unroll
        for (int j = 0; j < BGROUP; j++) {  // every load first: the group's 128 bytes in flight
            tok[j] = -1;
            d[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (b0 + j < B) {
                int n = (b0 + j) * T + t;  // 32-bit: N * C < 2^31 (family precondition)
                tok[j] = __ldg(inp + n);  // the same id for every thread of this t: one broadcast
                d[j] = __ldg(reinterpret_cast<const float4*>(dout + n * C + c));
            }
        }
        if (PREFETCH) {  // the ids land a round trip before the dout chunks: start the dwte fetches
#pragma unroll
            for (int j = 0; j < BGROUP; j++)
                if ((unsigned)tok[j] < (unsigned)V) prefetch_l2_line(dwte + tok[j] * C + c);  // V * C < 2^31
        }
#pragma unroll
        for (int j = 0; j < BGROUP; j++) {  // dwpe's sum, in order of b
            if (b0 + j < B) {
                sum.x += d[j].x;
                sum.y += d[j].y;
                sum.z += d[j].z;
                sum.w += d[j].w;
            }
        }
        // Rows of this thread with the same token are added here first and sent as one atomic:
        // fewer atomics where tokens repeat (tiny vocabularies, frequent tokens), and shorter
        // chains of fp32 additions in whatever order the atomics land.
#pragma unroll
        for (int j = 1; j < BGROUP; j++) {
#pragma unroll
            for (int i = 0; i < j; i++) {
                if (tok[j] >= 0 && tok[i] == tok[j]) {
                    d[i].x += d[j].x;
                    d[i].y += d[j].y;
                    d[i].z += d[j].z;
                    d[i].w += d[j].w;
                    tok[j] = -1;
                }
            }
        }
#pragma unroll
        for (int j = 0; j < BGROUP; j++)
            if ((unsigned)tok[j] < (unsigned)V) add4(dwte + tok[j] * C + c, d[j]);  // V * C < 2^31
    }
    *reinterpret_cast<float4*>(pe_at) = make_float4(pe.x + sum.x, pe.y + sum.y, pe.z + sum.z, pe.w + sum.w);
}

}  // namespace ebatomic

#endif  // KERNELS_COMMON_ENCODER_BACKWARD_ATOMIC_CUH
