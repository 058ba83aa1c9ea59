/*
title = "A block per row, 128-bit loads, (max, sum) pairs merged across the block"
builds_on = 1
changed = "A whole block shares a row and reads it as float4 (four loads in flight per thread); the lanes' pairs merge by shuffles, then across warps through shared memory; the gradient pass reads with __ldcs and writes with __stcs."
why = """
Version 1 gives a 200 KB row to one warp: 1,570 serial 4-byte loads per lane, twice. A block of
up to 1024 threads spreads it to ~12 float4 per thread, each instruction moves 16 bytes, and four
independent loads per thread are in flight before any is used. Padded rows (Vp % 4 == 0, as the
trainer's Vp = 50304) keep every row 16-byte aligned; the float4 holding column V - 1 is masked
per component (padding is skipped in the sum and written as 0). The second pass re-reads the row
while it is still in L2 (one 200 KB row per block in flight), marked evict-first (__ldcs), and
the gradient goes out with streaming stores. Every element is read and rewritten by the same
thread in both passes, so the in-place update cannot race. A logits pointer that is not 16-byte
aligned (never for cudaMalloc'd buffers) takes a scalar path: correct, slower.
"""
preconditions = ["Vp % 4 == 0"]
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "fused_classifier2"
grid = "N"
block = "block_size"
args = ["logits", "losses", "targets", "dloss", "N", "V", "Vp"]
*/
#include <cfloat>
#include <cstdint>
#include "online_softmax.cuh"  // online_update/4, block_online_merge

#define UNROLL 4

// Column `col` of the row holds x: fold it into the running pair if it is a real column, and
// remember it if it is the target's.
__device__ __forceinline__ void fold(float& m, float& s, float& x_target, bool& owner, float x,
                                     int col, int V, int target) {
    if (col < V) online_update(m, s, x);
    if (col == target) {
        x_target = x;
        owner = true;
    }
}

// Four consecutive columns from `col`: the usual case (all real) costs five exps, not eight.
__device__ __forceinline__ void fold4(float& m, float& s, float& x_target, bool& owner, float4 v,
                                      int col, int V, int target) {
    if (col + 3 < V) {
        online_update4(m, s, v);
        unsigned c = (unsigned)(target - col);  // target < 0 wraps to a huge value
        if (c < 4u) {
            x_target = c == 0 ? v.x : c == 1 ? v.y : c == 2 ? v.z : v.w;
            owner = true;
        }
    } else {  // the float4 that holds column V - 1, or padding
        fold(m, s, x_target, owner, v.x, col, V, target);
        fold(m, s, x_target, owner, v.y, col + 1, V, target);
        fold(m, s, x_target, owner, v.z, col + 2, V, target);
        fold(m, s, x_target, owner, v.w, col + 3, V, target);
    }
}

__device__ __forceinline__ float grad(float x, int col, float m, float inv, float dloss, int V, int target) {
    if (col >= V) return 0.0f;  // padding
    return (expf(x - m) * inv - (col == target ? 1.0f : 0.0f)) * dloss;
}

extern "C" __global__ void fused_classifier2(float* logits, float* losses, const int* targets,
                                             float dloss, int N, int V, int Vp) {
    int row = blockIdx.x, tid = threadIdx.x, nt = blockDim.x;
    float* x = logits + (size_t)row * Vp;
    int t = targets[row];
    int target = (t >= 0 && t < V) ? t : -1;  // -1 matches no column
    int n4 = ((uintptr_t)x & 15) == 0 ? Vp / 4 : 0;  // float4 [0, n4), then scalars [4*n4, Vp)
    float4* x4 = reinterpret_cast<float4*>(x);

    float m = -FLT_MAX, s = 0.0f, x_target = 0.0f;
    bool owner = false;
    for (int base = tid; base < n4; base += UNROLL * nt) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {  // all loads first: UNROLL requests in flight
            int i = base + u * nt;
            v[u] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int i = base + u * nt;
            if (i < n4) fold4(m, s, x_target, owner, v[u], 4 * i, V, target);
        }
    }
    for (int col = 4 * n4 + tid; col < Vp; col += nt) fold(m, s, x_target, owner, x[col], col, V, target);

    block_online_merge(m, s);  // its barriers also order every read above before every write below
    if (owner) losses[row] = logf(s) + m - x_target;
    if (target < 0 && tid == 0) losses[row] = __int_as_float(0x7fc00000);  // NaN: bad target
    float inv = 1.0f / s;

    for (int base = tid; base < n4; base += UNROLL * nt) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int i = base + u * nt;
            v[u] = i < n4 ? __ldcs(x4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            int i = base + u * nt;
            if (i < n4) {
                int col = 4 * i;
                __stcs(x4 + i, make_float4(grad(v[u].x, col, m, inv, dloss, V, target),
                                           grad(v[u].y, col + 1, m, inv, dloss, V, target),
                                           grad(v[u].z, col + 2, m, inv, dloss, V, target),
                                           grad(v[u].w, col + 3, m, inv, dloss, V, target)));
            }
        }
    }
    for (int col = 4 * n4 + tid; col < Vp; col += nt) x[col] = grad(x[col], col, m, inv, dloss, V, target);
}
