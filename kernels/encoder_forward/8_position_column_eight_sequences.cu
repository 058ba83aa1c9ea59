/*
title = "A thread per float4 column of a position, for eight sequences at once"
changed = "Version 3's massive grid of float4 threads, each thread now moving the same float4 column of position t for eight sequences: it loads its eight tokens and its wpe float4 first, with no branch between them, then eight wte float4 (all in flight together), and writes eight outputs; wpe is read once per eight rows, and the group's size is a compile-time constant in every path (a switch), so no load or store is predicated."
why = """
At 8x1024x768 the op moves 53.5 MB: 25.2 MB of gathered wte rows, 3.1 MB of wpe, 25.2 MB of out,
32 KB of tokens. A copy of that many bytes takes 24.2 us; version 3 takes 25.9 us (0.935x) and
version 6, built to beat it, 27.0 us. Why the plain grid wins:
* version 6 reads wte evict-first (__ldcs). 8192 tokens drawn from 50257 hold ~7560 distinct
  rows: 7.7% of the gathered rows (1.9 MB, ~0.7 us of DRAM) repeat, and with the default policy
  (version 3's __ldg; out is the evict-first stream) they are likely still in L2.
* a persistent warp cannot request its next row until the current row's loads land (they are
  its registers), and every warp started at once: the two passes run nearly in lockstep and the
  bytes in flight swing between all and none; its 64 registers also cap an SM at 1024 threads.
  Version 3's 6144 short blocks are replaced as they finish, so their phases spread out.
What version 3 still loses (~1.7 us): a thread has one 16-byte wte load in flight and only after
its token lands (2048 threads x 16 B = 32 KB an SM at best, about half of its life waiting on the
token with nothing in flight), and every load, wpe included, sits behind the branch on the token:
for the first ~1 us (one DRAM round trip for 4-byte tokens) DRAM moves almost nothing, where a
copy is streaming from its first cycle. And each wpe row is read 8 times (from L2 after the first).
Here a thread owns one float4 column c4 of one position t for a group of G = 8 sequences
(B = 8: one group; larger B: groups of the same t are neighbours in the grid, so wpe's later
reads hit L2). It issues its 8 token loads and its wpe load back to back (no wait between them:
tokens of a group past B are clamped to row B - 1, read and unused), then the 8 wte float4 (each
waits only for its own token), then 8 streaming stores. Consecutive threads take consecutive
float4 of a row: every load and store of a warp is 512 contiguous bytes (a token load is one
broadcast address). So:
* the start is covered: the first wave's wpe loads (168960 threads x 16 B = 2.7 MB, ~1 us of
  DRAM) are in flight during the token round trip instead of after it;
* a thread waits on tokens once per 8 wte loads, and has 128 B of wte in flight: 1280 threads
  (48 registers, the launch bounds' cap) x 128 B = 160 KB an SM, 3-5x what Little's law asks
  (~3 TB/s x ~1.5 us loaded latency / 132 SMs);
* wpe comes from DRAM once and from L2 once per 8 rows, not 8 times; out is __stcs, and wte and
  wpe keep __ldg's default policy, as version 3 (repeated tokens from L2).
The grid is 196608 threads for 168960 resident (1.16 waves): no persistence, blocks are replaced
as they finish; the late ones wait on their tokens while DRAM drains the earlier ones' requests.
The issue order shaped the code. Written the plain way (loads predicated on j < B - b0, or the
tokens loaded inside the switch), ptxas put a token load behind a wte load that waits on another
token (two token round trips) and the wpe load after the wait on the tokens. With the tokens
and wpe loaded ahead of the switch and the count a template constant in each case, sm_80 and
sm_90 issue all 9 leading loads before any wait, then the group's wte loads, then its stores,
in 48 and 46 registers, no spills. A 40-register cap (one exact wave) split the 8 wte loads into two batches
behind the first stores, so 48 it is.
Prediction: ~24.6 us (24.3-25.0), 0.98x the copy, from 25.9: about one DRAM round trip saved at
the start, more bytes in flight throughout.

Measured on the H100 (bench --all, three runs of 2026-11-24): 27.4-27.5 us against the copy's 24.0-24.2 us (0.87-0.88x): slower than version 3 (25.9-26.3 us), against the prediction.
"""
# float4 rows need C % 4 == 0 (16-byte aligned rows of cudaMalloc'd buffers); any B and T.
preconditions = ["C % 4 == 0"]
# At most 256: the launch bounds (256 threads, 5 blocks) cap the registers at 48, 1280 threads an SM.
block_sizes = [64, 128, 256]

[[launch]]
kernel = "encoder_forward8"
grid = "cdiv(cdiv(B, 8) * T * C // 4, block_size)"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]

[[emulate]]
sizes = ["test", { B = 13, T = 33, C = 784, V = 100 }, { B = 6, T = 5, C = 8, V = 7 },
  { B = 23, T = 2, C = 12, V = 5 }, { B = 8, T = 3, C = 4, V = 3 }, { B = 17, T = 9, C = 40, V = 13 }]
runs = ["bs=64 seed=0 PRIORITY", "bs=64 seed=1 SHUFFLE", "bs=64 seed=2 PRIORITY", "bs=128 seed=0 SHUFFLE",
  "bs=128 seed=1 PRIORITY", "bs=128 seed=2 SHUFFLE", "bs=256 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE",
  "bs=256 seed=2 PRIORITY"]
*/

