// misc_bf16_vec.cuh: VEC consecutive bf16 values moved as one access, for kernels written once
// for two widths (the misc group's bf16 versions: encoder_backward 4, permute 3, unpermute 3).
//
// Shared because those versions each run the same code at VEC = 8 (one 16-byte access, when
// the layout keeps every group 16-byte aligned) and at VEC = 1 (one 2-byte access, for the
// sizes that do not), chosen per launch by a `when` on the sizes.
//
// BfVec<VEC>: VEC bf16 values, aligned to their size (BfVec<8> has Pack8's layout).
// load_vec<VEC>(p), store_vec<VEC>(p, x): plain accesses; load_vec_stream / store_vec_stream: the
//   streaming hints (__ldcs/__stcs), for data touched once. p must be aligned to 2 * VEC bytes:
//   an element index that is a multiple of VEC from a cudaMalloc'd base.
// Only VEC = 1 and VEC = 8 are defined.

#ifndef KERNELS_COMMON_MISC_BF16_VEC_CUH
#define KERNELS_COMMON_MISC_BF16_VEC_CUH

#include "bf16.cuh"

template <int VEC>
struct alignas(2 * VEC) BfVec {
    bf16 v[VEC];
};

template <int VEC> struct BfWord;  // the integer type one access moves
template <> struct BfWord<1> { typedef unsigned short type; };
template <> struct BfWord<8> { typedef int4 type; };

template <int VEC>
__device__ __forceinline__ BfVec<VEC> load_vec(const bf16* p) {
    typedef typename BfWord<VEC>::type W;
    BfVec<VEC> x;
    *reinterpret_cast<W*>(&x) = *reinterpret_cast<const W*>(p);
    return x;
}

template <int VEC>
__device__ __forceinline__ BfVec<VEC> load_vec_stream(const bf16* p) {
    typedef typename BfWord<VEC>::type W;
    BfVec<VEC> x;
    *reinterpret_cast<W*>(&x) = __ldcs(reinterpret_cast<const W*>(p));
    return x;
}

template <int VEC>
__device__ __forceinline__ void store_vec(bf16* p, const BfVec<VEC>& x) {
    typedef typename BfWord<VEC>::type W;
    *reinterpret_cast<W*>(p) = *reinterpret_cast<const W*>(&x);
}

template <int VEC>
__device__ __forceinline__ void store_vec_stream(bf16* p, const BfVec<VEC>& x) {
    typedef typename BfWord<VEC>::type W;
    __stcs(reinterpret_cast<W*>(p), *reinterpret_cast<const W*>(&x));
}

#endif  // KERNELS_COMMON_MISC_BF16_VEC_CUH
