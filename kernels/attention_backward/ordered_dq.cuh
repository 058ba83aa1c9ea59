// ordered_dq.cuh: attention_backward 14 and 15's hand-over between the key blocks of a head, by
// which dQ is summed in one fixed order (and, in 15, D reaches the blocks that need it): GPU-scope
// counters (tickets) and the two steps of a query tile's dQ that use them.
//
// The tickets. The writer stores its data, passes a barrier (so every thread's stores are before
// it) and one thread adds 1 with release; the reader reads the count and, once it shows its turn,
// reads the data from the L2 (cp.async.cg or ld.global.cg), which the release put there before the
// count moved.
// ticket_relaxed(p): the count as the L2 holds it (relaxed, GPU scope: a load that returns
//   whenever its register is first used, so it can be issued early and looked at later).
// ticket_acquire(p): the same with acquire, ordered before every later load of this thread. ptxas
//   makes it a load plus an L1 invalidation that waits for it: a full L2 round trip, so readers
//   use it only to re-poll a count that was still short.
// ticket_release(p): count += 1, after (release, GPU scope) every store this thread has seen, the
//   block's through its barrier.
// Using the data after a relaxed read alone relies on the read's control dependency and on reading
// the L2: the pattern of the CUDA samples' last-block reductions, formally a race in the PTX
// memory model (attention_backward 14's header says what the acquire would cost instead).
//
// The tile's dQ (a 128-query tile, 64 channels; each of the 256 threads its wgmma fragment rows).
// fetch_running_sum(sSum, dq_head, C, T, q0, any)
//   The running fp32 sum of the tile's rows (rows q0 .. q0 + 127 of dq_head, C apart) into sSum
//   ([128][ORDERED_DQ_SP] floats), 16 bytes a copy, zeros past T; cp.async, committed.
// hand_over_dq(dqa, sum, added, last, q0, T, wg, warp, g, t, dqkv, b, h, rs, dq_head, C, scale)
//   Our share (dqa: this thread's accumulator fragment of queries 64 wg .. 64 wg + 63) plus the
//   running sum (if `added`), then, for rows below T, either the sum back to dq_head (fp32,
//   __stcg) or, from the last key block (`last`), bf16(scale * sum) into head h's dQ in dqkv
//   (batch b, rows rs apart; 64-channel heads).

#ifndef KERNELS_ATTENTION_BACKWARD_ORDERED_DQ_CUH
#define KERNELS_ATTENTION_BACKWARD_ORDERED_DQ_CUH

#include "bf16.cuh"
#include "mma.cuh"  // cp_async_16, cp_async_commit, pack_bf16x2

__device__ __forceinline__ int ticket_relaxed(const int* p) {
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ int ticket_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void ticket_release(int* p) {
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(p) : "memory");
}

#define ORDERED_DQ_SP 72  // floats a row of the running sum in shared memory (64 + 8)

__device__ __forceinline__ void fetch_running_sum(uint32_t sSum, const float* dq_head, int C, int T, int q0,
                                                  const float* any) {
#pragma unroll
    for (int c = 0; c < 128 * 64 / 4 / 256; c++) {
        const int chunk = threadIdx.x + 256 * c, r = chunk / 16, col = 4 * (chunk % 16);
        const bool ok = q0 + r < T;
        cp_async_16(sSum + (r * ORDERED_DQ_SP + col) * 4, ok ? dq_head + (size_t)(q0 + r) * C + col : any, ok);
    }
    cp_async_commit();
}

__device__ __forceinline__ void hand_over_dq(const float (&dqa)[8][4], const float* sum, bool added, bool last,
                                             int q0, int T, int wg, int warp, int g, int t, bf16* dqkv, int b, int h,
                                             size_t rs, float* dq_head, int C, float scale) {
    const int r0 = 64 * wg + 16 * warp + g;  // tile row of e = 0, 1 (e = 2, 3: + 8)
#pragma unroll
    for (int n = 0; n < 8; n++) {
        const int ch = 8 * n + 2 * t;
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int r = r0 + 8 * hr, qr = q0 + r;
            float x = dqa[n][2 * hr], y = dqa[n][2 * hr + 1];
            if (added) {
                const float2 before = *reinterpret_cast<const float2*>(sum + r * ORDERED_DQ_SP + ch);
                x += before.x;
                y += before.y;
            }
            if (qr < T) {
                if (last)
                    *reinterpret_cast<uint32_t*>(dqkv + ((size_t)b * T + qr) * rs + (size_t)h * 64 + ch) =
                        pack_bf16x2(scale * x, scale * y);
                else
                    __stcg(reinterpret_cast<float2*>(dq_head + (size_t)qr * C + ch), make_float2(x, y));
            }
        }
    }
}

#endif  // KERNELS_ATTENTION_BACKWARD_ORDERED_DQ_CUH
