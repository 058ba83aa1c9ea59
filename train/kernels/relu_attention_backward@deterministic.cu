/*
title = "Naive: recompute att and dpreatt over a (B, NH, T, T) scratch, then one thread per gradient element"
changed = "The starting point: one kernel recomputes att = relu(s) / T and dpreatt = scale / T * datt * [s > 0] for each causal pair, a second one sums rows (dq) and columns (dk, dv) of them."
why = """
Obviously right and slow: two T x T matrices go through memory, the score threads do two
uncoalesced HS-long dots each, and the dk/dv threads walk columns with a stride of T floats.
The scale is applied after the dot product, so the sign test [s > 0] sees q.k exactly as the
reference does (exact for the family's integer-valued inputs).
"""
block_sizes = [64, 128, 256]

[scratch]
att = "B * NH * T * T"
dpre = "B * NH * T * T"

[[launch]]
kernel = "relu_attention_backward_scores1"
grid = ["cdiv(T * T, block_size)", "B * NH"]
block = "block_size"
args = ["att", "dpre", "qkv", "dout", "B", "T", "NH", "HS", "1.0 / sqrt(HS)", "1.0 / T"]

[[launch]]
kernel = "relu_attention_backward_grads1"
grid = "cdiv(B * T * 3 * C, block_size)"
block = "block_size"
args = ["dqkv", "att", "dpre", "qkv", "dout", "B", "T", "NH", "HS"]
*/

extern "C" __global__ void relu_attention_backward_scores1(float* att, float* dpre, const float* qkv,
                                                           const float* dout, int B, int T, int NH, int HS,
                                                           float scale, float inv_T) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)T * T) return;
    int t = i / T, t2 = i % T;
    if (t2 > t) return;  // above the diagonal: never read
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    size_t C = (size_t)NH * HS;
    const float* q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
    const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * HS;
    const float* v = k + C;
    const float* g = dout + ((size_t)b * T + t) * C + (size_t)h * HS;
    float s = 0.0f, datt = 0.0f;
    for (int d = 0; d < HS; d++) {
        s = fmaf(q[d], k[d], s);
        datt = fmaf(g[d], v[d], datt);
    }
    size_t at = ((size_t)bh * T + t) * T + t2;
    bool on = s > 0.0f;  // the sign of q.k, before any rounding by the scale
    att[at] = on ? s * scale * inv_T : 0.0f;
    dpre[at] = on ? datt * scale * inv_T : 0.0f;
}

// dq[t] = sum_{t2 <= t} dpre[t, t2] k[t2];  dk[t] = sum_{t' >= t} dpre[t', t] q[t'];  dv[t] = sum_{t' >= t} att[t', t] dout[t']
extern "C" __global__ void relu_attention_backward_grads1(float* dqkv, const float* att, const float* dpre,
                                                          const float* qkv, const float* dout, int B, int T,
                                                          int NH, int HS) {
    size_t C = (size_t)NH * HS;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * 3 * C) return;
    int d = idx % HS;
    int h = (idx / HS) % NH;
    int which = (idx / C) % 3;
    int t = (idx / (3 * C)) % T;
    int b = idx / (3 * C * T);
    size_t bh = (size_t)b * NH + h;
    const float* rows = qkv + (size_t)b * T * 3 * C + (size_t)h * HS + d;
    float acc = 0.0f;
    if (which == 0) {
        const float* dr = dpre + (bh * T + t) * T;
        for (int t2 = 0; t2 <= t; t2++) acc = fmaf(dr[t2], rows[(size_t)t2 * 3 * C + C], acc);
    } else if (which == 1) {
        for (int t1 = t; t1 < T; t1++) acc = fmaf(dpre[(bh * T + t1) * T + t], rows[(size_t)t1 * 3 * C], acc);
    } else {
        const float* g = dout + (size_t)b * T * C + (size_t)h * HS + d;
        for (int t1 = t; t1 < T; t1++) acc = fmaf(att[(bh * T + t1) * T + t], g[(size_t)t1 * C], acc);
    }
    dqkv[idx] = acc;
}
