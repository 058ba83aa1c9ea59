/*
title = "Deterministic: bucket the positions by token, then sum each bucket in position order"
builds_on = 1
changed = "No float atomics: a counting sort groups the positions by token (in increasing position order), then one block per distinct token sums its dout rows in that fixed order and adds the total to dwte once; dwpe rows sum their B positions in order."
why = """
Version 1's atomics make the result depend on which colliding add lands first. Here every float
sum has a fixed order, so dwte and dwpe have the same bits on every run (and, unlike atomics
into a row, each dwte row is read and written exactly once). The price is a small sort of the
B*T tokens on the device, all in integers, whose atomics give exact results in any order:
  1. count the positions of each token (integer atomics), each position noting its arrival slot;
  2. one block scans the counts into bucket starts;
  3. scatter each position into its bucket at its arrival slot (an arbitrary order);
  4. rank each position among its bucket's by position, and write it there: buckets now sorted;
  5. a block per bucket head sums the bucket's dout rows (threads over channels, coalesced) and
     adds to dwte; T more blocks sum dwpe's rows over b.
Step 4 costs k comparisons for each of a bucket's k positions: nothing for ordinary text, and
even a batch of 8192 copies of one token is 67M broadcast loads, tens of microseconds. Step 5
sums a bucket's k rows serially per channel: a very frequent token makes its block the tail.
"""
block_sizes = [64, 128, 256, 512, 1024]

[scratch]
counts = { size = "V", dtype = "i32" }
starts = { size = "V + 1", dtype = "i32" }   # bucket starts; starts[V] = the number of valid tokens
arrival = { size = "N", dtype = "i32" }
unsorted = { size = "N", dtype = "i32" }
sorted = { size = "N", dtype = "i32" }

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
block = "1024"  # one block does the whole scan: as many threads as a block can have
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
args = ["sorted", "unsorted", "starts", "counts", "inp", "N", "V"]

[[launch]]
kernel = "sum_buckets"
grid = ["N + T", "cdiv(C, block_size)"]
block = "block_size"
args = ["dwte", "dwpe", "dout", "inp", "sorted", "starts", "counts", "B", "T", "C", "V"]
*/

#include "bucket_sort.cuh"  // count_tokens, scan_counts, scatter_positions, sort_position

extern "C" __global__ void sort_buckets(int* sorted, const int* unsorted, const int* starts,
                                        const int* counts, const int* inp, int N, int V) {
    sort_position<false>(sorted, nullptr, unsorted, starts, counts, inp, N, V);
}

// Blocks 0..N-1: bucket slots (only a bucket's first slot does work); blocks N..N+T-1: dwpe rows.
// blockIdx.y picks a range of block_size channels.
extern "C" __global__ void sum_buckets(float* dwte, float* dwpe, const float* dout, const int* inp,
                                       const int* sorted, const int* starts, const int* counts,
                                       int B, int T, int C, int V) {
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    int N = B * T;
    int x = blockIdx.x;
    if (x < N) {
        if (x >= starts[V]) return;  // past the last valid token
        int token = inp[sorted[x]];
        if (starts[token] != x || c >= C) return;  // not this bucket's head
        int k = counts[token];
        const int* pos = sorted + x;
        float acc = 0.0f;
        for (int j = 0; j < k; j++) acc += dout[(size_t)pos[j] * C + c];
        dwte[(size_t)token * C + c] += acc;
    } else {
        int t = x - N;
        if (c >= C) return;
        float acc = 0.0f;
        for (int b = 0; b < B; b++) acc += dout[((size_t)b * T + t) * C + c];
        dwpe[(size_t)t * C + c] += acc;
    }
}
