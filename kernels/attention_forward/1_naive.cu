/*
title = "Naive: scores, softmax and att @ v as three kernels over a (B, NH, T, T) scratch"
changed = "The starting point: the reference's three steps moved onto the GPU, reading q, k, v straight from the packed qkv."
why = """
One thread per score (t2 <= t) computes a dot product of HS channels; one thread per row then
takes max, exp-sum and normalises in place (and writes the row's lse); one thread per output
element sums att[t, t2] v[t2] over t2 <= t. Simple and obviously right, but it writes and reads a
(B, NH, T, T) matrix (400 MB at the default sizes), the score threads read k rows 3C floats apart
(nothing coalesces), and the softmax has one thread per 1024-long row.
"""
block_sizes = [64, 128, 256]

[scratch]
att = "B * NH * T * T"

[[launch]]
kernel = "attention_scores1"
grid = ["cdiv(T * T, block_size)", "B * NH"]
block = "block_size"
args = ["att", "qkv", "B", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_softmax1"
grid = "cdiv(B * NH * T, block_size)"
block = "block_size"
args = ["att", "lse", "B * NH * T", "T"]

[[launch]]
kernel = "attention_value1"
grid = "cdiv(B * T * C, block_size)"
block = "block_size"
args = ["out", "att", "qkv", "B", "T", "NH", "HS"]
*/

// att[b, h, t, t2] = scale * q_t . k_t2 for t2 <= t (the rest is never read).
extern "C" __global__ void attention_scores1(float* att, const float* qkv, int B, int T, int NH, int HS,
                                             float scale) {
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
    att[((size_t)bh * T + t) * T + t2] = s * scale;
}

// One thread per row: softmax over t2 <= t in place, and the row's log-sum-exp.
extern "C" __global__ void attention_softmax1(float* att, float* lse, int rows, int T) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    int t = row % T;
    float* x = att + (size_t)row * T;
    float m = -INFINITY;
    for (int i = 0; i <= t; i++) m = fmaxf(m, x[i]);
    float sum = 0.0f;
    for (int i = 0; i <= t; i++) {
        float e = expf(x[i] - m);
        x[i] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int i = 0; i <= t; i++) x[i] *= inv;
    lse[row] = m + logf(sum);
}

// out[b, t, h*HS + d] = sum_{t2 <= t} att[b, h, t, t2] v[b, t2, h, d]
extern "C" __global__ void attention_value1(float* out, const float* att, const float* qkv, int B, int T,
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