// Sequences a thread moves: 8 float4 of wte in flight per thread, the default B's whole batch.
constexpr int G = 8;
static_assert(G == 8, "the switch below has a case per group size 1..8");

// The wte loads and the stores of a group of NB <= G sequences (b0 .. b0 + NB - 1) at position t,
// float4 column c4: NB is a constant, so nothing here is predicated. A token outside the
// vocabulary loads row 0 (in bounds, discarded) and writes NaN, loudly. Element offsets fit in 32
// bits (the family's preconditions: N * C and V * C < 2^31).
template <int NB>
__device__ __forceinline__ void move_group(float* __restrict__ out, const float* __restrict__ wte,
                                           float4 p, const int (&token)[G], int b0, int t, int c4,
                                           int T, int C4, int V) {
    unsigned bad = 0;  // bit j: sequence b0 + j has a token outside [0, V)
    float4 w[NB];
#pragma unroll
    for (int j = 0; j < NB; j++) {
        bool valid = unsigned(token[j]) < unsigned(V);
        bad |= unsigned(!valid) << j;
        w[j] = __ldg(reinterpret_cast<const float4*>(wte) + (valid ? token[j] : 0) * C4 + c4);
    }
    const float nan = __int_as_float(0x7fc00000);
    float4* o = reinterpret_cast<float4*>(out) + (b0 * T + t) * C4 + c4;
#pragma unroll
    for (int j = 0; j < NB; j++) {
        float4 s = make_float4(w[j].x + p.x, w[j].y + p.y, w[j].z + p.z, w[j].w + p.w);
        __stcs(o + j * T * C4, (bad >> j) & 1 ? make_float4(nan, nan, nan, nan) : s);
    }
}

// The bounds hold the registers to 48, so blocks of up to 256 threads fill 1280 threads an SM.
extern "C" __global__ void __launch_bounds__(256, 5)
encoder_forward8(float* __restrict__ out, const int* __restrict__ inp, const float* __restrict__ wte,
                 const float* __restrict__ wpe, int B, int T, int C, int V) {
    int C4 = C / 4;
    int groups = (B + G - 1) / G;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // (t, group, c4), c4 fastest
    if (idx >= groups * T * C4) return;
    int c4 = idx % C4, tg = idx / C4;
    int t = tg / groups, b0 = tg % groups * G;
    // Every load that needs no token, and every token, before anything waits on one: here, ahead
    // of the switch, ptxas issues them back to back (inside it, it let a wte load go first).
    int token[G];
#pragma unroll
    for (int j = 0; j < G; j++) token[j] = __ldg(inp + min(b0 + j, B - 1) * T + t);
    float4 p = __ldg(reinterpret_cast<const float4*>(wpe) + t * C4 + c4);
    switch (min(G, B - b0)) {  // G but in the last group when B % G != 0
        case 8: move_group<8>(out, wte, p, token, b0, t, c4, T, C4, V); break;
        case 7: move_group<7>(out, wte, p, token, b0, t, c4, T, C4, V); break;
        case 6: move_group<6>(out, wte, p, token, b0, t, c4, T, C4, V); break;
        case 5: move_group<5>(out, wte, p, token, b0, t, c4, T, C4, V); break;
        case 4: move_group<4>(out, wte, p, token, b0, t, c4, T, C4, V); break;
        case 3: move_group<3>(out, wte, p, token, b0, t, c4, T, C4, V); break;
        case 2: move_group<2>(out, wte, p, token, b0, t, c4, T, C4, V); break;
        default: move_group<1>(out, wte, p, token, b0, t, c4, T, C4, V); break;
    }
}
