/*
title = "A first flash attention: 32-row tiles, online max and sum, no T x T buffer"
builds_on = 1
changed = "One kernel: a block of 32 threads owns 32 query rows and walks the 32-row tiles of k and v up to the diagonal, keeping a running max, running sum and running output per row (online softmax)."
why = """
The (B, NH, T, T) matrix is gone: scores live only as a 32 x 32 tile in shared memory, so the
op reads qkv once per query tile and writes out and lse, instead of ~1.2 GB of score traffic.
When a new tile raises a row's max from m to m', the row's sum and output are rescaled by
exp(m - m'), which makes the result exact without a second pass. Tiles above the diagonal are
skipped. This first form is slow all the same: one thread per query row does
all of that row's work serially (a 64-long dot per score, a 32-long sum per output channel),
blocks have a single warp, and nothing is register-blocked. The structure is what matters.
"""
preconditions = ["HS <= 256"]   # the four 32 x (HS + 1) tiles must fit in shared memory

[[launch]]
kernel = "attention_forward2"
grid = ["B * NH", "cdiv(T, 32)"]
block = 32
shared = "4 * (4 * 32 * (HS + 1) + 32 * 33)"
args = ["out", "lse", "qkv", "B", "T", "NH", "HS", "1.0 / sqrt(HS)"]
*/

#define TILE 32

extern "C" __global__ void attention_forward2(float* out, float* lse, const float* qkv, int B, int T,
                                              int NH, int HS, float scale) {
    extern __shared__ float smem[];
    // Rows padded to HS + 1 floats: thread r walking its own row hits bank (r (HS+1) + d) % 32,
    // all different, where HS = 64 would put every thread on the same bank.
    int P = HS + 1;
    float* Qs = smem;             // TILE x P: this block's query rows
    float* Ks = Qs + TILE * P;    // TILE x P: the current key tile
    float* Vs = Ks + TILE * P;    // TILE x P: the current value tile
    float* Os = Vs + TILE * P;    // TILE x P: running (unnormalised) outputs
    float* Ss = Os + TILE * P;    // TILE x (TILE + 1): scores, then probabilities
    int r = threadIdx.x;
    int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    int q0 = (gridDim.y - 1 - blockIdx.y) * TILE;  // the longest rows start first
    int t = q0 + r;
    size_t C = (size_t)NH * HS, rs = 3 * C;
    const float* base = qkv + (size_t)b * T * rs + (size_t)h * HS;

    for (int i = r; i < TILE * HS; i += TILE) {
        int rr = i / HS, d = i % HS;
        Qs[rr * P + d] = q0 + rr < T ? base[(size_t)(q0 + rr) * rs + d] : 0.0f;
        Os[rr * P + d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int last = min(T, q0 + TILE);  // keys 0 .. last-1 can be seen by some row of this tile
    for (int k0 = 0; k0 < last; k0 += TILE) {
        __syncthreads();  // the previous tiles are consumed (and Qs/Os are written, first time)
        for (int i = r; i < TILE * HS; i += TILE) {
            int rr = i / HS, d = i % HS;
            bool in = k0 + rr < T;
            Ks[rr * P + d] = in ? base[(size_t)(k0 + rr) * rs + C + d] : 0.0f;
            Vs[rr * P + d] = in ? base[(size_t)(k0 + rr) * rs + 2 * C + d] : 0.0f;
        }
        __syncthreads();
        if (t < T) {
            float* srow = Ss + r * (TILE + 1);
            // k0 <= q0 <= t: the tile's first key is always visible, so the max is finite.
            float mt = -INFINITY;
            for (int c = 0; c < TILE; c++) {
                float s = -INFINITY;
                if (k0 + c <= t) {
                    float dot = 0.0f;
                    for (int d = 0; d < HS; d++) dot = fmaf(Qs[r * P + d], Ks[c * P + d], dot);
                    s = dot * scale;
                }
                srow[c] = s;
                mt = fmaxf(mt, s);
            }
            float mnew = fmaxf(m, mt);
            float alpha = expf(m - mnew);  // 0 on the first tile (m = -inf)
            float sum = 0.0f;
            for (int c = 0; c < TILE; c++) {
                float p = expf(srow[c] - mnew);  // masked scores give exp(-inf) = 0
                srow[c] = p;
                sum += p;
            }
            l = l * alpha + sum;
            m = mnew;
            for (int d = 0; d < HS; d++) {
                float o = Os[r * P + d] * alpha;
                for (int c = 0; c < TILE; c++) o = fmaf(srow[c], Vs[c * P + d], o);
                Os[r * P + d] = o;
            }
        }
    }
    if (t < T) {
        float inv = 1.0f / l;
        float* dst = out + ((size_t)b * T + t) * C + (size_t)h * HS;
        for (int d = 0; d < HS; d++) dst[d] = Os[r * P + d] * inv;
        lse[(size_t)bh * T + t] = m + logf(l);
    }
}
