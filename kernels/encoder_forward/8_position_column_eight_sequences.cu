/*
title = "A thread per float4 column of a position, for eight sequences at once"
builds_on = 3
changed = "Version 3's massive grid of float4 threads, each thread now moving the same float4 column of position t for eight sequences: it loads its eight tokens and its wpe float4 first, with no branch between them, then eight wte float4 (all in flight together), and writes eight outputs; wpe is read once per eight rows, and the group's size is a compile-time constant in every path (a switch), so no load or store is predicated."
why = """
Version 6, built to beat version 3, was slower. Why the plain grid wins:
* version 6 reads wte evict-first (__ldcs), but a few percent of the gathered rows repeat, and
  with the default policy (version 3's __ldg) they are likely still in L2;
* a persistent warp cannot request its next row until the current row's loads land (they are its
  registers), and every warp started at once, so the bytes in flight swing between all and none;
  version 3's short blocks are replaced as they finish, so their phases spread out.
What version 3 still loses: a thread has one 16-byte wte load in flight and only after its token
lands, and every load, wpe included, sits behind the branch on the token, so for the first DRAM
round trip DRAM moves almost nothing; and each wpe row is read once per sequence.

Here a thread owns one float4 column of one position t for a group of 8 sequences. It issues its 8
token loads and its wpe load back to back (tokens past B clamped to row B - 1, read and unused),
then the 8 wte float4 (each waits only for its own token), then 8 streaming stores. A warp's loads
and stores are 512 contiguous bytes. So the first wave's wpe loads are in flight during the token
round trip, a thread waits on tokens once per 8 wte loads with 128 B in flight, and wpe comes from
L2 once per 8 rows. The issue order shaped the code: written the plain way, ptxas put a token load
behind a wte load that waits on another token; with the tokens and wpe loaded ahead of the switch
and the count a template constant in each case, all 9 leading loads go out before any wait, in 48
registers (a 40-register cap split the wte loads into two batches).

It came out slower than version 3, against its prediction (results/notes/encoder_forward.md).
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
