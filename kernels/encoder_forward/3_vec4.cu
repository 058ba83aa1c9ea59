/*
title = "128-bit loads and stores, streaming output"
builds_on = 2
changed = "Each thread moves 4 consecutive channels with float4 loads and stores; out is written with a streaming (evict-first) store."
why = """
Version 2 issues one 4-byte load per input and one 4-byte store per output element. A float4
does the same work in a quarter of the instructions and index computations, and keeps 16 bytes
per request in flight, which is what it takes to approach the bandwidth ceiling. out is written
once and read by the next kernel much later, so __stcs marks it evict-first; wpe rows are read
by all B sequences and stay cached (3 MB at the classic sizes). With C % 4 == 0 every wte, wpe
and out row starts 16-byte aligned (the buffers themselves are cudaMalloc'ed).
"""
preconditions = ["C % 4 == 0"]
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "encoder_forward3"
grid = "cdiv(N * C // 4, block_size)"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]
*/

extern "C" __global__ void encoder_forward3(float* out, const int* __restrict__ inp,
                                            const float* __restrict__ wte,
                                            const float* __restrict__ wpe, int B, int T, int C,
                                            int V) {
    int C4 = C / 4;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // which float4 of out
    if (idx >= B * T * C4) return;
    int bt = idx / C4, c4 = idx % C4;
    int t = bt % T;
    int token = __ldg(inp + bt);
    if (token < 0 || token >= V) {  // outside the vocabulary: NaN, loudly
        float nan = __int_as_float(0x7fc00000);
        __stcs(reinterpret_cast<float4*>(out) + idx, make_float4(nan, nan, nan, nan));
        return;
    }
    float4 w = __ldg(reinterpret_cast<const float4*>(wte + (size_t)token * C) + c4);
    float4 p = __ldg(reinterpret_cast<const float4*>(wpe + (size_t)t * C) + c4);
    __stcs(reinterpret_cast<float4*>(out) + idx, make_float4(w.x + p.x, w.y + p.y, w.z + p.z, w.w + p.w));
}
