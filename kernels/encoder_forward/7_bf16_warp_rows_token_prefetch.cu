/*
title = "bf16: a warp per pair of rows sharing a wpe row, one resident wave, tokens loaded a pass ahead"
builds_on = 6
precision = "bf16"
changed = "Version 6's organization at bf16: each warp moves two whole rows per pass, the same position t of sequences b and b + 1, so the two rows add the same wpe row (at C = 768: 3 wpe and 6 wte 16-byte loads per lane, all issued before the first add); the grid is one resident wave of warps looping over pairs; the next pair's tokens are loaded a pass ahead; the wpe loads are issued before the wait on the tokens; packs sit in registers as four 32-bit words (stream_vec.cuh), not as Pack8's eight 16-bit halves."
why = """
Version 5 falls short of a copy for version 3's reasons (see version 6): one 16-byte pack a thread
behind a dependent token load, short blocks in several waves, nothing in flight while a block
waits for its tokens, DRAM idle for one token latency at the start.
A warp owns rows. At bf16 one row of 768 is only 1.5 KB of wte a warp, 48 KB an SM at 32 resident
warps: about what Little's law asks for (3 TB/s x ~2 us of loaded latency / 132 SMs = ~45 KB),
with no margin. So a pass moves two rows, picked to share their wpe row: (b, t) and (b + 1, t).
Each lane issues 3 wpe and 6 wte loads before the first add (version 6's fp32 margin), and wpe's
L2 reads halve. The grid is one wave (SMS x 1024 threads; the launch bounds hold the registers to
64): at 8x1024 every warp moves exactly one pair and all of the input is requested at once. Larger
B loops over pairs, with the next pair's two tokens loaded at the top of the current pass: only
the first pass waits on its tokens, and that wait overlaps its wpe loads, issued first (a bad
token is a select, NaN out). Registers decided the shape: as Pack8 (16-bit values) ptxas needed
108 registers for 12 packs; as int4 words (stream_vec.cuh) 62, no spills. Each value is one fp32
add of two widened bf16 and one rounding, as in version 5. wte and out are touched once
(__ldcs/__stcs); wpe keeps the default policy.

The byte counts, the prediction and the measurements: results/notes/encoder_forward.md.
"""
# Pack8 rows need C % 8 == 0 (16-byte aligned rows of cudaMalloc'd buffers); no upper bound on
# C: a row wider than 768 values is walked in chunks of 32 lanes x 3 packs.
preconditions = ["C % 8 == 0"]
# At most 512: the launch bounds (512 threads, 2 blocks) cap the registers at 64.
block_sizes = [64, 128, 256, 512]

[[launch]]
kernel = "encoder_forward7"
grid = "min(cdiv(cdiv(B, 2) * T, block_size // 32), SMS * (1024 // block_size))"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]

[[emulate]]
sizes = ["test", { B = 5, T = 33, C = 784, V = 100 }, { B = 3, T = 5, C = 8, V = 7 },
  { B = 2, T = 2, C = 4104, V = 3 }]
runs = ["bs=64 seed=0 PRIORITY sms=1", "bs=128 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY sms=1",
  "bs=512 seed=0 SHUFFLE"]
*/
#include "stream_vec.cuh"  // Word8 (eight bf16 as an int4), ld/st_word8*, widen8, round8

// Packs per lane per chunk: a chunk is 32 x 3 x 8 = 768 values, GPT-2 124M's whole row.
constexpr int K = 3;

// The eight sums of two packs, widened, added in fp32 and rounded once; NaN for a bad token.
__device__ __forceinline__ Word8 add8(Word8 w, Word8 p, bool valid) {
    float a[8], b[8];
    widen8(w, a);
    widen8(p, b);
#pragma unroll
    for (int j = 0; j < 8; j++) a[j] = valid ? a[j] + b[j] : __int_as_float(0x7fc00000);
    return round8(a);
}

// A pass moves the pair q: position t = q % T of sequences b = 2 (q / T) and b + 1 (when
// b + 1 < B), rows b * T + t and b * T + T + t. Both add the same wpe row.
__device__ __forceinline__ void pair_rows(int q, int B, int T, int& row0, bool& has1) {
    int b = 2 * (q / T);
    row0 = b * T + q % T;
    has1 = b + 1 < B;
}

// The grid assumes 1024 resident threads an SM: the bounds hold the registers to 64 so they are.
extern "C" __global__ void __launch_bounds__(512, 2)
encoder_forward7(bf16* __restrict__ out, const int* __restrict__ inp, const bf16* __restrict__ wte,
                 const bf16* __restrict__ wpe, int B, int T, int C, int V) {
    int C8 = C / 8;
    int lane = threadIdx.x % 32;
    int warps = gridDim.x * (blockDim.x / 32);
    int pairs = (B + 1) / 2 * T;
    int q = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // the same for the whole warp
    int row0, token0 = 0, token1 = 0;
    bool has1;
    if (q < pairs) {
        pair_rows(q, B, T, row0, has1);
        token0 = __ldg(inp + row0);
        token1 = has1 ? __ldg(inp + row0 + T) : 0;
    }
    const Word8 zero = {0, 0, 0, 0};
    for (; q < pairs; q += warps) {
        pair_rows(q, B, T, row0, has1);
        int next_token0 = 0, next_token1 = 0;  // the next pass's: they land while this one moves
        if (q + warps < pairs) {
            int next0;
            bool next_has1;
            pair_rows(q + warps, B, T, next0, next_has1);
            next_token0 = __ldg(inp + next0);
            next_token1 = next_has1 ? __ldg(inp + next0 + T) : 0;
        }
        // No branch on the tokens before the loads: the wpe loads need none and issue at once;
        // only the wte loads wait for them. A token outside the vocabulary loads no wte row and
        // writes NaN, loudly. Element offsets fit in 32 bits (the family's preconditions:
        // N * C and V * C < 2^31).
        bool valid0 = token0 >= 0 && token0 < V, valid1 = has1 && token1 >= 0 && token1 < V;
        const bf16* w0 = wte + (valid0 ? token0 : 0) * C;
        const bf16* w1 = wte + (valid1 ? token1 : 0) * C;
        const bf16* p = wpe + row0 % T * C;
        bf16* o0 = out + row0 * C;
        for (int c = lane; c < C8; c += 32 * K) {
            // Zero-filled selects rather than `if`s around the loads: fewer registers.
            Word8 pk[K], wk0[K], wk1[K];
#pragma unroll
            for (int k = 0; k < K; k++)  // wpe first: these need no token
                pk[k] = c + 32 * k < C8 ? ld_word8(p + 8 * (c + 32 * k)) : zero;
#pragma unroll
            for (int k = 0; k < K; k++) {
                wk0[k] = valid0 && c + 32 * k < C8 ? ld_word8_stream(w0 + 8 * (c + 32 * k)) : zero;
                wk1[k] = valid1 && c + 32 * k < C8 ? ld_word8_stream(w1 + 8 * (c + 32 * k)) : zero;
            }
#pragma unroll
            for (int k = 0; k < K; k++) {
                if (c + 32 * k < C8) {
                    st_word8_stream(o0 + 8 * (c + 32 * k), add8(wk0[k], pk[k], valid0));
                    if (has1) st_word8_stream(o0 + T * C + 8 * (c + 32 * k), add8(wk1[k], pk[k], valid1));
                }
            }
        }
        token0 = next_token0;
        token1 = next_token1;
    }
}
