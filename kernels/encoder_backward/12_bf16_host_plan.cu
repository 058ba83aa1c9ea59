/*
title = "bf16, the plan made once on the host: no scan, and the rows of lone positions added by reductions in L2"
builds_on = 11
precision = "bf16"
changed = "Versions 8 to 11 learn inside the kernel which positions share a token: every block scans all N ids before its first dwte update, and that scan and the round trips around it set their floor (~0.87x the copy, version 11's header). Here the host sorts the batch's ids once (references/encoder_backward.py: encoder_backward_plan, vectorised NumPy, ~1-3 ms for 8K-32K ids; llm.c's trainer does the same sort on its CPU) and the kernel is given, per position, its role: alone with its token, leader of a pair (with the partner's position), leader of a segment of a larger group (with the segment's record), or none of these. A thread owns (t, 8 channels) and walks b as version 8 does, summing dwpe in fp32 and rounding once. A lone position, 85% of them at the default sizes, adds its dout chunk into its dwte chunk with one 16-byte bf16x2 reduction (red.global.add.noftz.v4.bf16x2, sm_90): L2 does the read-add-write, one rounding, and no thread waits for the dwte row. A leader sums its group's rows in fp32 and rounds once; a group longer than 16 positions is split into segments whose fp32 partial sums the last segment to finish adds, in segment order."
why = """
Versions 8 to 11 learn inside the kernel which positions share a token, and that scan with its
round trips sets their floor. Here the host makes the plan once, and every dwte row has exactly
one writer in the grid: its lone position (one reduction: the same single rounding as a load, add
and store, so the tolerance holds, while bf16 atomics from several positions of one row, rounding
at each, would not: family.toml), or its group's leader (a load, the sum, one store), or, for a
group of more than 16 positions, the segment whose ticket is the last (it adds the segments' fp32
partial sums in segment order). So the result is deterministic, with no scan and no coordination
but the tickets of long groups.

What a thread waits for: its ids and roles (4 bytes a position, one address a warp: a DRAM round
trip) beside its dout chunks, then nothing for lone positions (the reduction goes to L2, and the
line was asked of L2 by a prefetch as soon as the id was in, as in version 10). A pair's leader
loads its partner's dout chunk and the dwte chunk together (one round trip), then stores. A
segment's leader reads its record (one round trip), then the others' chunks and the dwte chunk.

The plan costs the kernel 4 bytes a position more than the family's byte count (the roles) plus
the records of groups of three or more. In the trainer the plan of each micro-step is made while
the GPU runs the step before, and uploaded with the tokens. Registers decided the launch bounds:
(256, 2), 128 registers and no spills; at 80 registers the spills around the leader's call cost
more than anything else. Tickets: a long group's counters live in the plan (zeros as the host
writes them); the last segment sets its counter back to zero, so a launch may be repeated with the
same plan (the bench does). The partial sums go through a scratch of C floats per slot.

The prediction and the measurements: results/notes/encoder_backward.md.
"""
block_sizes = [128, 256]  # launch bounds (256, 2): 128 registers, no spills
preconditions = ["C % 8 == 0"]  # 16-byte units

[scratch]
partial = "(N // 8 + 1) * C"   # fp32 partial sums of long groups' segments (partial_slots in the reference)

[[launch]]
kernel = "encoder_backward12"
grid = "cdiv(T * (C // 8), block_size)"
block = "block_size"
args = ["dwte", "dwpe", "dout", "inp", "role", "plan", "partial", "B", "T", "C", "V"]

[[emulate]]
runs = ["bs=128 seed=0 PRIORITY", "bs=256 seed=1 PRIORITY order=5"]
*/
#include "bf16.cuh"         // Pack8, load8, store8, to_float, to_bf16
#include "l2_prefetch.cuh"  // prefetch_l2_line: a lone position's dwte line asked of L2 early

