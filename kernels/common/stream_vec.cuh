// stream_vec.cuh: eight bf16 held as four raw 32-bit words in registers, for the memory-bound
// bf16 versions that keep many 16-byte loads in flight per lane (encoder_forward 7,
// layernorm_forward 10, fused_residual_forward 6).
//
// Shared because those versions issue 6 to 12 loads of 16 bytes per lane before the first use,
// and how a pack sits in registers decides whether that fits. bf16.cuh's Pack8 is an array of
// eight 16-bit values: ptxas splits each loaded pack into 16-bit halves, and at 12 packs in
// flight per lane that took encoder_forward 7 from ~60 registers to 108 (spilling under its
// 64-register bound). A Word8 is the same 16 bytes as one int4, four 32-bit words; widening and
// rounding are a few integer operations on the words.
//
// Word8 (= int4): eight bf16, element 2j in the low half of word j, 2j+1 in the high half (the
//   memory order, little-endian). The same bytes as a Pack8.
// ld_word8(p), ld_word8_stream(p), st_word8_stream(p, w): one 16-byte access, plain (__ldg) or
//   streaming (__ldcs/__stcs: data touched once, evict first). p must be 16-byte aligned: an
//   element index that is a multiple of 8 from a cudaMalloc'd base.
// widen8(w, f): the eight values as floats, exactly (a bf16 is the top half of a float).
// round8(f) -> Word8: eight floats rounded once to bf16, nearest even (two per conversion
//   instruction on sm_80+; NaN stays NaN).

#ifndef KERNELS_COMMON_STREAM_VEC_CUH
#define KERNELS_COMMON_STREAM_VEC_CUH

#include "bf16.cuh"

typedef int4 Word8;

__device__ __forceinline__ Word8 ld_word8(const bf16* p) { return __ldg(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ Word8 ld_word8_stream(const bf16* p) { return __ldcs(reinterpret_cast<const int4*>(p)); }
__device__ __forceinline__ void st_word8_stream(bf16* p, Word8 w) { __stcs(reinterpret_cast<int4*>(p), w); }

__device__ __forceinline__ void widen2(int word, float& lo, float& hi) {
    lo = __uint_as_float(unsigned(word) << 16);
    hi = __uint_as_float(unsigned(word) & 0xffff0000u);
}

__device__ __forceinline__ void widen8(Word8 w, float (&f)[8]) {
    widen2(w.x, f[0], f[1]);
    widen2(w.y, f[2], f[3]);
    widen2(w.z, f[4], f[5]);
    widen2(w.w, f[6], f[7]);
}

__device__ __forceinline__ int round2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
    int word;
    memcpy(&word, &h, 4);
    return word;
}

__device__ __forceinline__ Word8 round8(const float (&f)[8]) {
    Word8 w;
    w.x = round2(f[0], f[1]);
    w.y = round2(f[2], f[3]);
    w.z = round2(f[4], f[5]);
    w.w = round2(f[6], f[7]);
    return w;
}

#endif  // KERNELS_COMMON_STREAM_VEC_CUH
