/*
title = "One thread per output element"
builds_on = 1
changed = "B*T*C threads, one per output float, instead of B*T threads each looping over C."
why = """
Consecutive threads now own consecutive channels of the same row, so a warp's 32 loads from wte,
wpe and its 32 stores to out each fall in one or two 128-byte lines: coalesced. And there are C
times more threads, enough to keep many loads in flight. The cost: every thread recomputes its
(b, t, c) with a division and reloads the token (served from L1, as 32 lanes share it).
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "encoder_forward2"
grid = "cdiv(N * C, block_size)"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]
*/

extern "C" __global__ void encoder_forward2(float* out, const int* inp, const float* wte,
                                            const float* wpe, int B, int T, int C, int V) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // 32-bit: B*T*C < 2^31 - 1024 (family precondition)
    if (idx >= B * T * C) return;
    int bt = idx / C, c = idx % C;
    int t = bt % T;
    int token = inp[bt];
    // A token outside the vocabulary gives NaN, loudly, rather than a gather from anywhere.
    out[idx] = (token < 0 || token >= V) ? __int_as_float(0x7fc00000)
                                         : wte[(size_t)token * C + c] + wpe[(size_t)t * C + c];
}
