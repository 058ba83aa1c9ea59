/*
title = "Naive: a kernel for att = relu(scale q.k) / T over a (B, NH, T, T) scratch, one for att @ v"
changed = "The starting point: the reference's two steps on the GPU, reading q, k, v straight from the packed qkv."
why = """
One thread per causal score computes a dot product of HS channels, applies the ReLU and the 1/T;
one thread per output element sums att[t, t2] v[t2] over t2 <= t. Correct and simple; slow
because the score matrix makes a round trip through memory and the score threads read k rows
3C floats apart.
"""
block_sizes = [64, 128, 256]

[scratch]
att = "B * NH * T * T"

[[launch]]
kernel = "relu_attention_scores1"
grid = ["cdiv(T * T, block_size)", "B * NH"]
block = "block_size"
args = ["att", "qkv", "B", "T", "NH", "HS", "1.0 / sqrt(HS)", "1.0 / T"]

[[launch]]
kernel = "relu_attention_value1"
grid = "cdiv(B * T * C, block_size)"
block = "block_size"
args = ["out", "att", "qkv", "B", "T", "NH", "HS"]
*/

extern "C" __global__ void relu_attention_scores1(float* att, const float* qkv, int B, int T, int NH, int HS,
                                                  float scale, float inv_T) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)T * T) return;
    int t = i / T, t2 = i % T;
    if (t2 > t) return;  // above the diagonal: never read
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    size_t C = (size_t)NH * HS;
    const float* q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
    const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * HS;
    float s = 0.0f;
    for (int d = 0; d < HS; d++) s = fmaf(q[d], k[d], s);
    att[((size_t)bh * T + t) * T + t2] = fmaxf(s * scale, 0.0f) * inv_T;
}

extern "C" __global__ void relu_attention_value1(float* out, const float* att, const float* qkv, int B, int T,
                                                 int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t C = (size_t)NH * HS;
    if (idx >= (size_t)B * T * C) return;
    int d = idx % HS;
    int h = (idx / HS) % NH;
    int t = (idx / C) % T;
    int b = idx / (C * T);
    const float* a = att + (((size_t)b * NH + h) * T + t) * T;
    const float* v = qkv + (size_t)b * T * 3 * C + 2 * C + (size_t)h * HS + d;
    float y = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) y = fmaf(a[t2], v[(size_t)t2 * 3 * C], y);
    out[idx] = y;
}
