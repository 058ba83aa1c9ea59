/*
title = "Two naive kernels: layernorm_backward 1's thread per row, then a thread per column of dinp"
deterministic = false  # dweight and dbias by float atomicAdd: their last bits vary from run to run
changed = "The starting point: layernorm_backward's version 1 (one thread a row, atomics for dweight and dbias), then a second kernel whose thread c adds column c of the finished dinp over the rows, in row order."
why = """
The unfused order, as plainly as it goes: the row kernel leaves dinp in memory and the column
kernel reads it all back, N * C values, for C sums. Its loads are coalesced (neighbouring threads,
neighbouring columns), but C threads are few: at C = 768 six blocks of 128 keep a few SMs busy
walking N rows one after the other. The baseline the fused version is checked and timed against.
"""
block_sizes = [32, 64, 128, 256]

[[launch]]
kernel = "ln_rows_proj_bias1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["dinp", "dweight", "dbias", "dout", "inp", "weight", "mean", "rstd", "N", "C"]

[[launch]]
kernel = "dinp_column_sums1"
grid = "cdiv(C, block_size)"
block = "block_size"
args = ["dproj_bias", "dinp", "N", "C"]
*/

// One row a thread: its two means (of dnorm and of dnorm * xhat), then dinp += its gradient and
// the row's dout and dout * xhat added into dbias and dweight by atomics.
extern "C" __global__ void ln_rows_proj_bias1(float* dinp, float* dweight, float* dbias, const float* dout,
                                              const float* inp, const float* weight, const float* mean,
                                              const float* rstd, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* dy = dout + (size_t)row * C;
    const float* x = inp + (size_t)row * C;
    float* dx = dinp + (size_t)row * C;
    const float m = mean[row], s = rstd[row];
    float sum_dn = 0.0f, sum_dnx = 0.0f;
    for (int i = 0; i < C; i++) {
        float dn = weight[i] * dy[i];
        sum_dn += dn;
        sum_dnx += dn * (x[i] - m) * s;
    }
    const float mean_dn = sum_dn / C, mean_dnx = sum_dnx / C;
    for (int i = 0; i < C; i++) {
        float xhat = (x[i] - m) * s;
        atomicAdd(dbias + i, dy[i]);
        atomicAdd(dweight + i, dy[i] * xhat);
        dx[i] += s * (weight[i] * dy[i] - mean_dn - xhat * mean_dnx);
    }
}

// dproj_bias[c] += the sum of column c of dinp over the N rows, in row order.
extern "C" __global__ void dinp_column_sums1(float* dproj_bias, const float* dinp, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sum = 0.0f;
    for (int r = 0; r < N; r++) sum += dinp[(size_t)r * C + c];
    dproj_bias[c] += sum;
}
