/*
title = "bf16 wgmma flash backward, dQ summed in a fixed order through L2: deterministic, no atomics, no dQ pass"
builds_on = 13
precision = "bf16"
deterministic = true  # each dQ element is summed over key blocks in one fixed order
changed = """
Version 13 with its dQ atomics replaced by an ordered hand-over between the key blocks of a head:
* Query tile i gets its dQ shares from key blocks i, i - 1, ..., 0 in that order. Key block kb
  visits tiles kb, kb + 1, ... in ascending order, so it reaches tile i one step after key block
  kb + 1 did: when each block's turn comes, the block before it has (nearly always) finished.
* A ticket a (head, query tile) counts the shares written. Key block kb reads tile i's ticket as
  the tile's first products start (a relaxed load, not waited for), looks at it once dV and dK
  are issued, and polls with ld.acquire.gpu only while the count is short of i - kb; then it
  fetches the running fp32 sum (cp.async.cg: L2 to shared memory) and adds its own share:
  - the first (kb = i, its diagonal tile) stores its share without reading anything;
  - the last (kb = 0) writes bf16(scale * sum) straight into dqkv;
  - any other stores the fp32 sum back, and after the block's next barrier one thread adds 1 to
    the count (red.release.gpu).
* So there is no zeroed accumulator (the first share is a store) and no dQ conversion pass, and
  the sum runs in one order: the result is the same bits every run.
* The grid's key blocks run from the last to the first (blockIdx.x = key blocks - 1 - kb): a block
  only waits on blocks launched before it, which the hardware schedules first, so the waits end.
"""
why = """
Version 13 paid for dQ three times: a pass zeroing the fp32 accumulator, the L2's atomic units
summing 57 M fp32 additions, and a pass converting the sums to bf16. Ordered shares replace all
three with plain loads and stores the L2 serves, and make the backward deterministic.
What the hand-over costs (H200, B = 16, T = 1024, NH = 12, the whole backward timed unflushed by
CUDA events; scripts and variants in results/h200-session9-2026-11-28): without any ticket test
(wrong results, timing only) 329-331 us; polling with ld.acquire right after the S and dP
products are issued 355-357 us (the acquire's L2 round trip, ~0.4 us a tile by %globaltimer, is
not hidden); this version 343-345 us (version 13: 336-337 us). The early test is a relaxed load
on purpose: an acquire there measured the same as polling. Correctness of the fast path rests on
the fetch's control dependency on the ticket and on the fetch reading the L2 (the pattern of the
CUDA samples' last-block reductions); a count short of our turn is re-read with acquire.
Workbench, L2 flushed, same shape: 334.2-334.6 us against cuDNN's 286.0-287.0 (1.17x; version 13
331.5-332.9 in that call); after the tile steps moved to wgmma_backward.cuh (250 registers, was
248) 335.7-336.0 against 282.4-282.6 (1.19x; version 13 330.7-332.8).
"""
preconditions = ["HS == 64"]
arch = "sm_90a"  # wgmma: a Hopper; elsewhere the workbench refuses it (the build there is a trap)

[scratch]
D = "B * NH * T"   # dout . out per row, fp32
dq = "B * T * C"   # the running dQ sums, fp32, laid out (B, T, NH, HS); never zeroed
ticket = { size = "B * NH * cdiv(T, 128)", dtype = "i32" }   # shares written, per (head, query tile)

[[launch]]
kernel = "attention_backward14_prep"
grid = "cdiv(B * T * NH, 32)"   # 8 lanes per (b, t, h) row, 32 rows per block
block = 256
args = ["ticket", "D", "dout", "out", "B", "T", "NH", "HS"]

[[launch]]
kernel = "attention_backward14"
grid = ["cdiv(T, 128)", "B * NH"]   # key blocks fastest, last key block first: see changed
block = 256
shared = "1024 + 2 * 128 * 128 + 2 * 2 * 128 * 128 + 128 * 256 + 2 * 2 * 128 * 4 + 128 * 72 * 4"
args = ["dq", "ticket", "dqkv", "dout", "qkv", "lse", "D", "T", "NH", "1.4426950408889634 / sqrt(HS)", "1.0 / sqrt(HS)"]
*/

