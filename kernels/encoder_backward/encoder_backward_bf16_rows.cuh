// encoder_backward_bf16_rows.cuh: the rows encoder_backward_fast.cuh moves, at bf16 (versions 8
// and 9): Row<bf16, 8>, eight bf16 in one 16-byte access, and Row<bf16, 1>, one bf16 (widths that
// are not a multiple of 8). Each widens to fp32 to add and rounds once when it stores.

#ifndef KERNELS_COMMON_ENCODER_BACKWARD_BF16_ROWS_CUH
#define KERNELS_COMMON_ENCODER_BACKWARD_BF16_ROWS_CUH

#include "bf16.cuh"                   // bf16, Pack8 with load8/store8, to_float/to_bf16
#include "encoder_backward_fast.cuh"  // ebfast::Row, the template these specialize

namespace ebfast {
template <> struct Row<bf16, 8> {
    // Held as four 32-bit words, two bf16 each, widened only when added: a thread holds 12 of
    // these at once (8 dout chunks, 4 dwte chunks), and eight bf16 kept one a register would
    // double their registers. Zeroed when declared: the kernels load rows under conditions the
    // compiler cannot follow (active threads, b < B), and a register that may be read before it
    // is written stays allocated from the kernel's first instruction (ptxas counted 30 more).
    int4 q = {0, 0, 0, 0};
    __device__ __forceinline__ void load(const bf16* p) { q = *reinterpret_cast<const int4*>(p); }
    // bf16 is the top half of a float: widening is a shift or a mask of its word.
    __device__ __forceinline__ static float lo(int w) { return __int_as_float(w << 16); }
    __device__ __forceinline__ static float hi(int w) { return __int_as_float(w & (int)0xffff0000u); }
    __device__ __forceinline__ void add_to(float (&acc)[8]) const {
        acc[0] += lo(q.x);
        acc[1] += hi(q.x);
        acc[2] += lo(q.y);
        acc[3] += hi(q.y);
        acc[4] += lo(q.z);
        acc[5] += hi(q.z);
        acc[6] += lo(q.w);
        acc[7] += hi(q.w);
    }
    // p[0..8) = these values widened + sum, rounded once.
    __device__ __forceinline__ void store_plus(bf16* p, const float (&sum)[8]) const {
        Pack8 out;
        out.v[0] = to_bf16(lo(q.x) + sum[0]);
        out.v[1] = to_bf16(hi(q.x) + sum[1]);
        out.v[2] = to_bf16(lo(q.y) + sum[2]);
        out.v[3] = to_bf16(hi(q.y) + sum[3]);
        out.v[4] = to_bf16(lo(q.z) + sum[4]);
        out.v[5] = to_bf16(hi(q.z) + sum[5]);
        out.v[6] = to_bf16(lo(q.w) + sum[6]);
        out.v[7] = to_bf16(hi(q.w) + sum[7]);
        store8(p, out);
    }
};
template <> struct Row<bf16, 1> {
    bf16 x = to_bf16(0.0f);
    __device__ __forceinline__ void load(const bf16* p) { x = *p; }
    __device__ __forceinline__ void add_to(float (&acc)[1]) const { acc[0] += to_float(x); }
    __device__ __forceinline__ void store_plus(bf16* p, const float (&sum)[1]) const {
        p[0] = to_bf16(to_float(x) + sum[0]);
    }
};
}  // namespace ebfast

#endif  // KERNELS_COMMON_ENCODER_BACKWARD_BF16_ROWS_CUH
