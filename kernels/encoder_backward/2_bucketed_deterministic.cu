/*
title = "Deterministic: bucket the positions by token, then sum each bucket in position order"
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

extern "C" __global__ void count_tokens(int* counts, int* arrival, const int* inp, int N, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int token = inp[i];
    // Integer atomics: the counts are exact whatever the order; only `arrival` depends on it.
    arrival[i] = (token >= 0 && token < V) ? atomicAdd(counts + token, 1) : -1;
}

// Exclusive prefix sum over the block (blockDim.x a multiple of 32); *total gets the sum.
__device__ int block_exclusive_scan(int x, int* total) {
    __shared__ int warp_prefix[32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, warps = blockDim.x / 32;
    int incl = x;
    for (int o = 1; o < 32; o *= 2) {
        int y = __shfl_up_sync(0xffffffff, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == 31) warp_prefix[wid] = incl;
    __syncthreads();
    if (wid == 0) {
        int w = lane < warps ? warp_prefix[lane] : 0;
        int wincl = w;
        for (int o = 1; o < 32; o *= 2) {
            int y = __shfl_up_sync(0xffffffff, wincl, o);
            if (lane >= o) wincl += y;
        }
        if (lane < warps) warp_prefix[lane] = wincl - w;
        if (lane == 31) *total = wincl;
    }
    __syncthreads();
    return warp_prefix[wid] + incl - x;
}

// One block: each thread owns a contiguous chunk of the V counts (its loads are independent, so
// they are all in flight at once), the block scans the chunk totals, each thread writes its chunk.
extern "C" __global__ void scan_counts(int* starts, const int* counts, int V) {
    __shared__ int total;
    int chunk = (V + blockDim.x - 1) / blockDim.x;
    int lo = min((int)threadIdx.x * chunk, V), hi = min(lo + chunk, V);
    int sum = 0;
    for (int j = lo; j < hi; j++) sum += counts[j];
    int run = block_exclusive_scan(sum, &total);
    for (int j = lo; j < hi; j++) {
        starts[j] = run;
        run += counts[j];
    }
    if (threadIdx.x == 0) starts[V] = total;
}

extern "C" __global__ void scatter_positions(int* unsorted, const int* starts, const int* arrival,
                                             const int* inp, int N, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int token = inp[i];
    if (token < 0 || token >= V) return;
    unsorted[starts[token] + arrival[i]] = i;
}

// A position's rank in its bucket is how many of the bucket's positions are smaller: writing it
// there sorts every bucket by position, whatever order the atomics gave.
extern "C" __global__ void sort_buckets(int* sorted, const int* unsorted, const int* starts,
                                        const int* counts, const int* inp, int N, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int token = inp[i];
    if (token < 0 || token >= V) return;
    const int* bucket = unsorted + starts[token];
    int k = counts[token], rank = 0;
    for (int j = 0; j < k; j++) rank += bucket[j] < i;
    sorted[starts[token] + rank] = i;
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
