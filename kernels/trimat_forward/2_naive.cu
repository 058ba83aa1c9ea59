/*
title = "One thread per score of the lower triangle"
builds_on = 0  # starts afresh
changed = "A hand-written kernel reading qkv directly (no permute): thread (t, t2) of head blockIdx.y computes one dot product; threads above the diagonal exit at once."
why = """
No copy and no upper triangle: half the output bytes of version 1. But each thread reads its own
row of k (rows 3C floats apart: nothing coalesces) and all HS values of q and k for a single
output, so every FMA costs two loads. It is the correctness baseline, not a fast kernel.
"""
block_sizes = [64, 128, 256, 512]

[[launch]]
kernel = "trimat2"
grid = ["cdiv(T * T, block_size)", "B * NH"]
block = "block_size"
args = ["preatt", "qkv", "B", "T", "NH", "HS", "1.0 / sqrt(HS)"]
*/

extern "C" __global__ void trimat2(float* preatt, const float* qkv, int B, int T, int NH, int HS, float scale) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)T * T) return;
    int t = i / T, t2 = i % T;
    if (t2 > t) return;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    size_t C = (size_t)NH * HS;
    const float* q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
    const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * HS;
    float s = 0.0f;
    for (int d = 0; d < HS; d++) s = fmaf(q[d], k[d], s);
    preatt[((size_t)bh * T + t) * T + t2] = s * scale;
}