#include "attention_backward_bf16.cuh"  // dot_rows, store_dk_dv
#include "bf16.cuh"
#include "mma.cuh"                       // cp_async_16, smem_addr
#include "ordered_dq.cuh"                // tickets, fetch_running_sum, hand_over_dq
#include "wgmma.cuh"                     // sw128_desc, stage_sw128, wgmma_commit / wait
#include "wgmma_backward.cuh"            // the tile's steps: products, softmax gradients, dS^T, dQ; block_sync_256

#define BK 128   // keys a block: two warpgroups of 64
#define BQ 128   // queries a streamed tile: two halves of 64
#define HSW 64   // the head size this version is written for

// D = dout . out per (b, h, t) row, and every (head, query tile) ticket set to 0.
extern "C" __global__ void attention_backward14_prep(int* ticket, float* D, const bf16* dout, const bf16* out,
                                                     int B, int T, int NH, int HS) {
    dot_rows(D, nullptr, dout, out, B, T, NH, HS);
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (long long)B * NH * ((T + 127) / 128)) ticket[i] = 0;
}

extern "C" __global__ void __launch_bounds__(256, 1)
attention_backward14(float* dq, int* ticket, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse,
                     const float* D, int T, int NH, float sl2, float scale) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ float4 smem4[];
    const uint32_t base = (smem_addr(smem4) + 1023) & ~1023u;  // swizzled tiles start 1024-aligned
    constexpr uint32_t QT = BQ * 128;                           // a 128-row tile: 16 KB
    const uint32_t sK = base, sV = sK + BK * 128;               // the block's keys and values
    const uint32_t sQ = sV + BK * 128, sG = sQ + 2 * QT;        // Q and dout tiles, two buffers each
    const uint32_t sdS = sG + 2 * QT;                           // dS^T: [query half][128 keys][64 queries]
    const uint32_t sLD = sdS + 2 * BK * 128;                    // lse[2][128], D[2][128] (fp32)
    const uint32_t sSum = sLD + 2 * 2 * 128 * 4;                // the tile's running dQ sum: [128 queries][ORDERED_DQ_SP]
    char* const smem = reinterpret_cast<char*>(smem4);
    float* lsD = reinterpret_cast<float*>(smem + (sLD - smem_addr(smem4)));
    const float* sum = reinterpret_cast<const float*>(smem + (sSum - smem_addr(smem4)));

    const int kb = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y;  // last key block first: see the header
    const int k0 = kb * BK;
    const int b = bh / NH, h = bh % NH;
    const int C = NH * HSW;
    const size_t rs = 3 * (size_t)C;
    const bf16* q_base = qkv + (size_t)b * T * rs + (size_t)h * HSW;
    const bf16* g_base = dout + (size_t)b * T * C + (size_t)h * HSW;
    const float* l_row = lse + (size_t)bh * T;  // lse and D are (B, NH, T)
    const float* d_row = D + (size_t)bh * T;
    float* dq_head = dq + ((size_t)b * T) * C + (size_t)h * HSW;  // row q at + q C
    const int first = k0 / BQ, tiles = (T + BQ - 1) / BQ;  // query tiles from the diagonal on
    int* tickets = ticket + (size_t)bh * tiles;

    auto issue = [&](int i) {  // query tile i into buffer i % 2, one cp.async group
        if (i < tiles) {
            const int q0 = i * BQ, buf = i % 2;
            stage_query_tile(sQ + buf * QT, sG + buf * QT, lsD, buf, q_base, g_base, l_row, d_row, rs, C, T,
                             q0, qkv, dout);
        }
        cp_async_commit();
    };
    stage_sw128<BK, 256>(sK, q_base + (size_t)k0 * rs + C, rs, T - k0, qkv);
    stage_sw128<BK, 256>(sV, q_base + (size_t)k0 * rs + 2 * C, rs, T - k0, qkv);
    issue(first);

    const int wg = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;
    const int kw = k0 + 64 * wg;  // this warpgroup's first key
    float dk[8][4], dv[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    const uint64_t descK = sw128_desc(sK + 64 * 128 * wg, 1024), descV = sw128_desc(sV + 64 * 128 * wg, 1024);
    const uint64_t descK_all = sw128_desc(sK, 1024);

    for (int i = first; i < tiles; i++) {
        const int q0 = i * BQ, buf = i % 2;
        cp_async_wait<0>();
        fence_proxy_async();  // this thread's copies, visible to the tensor cores
        __syncthreads();      // everyone's copies; and everyone is done with tile i - 1's buffers, dS and sum
        if (threadIdx.x == 0 && i > first && kb > 0) ticket_release(tickets + i - 1);  // tile i - 1's sum is out
        issue(i + 1);
        const uint32_t tQ = sQ + buf * QT, tG = sG + buf * QT;
        const float* tl = lsD + buf * 256;
        const float* tD = tl + 128;
        const bool edge = i == first || q0 + BQ > T;  // the diagonal tile or the last: masks needed

        // S^T = K Q^T and dP^T = V dout^T for this warpgroup's 64 keys, in two 64-query halves.
        float s[2][8][4], dp[2][8][4];
        products_s_dp(s, dp, descK, descV, tQ, tG);
        wgmma_commit();
        // Tile i's ticket, read now and looked at after the dV and dK products are issued.
        int seen = 0;
        if (i > first) seen = ticket_relaxed(tickets + i);
        wgmma_wait<0>();

        // P^T = 2^(s sl2 - lse log2 e), zero where key > query or query >= T; dS^T = P^T (dP^T - D).
        uint32_t pa[2][4][4], sa[2][4][4];
        softmax_grads(pa, sa, s, dp, tl, tD, kw + 16 * warp + g, q0, T, edge, sl2);

        // dV += P^T dout, dK += dS^T Q over the 128 queries (A from registers, dout and Q MN-major).
        products_dv_dk(dv, dk, pa, sa, tQ, tG);
        wgmma_commit();

        // While those run: wait for key block kb + 1's share of this tile (i - kb shares before ours),
        // then fetch the running sum, 16 bytes a copy, into sum[query][channel]. The fetch cannot
        // start before the ticket's value is back (it depends on the test), and cp.async.cg reads
        // the L2, where the writer's release put its sums before the ticket moved; when the early
        // read already shows our turn it is therefore not repeated with acquire (see the header).
        if (i > first) {
            while (seen < i - kb) seen = ticket_acquire(tickets + i);
            fetch_running_sum(sSum, dq_head, C, T, q0, dq);
        }
        // dS^T to shared memory: half hq of the queries at sdS + hq * 16 KB, row = key (0-127).
        store_ds_t(sdS, sa, wg, warp, g, t);
        cp_async_wait<0>();  // this thread's share of the running sum (and tile i + 1's copies)
        block_sync_256();    // both warpgroups' dS^T rows are written; the whole running sum is here
        // dQ = dS K for queries 64 wg .. 64 wg + 63 of the tile over all 128 keys.
        float dqa[8][4];
        product_dq(dqa, sdS, descK_all, wg, warp, lane);
        wgmma_commit();
        wgmma_wait<0>();  // dV, dK and dQ's share

        // Our share plus the sum so far (none on our diagonal tile: we are the first), then either
        // the sum back for key block kb - 1 or, from key block 0 (the last), dQ itself in bf16.
        hand_over_dq(dqa, sum, i > first, kb == 0, q0, T, wg, warp, g, t, dqkv, b, h, rs, dq_head, C, scale);
    }
    cp_async_wait<0>();
    __syncthreads();  // every thread's part of the last tile's sum is stored
    if (threadIdx.x == 0 && kb > 0) ticket_release(tickets + tiles - 1);

    store_dk_dv(dqkv, dk, dv, kw + 16 * warp + g, b, h, T, C, scale);  // rows: this warpgroup's keys
#else
    __trap();  // wgmma needs sm_90a (a Hopper GPU): see the header
#endif
}
