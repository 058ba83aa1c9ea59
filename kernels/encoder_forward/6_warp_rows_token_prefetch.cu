/*
title = "A warp per row, one resident wave, the next row's token loaded a row ahead"
builds_on = 3
changed = "Version 3's float4 gather reorganized: each warp owns whole rows (6 float4 of wte and 6 of wpe per lane at C = 768, all issued before the first add), the grid is one resident wave of warps looping over rows, each warp loads the token of its next row while it moves the current one, and the wpe loads are issued before the wait on the token."
why = """
Version 3's thread has one float4 to move, and two dependent round trips to do it: the token,
then (behind a branch on the token) the wte and wpe loads. While a block waits for its tokens it
has nothing in flight, its many short blocks run in several waves, and at the start and the end of
the kernel DRAM idles for one token latency with every thread waiting on a 4-byte load.

Here a warp moves a whole row: at C = 768 each lane issues 6 wpe and 6 wte float4 loads before it
adds anything, so each warp keeps DRAM busy for its whole life. The grid is one wave (SMS x 1024
threads; the launch bounds hold the registers to 64 so all of it is resident), each warp looping
over rows with a stride of the grid's warps: no block turnover, no partial last wave. The token of
the warp's next row is loaded at the top of the current one, so the only dependent round trip left
is the first row's, covered by that row's wpe loads, issued first: no branch on the token precedes
them (a token outside the vocabulary is a select that loads no wte row and writes NaN). All lanes
read the same token address: one broadcast. wte rows are read once (__ldcs), out written once
(__stcs), wpe keeps the default policy (the B sequences share its rows). The loads are zero-filled
selects, not ifs: with branches ptxas wanted 78 registers and spilled under the bounds.

It came out slower than version 3; version 8's header says why. The byte counts, the prediction
and the measurements: results/notes/encoder_forward.md.
"""
# float4 rows need C % 4 == 0 (16-byte aligned rows of cudaMalloc'd buffers); no upper bound on
# C: a row wider than 768 floats is walked in chunks of 32 lanes x 6 float4.
preconditions = ["C % 4 == 0"]
# At most 512: the launch bounds (512 threads, 2 blocks) cap the registers at 64.
block_sizes = [64, 128, 256, 512]

[[launch]]
kernel = "encoder_forward6"
grid = "min(cdiv(N, block_size // 32), SMS * (1024 // block_size))"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "N", "T", "C", "V"]

[[emulate]]
sizes = ["test", { B = 5, T = 33, C = 784, V = 100 }, { B = 3, T = 5, C = 8, V = 7 },
  { B = 2, T = 2, C = 4104, V = 3 }]
runs = ["bs=64 seed=0 PRIORITY sms=1", "bs=128 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY sms=1",
  "bs=512 seed=0 SHUFFLE"]
*/

// float4 per lane per chunk: a chunk is 32 x 6 x 4 = 768 floats, GPT-2 124M's whole row.
constexpr int K = 6;

// The grid assumes 1024 resident threads an SM: the bounds hold the registers to 64 so they are.
extern "C" __global__ void __launch_bounds__(512, 2)
encoder_forward6(float* __restrict__ out, const int* __restrict__ inp, const float* __restrict__ wte,
                 const float* __restrict__ wpe, int N, int T, int C, int V) {
    int C4 = C / 4;
    int lane = threadIdx.x % 32;
    int warps = gridDim.x * (blockDim.x / 32);
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // the same for the whole warp
    int token = row < N ? __ldg(inp + row) : 0;
    for (; row < N; row += warps) {
        int next = row + warps;
        int next_token = next < N ? __ldg(inp + next) : 0;  // lands while this row moves
        const float4* p4 = reinterpret_cast<const float4*>(wpe) + (size_t)(row % T) * C4;
        float4* o4 = reinterpret_cast<float4*>(out) + (size_t)row * C4;
        // No branch on the token before the loads: the wpe loads below need no token, so they
        // issue at once, and only the wte loads (and the stores) wait for it. A token outside the
        // vocabulary (warp-uniform) loads no wte row and writes NaN, loudly.
        bool valid = token >= 0 && token < V;
        const float4* w4 = reinterpret_cast<const float4*>(wte) + (size_t)(valid ? token : 0) * C4;
        const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
        const float nan = __int_as_float(0x7fc00000);
        for (int c = lane; c < C4; c += 32 * K) {
            // Zero-filled selects, not `if`s around the loads: the predicated form keeps the
            // registers within the bounds' 64 (with branches ptxas needed 78 and spilled).
            float4 p[K], w[K];
#pragma unroll
            for (int k = 0; k < K; k++) p[k] = c + 32 * k < C4 ? __ldg(p4 + c + 32 * k) : zero;
#pragma unroll
            for (int k = 0; k < K; k++) w[k] = valid && c + 32 * k < C4 ? __ldcs(w4 + c + 32 * k) : zero;
#pragma unroll
            for (int k = 0; k < K; k++) {
                float4 r = make_float4(w[k].x + p[k].x, w[k].y + p[k].y, w[k].z + p[k].z, w[k].w + p[k].w);
                if (c + 32 * k < C4) __stcs(o4 + c + 32 * k, valid ? r : make_float4(nan, nan, nan, nan));
            }
        }
        token = next_token;
    }
}
