/*
title = "One thread per (b, t), looping over C"
changed = "The starting point: the CPU loop moved onto the GPU, one position per thread."
why = """
Each position's row is independent, so each thread copies one: it reads its token once and walks
the C channels. Correct and simple, but slow: at every step the 32 lanes of a warp touch 32
different rows (C floats apart), so each load and store is split into 32 transactions, and only
B*T threads exist to hide the latency.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "encoder_forward1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]
*/

extern "C" __global__ void encoder_forward1(float* out, const int* inp, const float* wte,
                                            const float* wpe, int B, int T, int C, int V) {
    int bt = blockIdx.x * blockDim.x + threadIdx.x;
    if (bt >= B * T) return;
    int t = bt % T;
    int token = inp[bt];
    float* o = out + (size_t)bt * C;
    if (token < 0 || token >= V) {  // outside the vocabulary: say so loudly rather than gather garbage
        for (int c = 0; c < C; c++) o[c] = __int_as_float(0x7fc00000);
        return;
    }
    const float* w = wte + (size_t)token * C;
    const float* p = wpe + (size_t)t * C;
    for (int c = 0; c < C; c++) o[c] = w[c] + p[c];
}
