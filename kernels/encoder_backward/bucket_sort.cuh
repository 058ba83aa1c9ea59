// bucket_sort.cuh: encoder_backward's counting sort of the positions by token (versions 2, 3 and 4):
// integers only, so its results are exact whatever order its atomics land in. Launched in order:
//   memset counts to 0;
//   count_tokens       cdiv(N, block) blocks: counts[token]++, each position noting its arrival slot;
//   scan_counts        one block of 1024: starts[v] = sum of counts below v, starts[V] = the total;
//   scatter_positions  cdiv(N, block) blocks: each position into its bucket at its arrival slot;
//   the version's sort_buckets, which calls sort_position (below): each position's rank among its
//   bucket's by position is where it goes, so every bucket ends sorted by position.
// Positions whose token lies outside [0, V) are left out of every bucket.
#ifndef ENCODER_BACKWARD_BUCKET_SORT_CUH
#define ENCODER_BACKWARD_BUCKET_SORT_CUH

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
// there sorts every bucket by position, whatever order the atomics gave. With TOKENS, the slot's
// token goes beside it in sorted_token (saving the sums a dependent load).
template <bool TOKENS>
__device__ __forceinline__ void sort_position(int* sorted, int* sorted_token, const int* unsorted,
                                              const int* starts, const int* counts, const int* inp,
                                              int N, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    int token = inp[i];
    if (token < 0 || token >= V) return;
    const int* bucket = unsorted + starts[token];
    int k = counts[token], rank = 0;
    for (int j = 0; j < k; j++) rank += bucket[j] < i;
    sorted[starts[token] + rank] = i;
    if constexpr (TOKENS) sorted_token[starts[token] + rank] = token;
}

#endif  // ENCODER_BACKWARD_BUCKET_SORT_CUH
