// tickets.cuh: GPU-scope counters by which the blocks of one launch hand data to each other
// (attention_backward 14 and 15: dQ's running sums, and D). The writer stores its data, passes a
// barrier (so every thread's stores are before it) and one thread adds 1 with release; the reader
// reads the count and, once it shows its turn, reads the data from the L2 (cp.async.cg or
// ld.global.cg), which the release put there before the count moved.
//
// ticket_relaxed(p): the count as the L2 holds it (relaxed, GPU scope: a load that returns
//   whenever its register is first used, so it can be issued early and looked at later).
// ticket_acquire(p): the same with acquire, ordered before every later load of this thread. ptxas
//   makes it a load plus an L1 invalidation that waits for it: a full L2 round trip, so readers
//   use it only to re-poll a count that was still short.
// ticket_release(p): count += 1, after (release, GPU scope) every store this thread has seen, the
//   block's through its barrier.
//
// Using the data after a relaxed read alone relies on the read's control dependency and on reading
// the L2: the pattern of the CUDA samples' last-block reductions, formally a race in the PTX
// memory model (attention_backward 14's header says what the acquire would cost instead).

#ifndef KERNELS_ATTENTION_BACKWARD_TICKETS_CUH
#define KERNELS_ATTENTION_BACKWARD_TICKETS_CUH

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

#endif  // KERNELS_ATTENTION_BACKWARD_TICKETS_CUH
