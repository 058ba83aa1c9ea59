// last_block_reduce.cuh: column sums of per-block partial rows in the same launch as the row work,
// by "last block done" tickets: layernorm_backward's in two levels (versions 8, fp32, and 9, bf16;
// version 8's header tells the pattern and why it is correct and deterministic), and
// matmul_backward_bias 9's in one (took_last_ticket and sum_rows_in_order alone).
//
// Shared because the two versions reduce the same fp32 partial rows the same way; only the last
// step differs, how a column's total goes into the gradients (fp32: added; bf16: added to the
// widened value and rounded once), which each version passes in as a function.
//
// add4(a, b) -> a + b, componentwise, for float4.
//
// took_last_ticket(counter, expected) -> bool
//   After this block's stores, every thread fences, the block waits, and thread 0 takes a ticket
//   (atomicAdd) on *counter. True in every thread of the block iff the ticket was the last of
//   `expected`: every other block that tickets on this counter has then stored its data, visible
//   to this block's __ldcg loads (a second fence). Every thread of the block must call (barriers).
//
// sum_rows_in_order(rows, count, W, emit)
//   Sums `count` rows of W float4 (rows[r * W + e]) column by column, in row order:
//   ((row 0 + row 1) + row 2) + ..., and hands each column's total to emit(e, total). Thread t
//   takes columns t, t + blockDim.x, ...; eight rows' loads in flight before the first is added.
//
// reduce_partials_last_block(partial, team_sums, tickets, C, team_size, add_total)
//   partial holds gridDim.x rows of 2*C floats ([0, C) a block's dbias, [C, 2C) its dweight),
//   this block's row already stored. Teams of team_size consecutive blocks: the last block of
//   each team (tickets[team]) sums its team's rows in block order into the team's row of
//   team_sums (2*C floats a team); the last of those (tickets[teams]) sums the team rows in team
//   order and calls add_total(e, total) for each float4 e of the 2*C columns (e < C/4: dbias's
//   columns 4e..4e+3, the rest dweight's). tickets: teams + 1 ints, zero at the launch. Every
//   thread of the block must call; the others return having done nothing more. The order of the
//   additions depends only on gridDim.x and team_size: bitwise reproducible. C % 4 == 0.

#ifndef KERNELS_COMMON_LAST_BLOCK_REDUCE_CUH
#define KERNELS_COMMON_LAST_BLOCK_REDUCE_CUH

__device__ __forceinline__ float4 add4(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

__device__ __forceinline__ bool took_last_ticket(int* counter, int expected) {
    __threadfence();   // release: this thread's stores reach the whole GPU before what follows
    __syncthreads();   // ... and every thread of the block has fenced before the ticket
    int last = 0;
    if (threadIdx.x == 0) last = atomicAdd(counter, 1) == expected - 1;
    last = __syncthreads_or(last);  // a barrier that also tells every thread thread 0's verdict
    if (last) __threadfence();      // acquire: the loads that follow come after the ticket
    return last;
}

// __ldcg: the rows were written by other blocks, read them from L2, never from a stale L1 line.
// The adds stay in row order whatever the batch of eight.
template <class Emit>
__device__ __forceinline__ void sum_rows_in_order(const float* rows, int count, int W, Emit emit) {
    const float4* r4 = reinterpret_cast<const float4*>(rows);
    for (int e = threadIdx.x; e < W; e += blockDim.x) {
        float4 total = __ldcg(r4 + e);
        int r = 1;
        for (; r + 8 <= count; r += 8) {
            float4 v[8];
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = __ldcg(r4 + (size_t)(r + k) * W + e);
#pragma unroll
            for (int k = 0; k < 8; k++) total = add4(total, v[k]);
        }
        for (; r < count; r++) total = add4(total, __ldcg(r4 + (size_t)r * W + e));
        emit(e, total);
    }
}

// Team t is blocks [t * team_size, min(G, (t + 1) * team_size)). tickets[t] counts the team's
// finished blocks, tickets[teams] the finished teams; both zeroed by the memset before the launch.
template <class AddTotal>
__device__ __forceinline__ void reduce_partials_last_block(const float* partial, float* team_sums,
                                                           int* tickets, int C, int team_size,
                                                           AddTotal add_total) {
    int G = gridDim.x, teams = (G + team_size - 1) / team_size;
    int team = blockIdx.x / team_size, first = team * team_size;
    int members = min(team_size, G - first);
    int W = C / 2;  // float4 in a row of 2*C floats
    if (!took_last_ticket(&tickets[team], members)) return;  // another member sums this team

    // The team's last block: its rows, in block order, into the team's fp32 row.
    float4* team_row = reinterpret_cast<float4*>(team_sums) + (size_t)team * W;
    sum_rows_in_order(partial + (size_t)first * 2 * C, members, W,
                      [&](int e, float4 total) { team_row[e] = total; });
    if (!took_last_ticket(&tickets[teams], teams)) return;  // another team finishes the sum

    // The last team's last block: the team rows, in team order, into the gradients.
    sum_rows_in_order(team_sums, teams, W, add_total);
}

#endif  // KERNELS_COMMON_LAST_BLOCK_REDUCE_CUH
