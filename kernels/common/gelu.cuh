// gelu.cuh: the tanh-approximation GELU and its derivative, for gelu_forward and gelu_backward.
//
// Shared because every version of both families carried the same constants and formulas; what
// the versions change is how elements reach them (packing, unrolling), not the math.
//
// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
//   Written as x / (1 + exp(-2u)), since 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u)): under
//   --use_fast_math tanhf is the hardware tanh.approx.f32 (relative error about 2^-11, far outside
//   the 1e-5 tolerance), while the fast exp is good to a few ulp, and the logistic form has no
//   cancellation for negative x. The exponent is clamped at 80, so exp never overflows.
// gelu_grad(x) = d gelu / dx
//   With s = 1 / (1 + e), e = exp(-2u): 1 - tanh^2(u) = 4 s (1 - s) and 1 - s = e s, so
//   gelu'(x) = s + 2 x s (e s) u'. 1 - tanh^2 computed directly would cancel catastrophically
//   in the tails; e * s does not, and the clamp keeps e finite so e * s is never inf * 0.

#ifndef KERNELS_COMMON_GELU_CUH
#define KERNELS_COMMON_GELU_CUH

constexpr float GELU_SCALE = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float GELU_CUBIC = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
    float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
    return x / (1.0f + __expf(fminf(-2.0f * u, 80.0f)));
}

__device__ __forceinline__ float gelu_grad(float x) {
    float x2 = x * x;
    float u = GELU_SCALE * (x + GELU_CUBIC * x2 * x);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x2);
    float e = __expf(fminf(-2.0f * u, 80.0f));
    float s = 1.0f / (1.0f + e);
    return s + 2.0f * x * s * (e * s) * du;
}

// gelu_tanh(x): the same GELU through the hardware tanh (tanh.approx.f32, relative error about
// 2^-11) as 0.5 x + 0.5 x tanh(u): one special-function op where gelu() takes two (the exponential
// and the reciprocal). Too coarse for the fp32 families' 1e-5; for outputs rounded to bf16 (2^-9)
// it is inside the rounding (gemm_tma.cuh's GELU epilogue).
__device__ __forceinline__ float gelu_tanh(float x) {
    const float u = x * fmaf(GELU_SCALE * GELU_CUBIC, x * x, GELU_SCALE);
    float th;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(th) : "f"(u));
    const float hx = 0.5f * x;
    return fmaf(hx, th, hx);
}

// gelu_grad_tanh(x): gelu'(x) through the hardware tanh: with th = tanh(u) and h = (1 + th) / 2,
// gelu'(x) = h + x h (1 - th) u'. One special-function op where gelu_grad takes two. Where th is
// near +-1 (|x| > ~2) the hardware tanh's documented error bound (~5e-4) is a large share of 1 - th or
// 1 + th, so by that bound gelu' could err by ~3e-3 there. Measured on an H200 it errs by at most
// 1.6e-5 over [-12, 12] (matmul_backward_dgelu 9's header): for a dpre rounded to bf16.
__device__ __forceinline__ float gelu_grad_tanh(float x) {
    const float x2 = x * x;
    const float u = x * fmaf(GELU_SCALE * GELU_CUBIC, x2, GELU_SCALE);
    const float du = fmaf(3.0f * GELU_SCALE * GELU_CUBIC, x2, GELU_SCALE);
    float th;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(th) : "f"(u));
    const float h = fmaf(0.5f, th, 0.5f);
    return fmaf(x * h * (1.0f - th), du, h);
}

#endif  // KERNELS_COMMON_GELU_CUH
