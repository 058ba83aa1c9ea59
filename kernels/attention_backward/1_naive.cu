/*
title = "Naive: recompute att and datt over a (B, NH, T, T) scratch, then one thread per gradient element"
changed = "The starting point: the reference's steps as three kernels reading the packed qkv and dout directly."
why = """
One thread per causal score recomputes P = exp(scale q.k - lse) and dP = dout_t . v_t2 (two
HS-long dots); one thread per row reduces D = sum P dP and turns dP into dS = scale P (dP - D) in
place; one thread per element of dqkv sums over a row (dq) or a column (dk, dv) of the T x T
matrices. Obviously right, and slow: 800 MB of scratch traffic, uncoalesced dots, column walks
with a stride of T floats, one thread per 1024-long row.
"""
block_sizes = [64, 128, 256]

[scratch]
att = "B * NH * T * T"
datt = "B * NH * T * T"

[[launch]]
kernel = "attention_backward_scores1"
grid = ["cdiv(T * T, block_size)", "B * NH"]
block = "block_size"
args = ["att", "datt", "qkv", "dout", "lse", "B", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward_softmax1"
grid = "cdiv(B * NH * T, block_size)"
block = "block_size"
args = ["datt", "att", "B * NH * T", "T", "1.0 / sqrt(HS)"]

[[launch]]
kernel = "attention_backward_grads1"
grid = "cdiv(B * T * 3 * C, block_size)"
block = "block_size"
args = ["dqkv", "att", "datt", "qkv", "dout", "B", "T", "NH", "HS"]
*/

// For t2 <= t: att = exp(scale q_t.k_t2 - lse_t), datt = dout_t . v_t2. Above the diagonal: unused.
extern "C" __global__ void attention_backward_scores1(float* att, float* datt, const float* qkv,
                                                      const float* dout, const float* lse, int B, int T,
                                                      int NH, int HS, float scale) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)T * T) return;
    int t = i / T, t2 = i % T;
    if (t2 > t) return;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    size_t C = (size_t)NH * HS;
    const float* q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * HS;
    const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * HS;
    const float* v = k + C;
    const float* g = dout + ((size_t)b * T + t) * C + (size_t)h * HS;
    float s = 0.0f, dp = 0.0f;
    for (int d = 0; d < HS; d++) {
        s = fmaf(q[d], k[d], s);
        dp = fmaf(g[d], v[d], dp);
    }
    size_t at = ((size_t)bh * T + t) * T + t2;
    att[at] = expf(s * scale - lse[(size_t)bh * T + t]);
    datt[at] = dp;
}

// One thread per row: D = sum_t2 P dP, then dS = scale P (dP - D) written over dP.
extern "C" __global__ void attention_backward_softmax1(float* datt, const float* att, int rows, int T,
                                                       float scale) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    int t = row % T;
    const float* p = att + (size_t)row * T;
    float* dp = datt + (size_t)row * T;
    float D = 0.0f;
    for (int i = 0; i <= t; i++) D = fmaf(p[i], dp[i], D);
    for (int i = 0; i <= t; i++) dp[i] = scale * p[i] * (dp[i] - D);
}

// One thread per element of dqkv (b, t, which, h, d):
//   dq[t] = sum_{t2 <= t} dS[t, t2] k[t2];  dk[t] = sum_{t' >= t} dS[t', t] q[t'];  dv[t] = sum_{t' >= t} P[t', t] dout[t']
extern "C" __global__ void attention_backward_grads1(float* dqkv, const float* att, const float* ds,
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
    const float* rows = qkv + (size_t)b * T * 3 * C + (size_t)h * HS + d;  // q of (b, 0, h, d)
    float acc = 0.0f;
    if (which == 0) {
        const float* dsr = ds + (bh * T + t) * T;
        for (int t2 = 0; t2 <= t; t2++) acc = fmaf(dsr[t2], rows[(size_t)t2 * 3 * C + C], acc);
    } else if (which == 1) {
        for (int t1 = t; t1 < T; t1++) acc = fmaf(ds[(bh * T + t1) * T + t], rows[(size_t)t1 * 3 * C], acc);
    } else {
        const float* g = dout + (size_t)b * T * C + (size_t)h * HS + d;
        for (int t1 = t; t1 < T; t1++) acc = fmaf(att[(bh * T + t1) * T + t], g[(size_t)t1 * C], acc);
    }
    dqkv[idx] = acc;
}
