/*
title = "Deterministic and balanced: fixed segments of the sorted positions, float4 channels"
builds_on = 2
changed = "The sort is version 2's (it also records each slot's token). The sums no longer follow buckets: the sorted slots are cut into fixed segments of 8; a block per segment sums each run of equal tokens in it with float4 loads, adding a bucket that lies inside the segment straight into dwte and parking the partial sums of buckets that cross a segment edge; a last kernel adds those partials in segment order."
why = """
In version 2 one block sums a whole bucket, serially per channel: a frequent token (in text,
newline or comma can be 5-10% of a batch) leaves one block summing hundreds of rows while the
rest of the GPU idles. Cutting the sorted slots into segments of 8 bounds every block's work,
whatever the token frequencies, and a bucket of k positions is summed by k/8 blocks in parallel.
The order of every float sum is still fixed (rows in position order within a segment, then the
segments' partials in order), so the bits are reproducible; they differ from version 2's
because the grouping differs. Channels move as float4 (128-bit loads and stores, a quarter of
the instructions), which needs C % 4 == 0. Each segment has at most two runs whose bucket
crosses its edges (its first and its last), so the partials need two rows of C per segment.
"""
preconditions = ["C % 4 == 0"]
block_sizes = [32, 64, 128, 256]

[scratch]
counts = { size = "V", dtype = "i32" }
starts = { size = "V + 1", dtype = "i32" }   # bucket starts; starts[V] = the number of valid tokens
arrival = { size = "N", dtype = "i32" }
unsorted = { size = "N", dtype = "i32" }
sorted = { size = "N", dtype = "i32" }
sorted_token = { size = "N", dtype = "i32" }
partial = "cdiv(N, 8) * 2 * C"

[[launch]]
memset = "counts"

[[launch]]
kernel = "count_tokens"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["counts", "arrival", "inp", "N", "V"]

[[launch]]
kernel = "scan_counts"
grid = "1"
block = "1024"
args = ["starts", "counts", "V"]

[[launch]]
kernel = "scatter_positions"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["unsorted", "starts", "arrival", "inp", "N", "V"]

[[launch]]
kernel = "sort_buckets"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["sorted", "sorted_token", "unsorted", "starts", "counts", "inp", "N", "V"]

[[launch]]
kernel = "sum_segments"
grid = ["cdiv(N, 8) + T", "cdiv(C // 4, block_size)"]
block = "block_size"
args = ["dwte", "dwpe", "partial", "dout", "sorted", "sorted_token", "starts", "counts", "B", "T", "C", "V", "8"]

[[launch]]
kernel = "combine_segments"
grid = ["cdiv(N, 8)", "cdiv(C // 4, block_size)"]
block = "block_size"
args = ["dwte", "partial", "sorted_token", "starts", "counts", "N", "C", "V", "8"]
*/

#include "bucket_sort.cuh"  // count_tokens, scan_counts, scatter_positions, sort_position

extern "C" __global__ void sort_buckets(int* sorted, int* sorted_token, const int* unsorted,
                                        const int* starts, const int* counts, const int* inp,
                                        int N, int V) {
    sort_position<true>(sorted, sorted_token, unsorted, starts, counts, inp, N, V);
}

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

// Blocks 0..nseg-1: segment x holds sorted slots [x*S, min(x*S + S, total)); blocks nseg..: dwpe
// rows. Each thread owns one float4 of channels (blockIdx.y picks the range).
// Partial slot of a run that crosses the segment's edges: 0 if it starts at the segment's start,
// else 1 (it is then the segment's last run). combine_segments reads them with the same rule.
extern "C" __global__ void sum_segments(float* dwte, float* dwpe, float* partial, const float* dout,
                                        const int* sorted, const int* sorted_token,
                                        const int* starts, const int* counts, int B, int T, int C,
                                        int V, int S) {
    int C4 = C / 4;
    int c4 = blockIdx.y * blockDim.x + threadIdx.x;
    if (c4 >= C4) return;
    int N = B * T, nseg = (N + S - 1) / S;
    const float4* dout4 = reinterpret_cast<const float4*>(dout);
    int x = blockIdx.x;
    if (x >= nseg) {
        int t = x - nseg;
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int b = 0; b < B; b++) acc = add4(acc, dout4[((size_t)b * T + t) * C4 + c4]);
        float4* row = reinterpret_cast<float4*>(dwpe + (size_t)t * C) + c4;
        *row = add4(*row, acc);
        return;
    }
    int seg_start = x * S, seg_end = min(seg_start + S, starts[V]);
    float4* partial4 = reinterpret_cast<float4*>(partial);
    for (int s = seg_start; s < seg_end;) {
        int token = sorted_token[s];
        int b0 = starts[token], b1 = b0 + counts[token];
        int r1 = min(b1, seg_end);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int j = s; j < r1; j++) acc = add4(acc, dout4[(size_t)sorted[j] * C4 + c4]);
        if (b0 >= seg_start && b1 <= seg_end) {  // the whole bucket is here: add it now
            float4* row = reinterpret_cast<float4*>(dwte + (size_t)token * C) + c4;
            *row = add4(*row, acc);
        } else {
            int which = s == seg_start ? 0 : 1;
            partial4[((size_t)x * 2 + which) * C4 + c4] = acc;
        }
        s = r1;
    }
}

// A bucket crossing segment edges is finished by the segment holding its first slot: its own
// partial, then slot 0 of each following segment the bucket reaches, in order.
extern "C" __global__ void combine_segments(float* dwte, const float* partial,
                                            const int* sorted_token, const int* starts,
                                            const int* counts, int N, int C, int V, int S) {
    int C4 = C / 4;
    int c4 = blockIdx.y * blockDim.x + threadIdx.x;
    if (c4 >= C4) return;
    int x = blockIdx.x;
    int total = starts[V];
    int seg_start = x * S, seg_end = min(seg_start + S, total);
    if (seg_start >= total) return;
    int token = sorted_token[seg_end - 1];  // only the last run can leave through the far edge
    int b0 = starts[token], b1 = b0 + counts[token];
    if (b0 < seg_start || b1 <= seg_end) return;  // not a bucket that starts here and crosses out
    const float4* partial4 = reinterpret_cast<const float4*>(partial);
    float4 acc = partial4[((size_t)x * 2 + (b0 == seg_start ? 0 : 1)) * C4 + c4];
    for (int y = x + 1; y * S < b1; y++) acc = add4(acc, partial4[(size_t)y * 2 * C4 + c4]);
    float4* row = reinterpret_cast<float4*>(dwte + (size_t)token * C) + c4;
    *row = add4(*row, acc);
}
