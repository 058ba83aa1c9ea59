/*
title = "One thread per row, atomics for dweight and dbias"
deterministic = false  # float atomicAdd: the sum's order, and so its last bits, vary from run to run
changed = "The starting point: the CPU loop moved onto the GPU, one row per thread."
why = """
Each thread walks its row twice: once for the two row means (of dnorm and of dnorm * xhat), once
to write dinp and add its row's share of dweight and dbias. The column sums are shared by every
row, so each contribution is an atomicAdd to global memory: correct, but every one of the N
threads hits the same C addresses in the same order, and same-address atomics serialize. Loads
are uncoalesced too (neighbouring threads read addresses C floats apart).
"""
block_sizes = [32, 64, 128, 256, 512]

[[launch]]
kernel = "layernorm_backward1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]
*/

extern "C" __global__ void layernorm_backward1(float* dinp, float* dweight, float* dbias,
                                               const float* dout, const float* inp,
                                               const float* weight, const float* mean,
                                               const float* rstd, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* dy = dout + (size_t)row * C;
    const float* x = inp + (size_t)row * C;
    float* dx = dinp + (size_t)row * C;
    float m = mean[row], s = rstd[row];

    float mean_dn = 0.0f, mean_dnx = 0.0f;
    for (int i = 0; i < C; i++) {
        float xhat = (x[i] - m) * s;
        float dn = weight[i] * dy[i];
        mean_dn += dn;
        mean_dnx += dn * xhat;
    }
    mean_dn /= C;
    mean_dnx /= C;

    for (int i = 0; i < C; i++) {
        float xhat = (x[i] - m) * s;
        float dn = weight[i] * dy[i];
        atomicAdd(dbias + i, dy[i]);
        atomicAdd(dweight + i, dy[i] * xhat);
        dx[i] += s * (dn - mean_dn - xhat * mean_dnx);
    }
}
