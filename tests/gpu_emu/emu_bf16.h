// emu_bf16.h: kernels/common/bf16.cuh for the emulator (same names and semantics, plain C++).
// Defines the real header's include guard, so a kernel's #include "bf16.cuh" is skipped.
#pragma once
#include "emu.h"

#define KERNELS_COMMON_BF16_CUH

struct __nv_bfloat16 {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __nv_bfloat16 bf16;

inline float __bfloat162float(__nv_bfloat16 v) {
    uint32_t u = uint32_t(v.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// A float's bits rounded to bf16 as the GPU's cvt.rn.bf16.f32 does: to nearest even (subnormals
// kept, overflow to inf), any NaN the canonical 0x7FFF (CUDART_NAN_BF16).
inline uint32_t emu_bf16_rn_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {uint16_t(emu_bf16_rn_bits(f))}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) { return {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)}; }
// sm_80's bf16x2 atomic: each half added in float and rounded once, as the GPU does.
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
    if (reinterpret_cast<uintptr_t>(p) % 4) emu_fail("bf16x2 atomicAdd not 4-byte aligned");
    __nv_bfloat162 old = *p;
    *p = __floats2bfloat162_rn(__bfloat162float(old.x) + __bfloat162float(v.x),
                               __bfloat162float(old.y) + __bfloat162float(v.y));
    return old;
}

// Inline PTX on bf16 pairs, which runner.py's PTX table turns the kernels' asm statements into
// (low half: value 0 of the pair), as the PTX ISA defines them:
// cvt.rn.bf16x2.f32 d, a, b: d = {a rounded to bf16 in the high half, b in the low}, round to
// nearest even (subnormals kept, overflow to inf), any NaN the canonical 0x7FFF (CUDART_NAN_BF16).
inline unsigned emu_cvt_rn_bf16x2_f32(float a, float b) { return (emu_bf16_rn_bits(a) << 16) | emu_bf16_rn_bits(b); }
// max.bf16x2 d, a, b: each half the larger (-0 < +0); a NaN loses to a number, two NaNs give 0x7FFF.
inline uint32_t emu_bf16_max_bits(uint32_t a, uint32_t b) {
    bool na = (a & 0x7fffu) > 0x7f80u, nb = (b & 0x7fffu) > 0x7f80u;
    if (na || nb) return na && nb ? 0x7fffu : na ? b : a;
    auto key = [](uint32_t h) { return h & 0x8000u ? -int(h & 0x7fffu) - 1 : int(h); };  // order of the values, -0 below +0
    return key(a) >= key(b) ? a : b;
}
inline unsigned emu_max_bf16x2(unsigned a, unsigned b) {
    return (emu_bf16_max_bits(a >> 16, b >> 16) << 16) | emu_bf16_max_bits(a & 0xffffu, b & 0xffffu);
}

struct alignas(16) Pack8 {
    bf16 v[8];
};
inline float to_float(bf16 x) { return __bfloat162float(x); }
inline bf16 to_bf16(float x) { return __float2bfloat16_rn(x); }
inline void emu_check16(const void* p) {
    if (reinterpret_cast<uintptr_t>(p) % 16) emu_fail("Pack8 access not 16-byte aligned");
}
inline Pack8 load8(const bf16* p) { emu_check16(p); Pack8 o; std::memcpy(&o, p, 16); return o; }
inline void store8(bf16* p, const Pack8& x) { emu_check16(p); std::memcpy(p, &x, 16); }
inline Pack8 load8_stream(const bf16* p) { return load8(p); }
inline void store8_stream(bf16* p, const Pack8& x) { store8(p, x); }
