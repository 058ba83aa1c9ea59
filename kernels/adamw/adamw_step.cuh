// adamw_step.cuh: the AdamW arithmetic the mixed-precision versions share (adamw 4 and 5): the
// step's scalars computed once per thread, and one parameter's update in fp32.
//
// Shared because the versions differ only in how they move memory; the per-element arithmetic
// (and so every result bit) must be the same in both.
//
// make_step(hp, norm2, max_norm) -> Step
//   hp = [lr, beta1, beta2, eps, weight_decay, t]; norm2 = the gradients' squared global norm.
//   The clip factor (max_norm / norm, only when norm > max_norm), the bias corrections (1 -
//   beta^t without cancellation), the decoupled weight decay factor 1 - lr * weight_decay.
//
// adamw_update(p, g, m, v, s) -> the new p; m and v updated in place
//   g clipped; m and v move toward g and g^2 (a lerp as one fma each); then the bias-corrected
//   step and the decay.

#ifndef KERNELS_COMMON_ADAMW_STEP_CUH
#define KERNELS_COMMON_ADAMW_STEP_CUH

// The step's scalars, computed once per thread from hp and norm2 (as in version 3).
struct Step {
    float clip, beta1, beta2, inv_bc1, inv_sqrt_bc2, eps, lr, decay;
};

// 1 - beta^t = -expm1(t log(beta)), with log(beta) = log1p(beta - 1): no cancellation near 1.
__device__ __forceinline__ float bias_correction(float beta, float t) {
    return -expm1f(t * log1pf(beta - 1.0f));
}

__device__ __forceinline__ Step make_step(const float* hp, const float* norm2, float max_norm) {
    Step s;
    s.lr = hp[0];
    s.beta1 = hp[1];
    s.beta2 = hp[2];
    s.eps = hp[3];
    s.decay = 1.0f - hp[0] * hp[4];
    float norm = sqrtf(norm2[0]);
    s.clip = norm > max_norm ? max_norm / norm : 1.0f;
    s.inv_bc1 = 1.0f / bias_correction(s.beta1, hp[5]);
    s.inv_sqrt_bc2 = rsqrtf(bias_correction(s.beta2, hp[5]));
    return s;
}

// One parameter in fp32: m and v move toward g and g^2 (a lerp as two fmas), then the step.
__device__ __forceinline__ float adamw_update(float p, float g, float& mi, float& vi,
                                              const Step& s) {
    g *= s.clip;
    mi = fmaf(1.0f - s.beta1, g - mi, mi);
    vi = fmaf(1.0f - s.beta2, g * g - vi, vi);
    float step = (mi * s.inv_bc1) / (sqrtf(vi) * s.inv_sqrt_bc2 + s.eps);
    return fmaf(-s.lr, step, s.decay * p);
}

#endif  // KERNELS_COMMON_ADAMW_STEP_CUH