namespace eb12 {

constexpr int BGROUP = 8;     // positions a thread loads before it uses any (B = 8: all of them)
constexpr int RECORD = 8;     // a segment record's header words (references/encoder_backward.py)

struct Acc {
    float v[8];
};

__device__ __forceinline__ void add_row(Acc& a, const Pack8& x) {
#pragma unroll
    for (int i = 0; i < 8; i++) a.v[i] += to_float(x.v[i]);
}

// dwte[p..p+7] += x, one rounding, in L2: a 16-byte reduction on sm_90; elsewhere (and on the
// CPU emulator) four bf16x2 atomics, each also rounding once. A lone position is its row's only
// writer, so either is the same as a load, an add and a store.
__device__ __forceinline__ void reduce8(bf16* p, const Pack8& x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned* w = reinterpret_cast<const unsigned*>(&x);
    asm volatile("red.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};"
                 ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
#else
    const __nv_bfloat162* w = reinterpret_cast<const __nv_bfloat162*>(&x);
    __nv_bfloat162* q = reinterpret_cast<__nv_bfloat162*>(p);
#pragma unroll
    for (int i = 0; i < 4; i++) atomicAdd(q + i, w[i]);
#endif
}

// dst = round(dst + a): the group's sum added to its dwte chunk (one load, one store).
__device__ __forceinline__ void add_store(bf16* dst, const Acc& a) {
    Pack8 cur = load8(dst), out;
#pragma unroll
    for (int i = 0; i < 8; i++) out.v[i] = to_bf16(to_float(cur.v[i]) + a.v[i]);
    store8(dst, out);
}

// A segment's leader: its row (own) plus the rows of the record's others, in the record's order;
// then the dwte update, directly (one segment) or through the partial sums and the group's
// ticket for this unit (the last segment to finish adds all of them, in segment order).
__device__ __noinline__ void lead_segment(bf16* __restrict__ dwte, const bf16* __restrict__ dout, int* plan,
                                          float* __restrict__ partial, int4 own_bits, int rec, int tok,
                                          int unit, int C) {
    int c = unit * 8;
    Pack8 own;  // by value in registers: a reference would put the caller's chunks in local memory
    *reinterpret_cast<int4*>(&own) = own_bits;
    int4 h = *reinterpret_cast<const int4*>(plan + rec);          // others, counters, slot, first slot
    int segments = plan[rec + 4];
    Acc a;
#pragma unroll
    for (int i = 0; i < 8; i++) a.v[i] = to_float(own.v[i]);
    const int* pos = plan + rec + RECORD;
    for (int i0 = 0; i0 < h.x; i0 += 4) {  // four rows in flight (the list is padded to 4)
        int4 p4 = *reinterpret_cast<const int4*>(pos + i0);
        int p[4] = {p4.x, p4.y, p4.z, p4.w};
        Pack8 r[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (i0 + j < h.x) r[j] = load8(dout + (size_t)p[j] * C + c);
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (i0 + j < h.x) add_row(a, r[j]);
    }
    bf16* dst = dwte + (size_t)tok * C + c;
    if (h.y < 0) {  // a group of one segment
        add_store(dst, a);
        return;
    }
    float* mine = partial + (size_t)h.z * C + c;
    reinterpret_cast<float4*>(mine)[0] = make_float4(a.v[0], a.v[1], a.v[2], a.v[3]);
    reinterpret_cast<float4*>(mine)[1] = make_float4(a.v[4], a.v[5], a.v[6], a.v[7]);
    __threadfence();  // the partial sum is visible before the ticket says so
    int* ticket = plan + h.y + unit;
    if (atomicAdd(ticket, 1) != segments - 1) return;
    __threadfence();  // the last: every other segment's partial sum is visible
    Acc total;
#pragma unroll
    for (int i = 0; i < 8; i++) total.v[i] = 0.0f;
    for (int s = 0; s < segments; s++) {
        const float4* q = reinterpret_cast<const float4*>(partial + (size_t)(h.w + s) * C + c);
        float4 lo = __ldcg(q), hi = __ldcg(q + 1);  // from L2: another SM wrote them
        total.v[0] += lo.x; total.v[1] += lo.y; total.v[2] += lo.z; total.v[3] += lo.w;
        total.v[4] += hi.x; total.v[5] += hi.y; total.v[6] += hi.z; total.v[7] += hi.w;
    }
    add_store(dst, total);
    atomicExch(ticket, 0);  // the plan as it was: a repeated launch finds its tickets at zero
}

}  // namespace eb12

extern "C" __global__ void __launch_bounds__(256, 2)
encoder_backward12(bf16* __restrict__ dwte, bf16* __restrict__ dwpe, const bf16* __restrict__ dout,
                   const int* __restrict__ inp, const int* __restrict__ role, int* plan,
                   float* __restrict__ partial, int B, int T, int C, int V) {
    using namespace eb12;
    int units = C / 8;
    int u = blockIdx.x * blockDim.x + threadIdx.x;
    if (u >= T * units) return;
    int t = u / units, unit = u % units, c = unit * 8;
    int N = B * T;
    bf16* pe_at = dwpe + (size_t)t * C + c;
    Pack8 pe = load8(pe_at);  // in flight with the first group's loads
    Acc sum;
#pragma unroll
    for (int i = 0; i < 8; i++) sum.v[i] = 0.0f;
    for (int b0 = 0; b0 < B; b0 += BGROUP) {
        int tok[BGROUP], r[BGROUP];
        Pack8 d[BGROUP];
#pragma unroll
        for (int j = 0; j < BGROUP; j++) {  // every load first
            tok[j] = -1;
            r[j] = -2;
            if (b0 + j < B) {
                int n = (b0 + j) * T + t;  // 32-bit: N * C < 2^31 (family precondition)
                tok[j] = __ldg(inp + n);   // one address a time step: a broadcast
                r[j] = __ldg(role + n);
                d[j] = load8(dout + (size_t)n * C + c);
            }
        }
#pragma unroll
        for (int j = 0; j < BGROUP; j++)  // the ids land before the dout chunks: start the lines
            if (r[j] != -2 && (unsigned)tok[j] < (unsigned)V) prefetch_l2_line(dwte + (size_t)tok[j] * C + c);
#pragma unroll
        for (int j = 0; j < BGROUP; j++)  // dwpe's sum, in order of b
            if (b0 + j < B) add_row(sum, d[j]);
#pragma unroll
        for (int j = 0; j < BGROUP; j++) {
            if ((unsigned)tok[j] >= (unsigned)V || r[j] == -2) continue;  // not this position's row to add
            bf16* dst = dwte + (size_t)tok[j] * C + c;
            if (r[j] == -1) {
                reduce8(dst, d[j]);
            } else if (r[j] < N) {  // a pair: own row, then the partner's
                Pack8 other = load8(dout + (size_t)r[j] * C + c);
                Acc a;
#pragma unroll
                for (int i = 0; i < 8; i++) a.v[i] = to_float(d[j].v[i]);
                add_row(a, other);
                add_store(dst, a);
            } else {
                lead_segment(dwte, dout, plan, partial, *reinterpret_cast<const int4*>(&d[j]), r[j] - N, tok[j],
                             unit, C);
            }
        }
    }
    Pack8 out;
#pragma unroll
    for (int i = 0; i < 8; i++) out.v[i] = to_bf16(to_float(pe.v[i]) + sum.v[i]);
    store8(pe_at, out);
}
