/*
title = "Naive fused AdamW: one thread per parameter, the formula as written"
changed = "The starting point: clipping, both moments, bias correction and the decoupled weight decay in one kernel, one thread per parameter."
why = """
All of the update is elementwise, so one kernel does it in one pass: each parameter's four
inputs are read once and its three outputs written once (28 bytes), the memory-bound minimum.
Each thread reads the hyperparameters and norm2 from device memory (cached: every thread reads
the same 28 bytes) and evaluates the textbook formula. One trap: 1 - beta2^t is a cancellation
(0.003 at t = 3), and under --use_fast_math powf becomes exp2(t * log2(beta)) with ~1e-7 absolute
error, i.e. ~1e-4 relative error in the bias correction. It is computed as
-expm1(t * log1p(beta - 1)) instead (beta - 1 is exact; expm1f and log1pf stay accurate).
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "adamw1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["params", "grads", "m", "v", "hp", "norm2", "N", "max_norm"]
*/

// 1 - beta^t without cancellation.
__device__ __forceinline__ float one_minus_pow(float beta, float t) {
    return -expm1f(t * log1pf(beta - 1.0f));
}

extern "C" __global__ void adamw1(float* params, const float* grads, float* m, float* v,
                                  const float* hp, const float* norm2, int N, float max_norm) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float lr = hp[0], beta1 = hp[1], beta2 = hp[2], eps = hp[3], weight_decay = hp[4], t = hp[5];
    float norm = sqrtf(norm2[0]);
    float clip = norm > max_norm ? max_norm / norm : 1.0f;
    float g = grads[i] * clip;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    float m_hat = mi / one_minus_pow(beta1, t);
    float v_hat = vi / one_minus_pow(beta2, t);
    float p = params[i];
    params[i] = p - lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * p);
    m[i] = mi;
    v[i] = vi;
}
