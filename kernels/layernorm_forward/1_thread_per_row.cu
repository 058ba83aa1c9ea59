/*
title = "One thread per row"
changed = "The starting point: the CPU reference moved onto the GPU as is."
why = """
Each of the N rows is independent, so give each row to one thread: it walks the row three times
(mean, variance, normalize). It is correct and simple, but slow: neighbouring threads read
addresses C floats apart, so no load is coalesced, and only N threads exist to hide latency.
"""
block_sizes = [32, 64, 128, 256, 512, 1024]

[[launch]]
kernel = "layernorm_forward1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["out", "mean", "rstd", "inp", "weight", "bias", "N", "C", "eps"]
*/

extern "C" __global__ void layernorm_forward1(float* out, float* mean, float* rstd,
                                              const float* inp, const float* weight,
                                              const float* bias, int N, int C, float eps) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* x = inp + (size_t)row * C;

    float m = 0.0f;
    for (int i = 0; i < C; i++) m += x[i];
    m /= C;

    float v = 0.0f;
    for (int i = 0; i < C; i++) {
        float d = x[i] - m;
        v += d * d;
    }
    v /= C;
    float s = 1.0f / sqrtf(v + eps);

    float* o = out + (size_t)row * C;
    for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[row] = m;
    rstd[row] = s;
}
