// permute_units.cuh: the permute and its inverse written from the input's side, in 16-byte units
// (permute 4 at fp32, 5 at bf16; unpermute 4 at fp32): the same bits move at either precision,
// so one function serves both.
//
// inp is (B, T, 3, NH, HS); q, k and v are (B, NH, T, HS). A head's row of HS values is U units
// of 16 bytes (U = HS * element bytes / 16; the versions require it whole). Thread i moves unit i
// of inp, in inp's order: consecutive threads read consecutive 16-byte units, so the reads are
// one sequential stream, exactly a copy's; the stores land in runs of U units (one head's row,
// 256 bytes at fp32 and HS = 64, 128 at bf16), a whole number of 32-byte sectors each.
//
// permute_unit(q, k, v, inp, T, NH, U, i): unit i (i < B * T * 3 * NH * U, which the versions'
// preconditions keep below 2^31 so all index arithmetic is 32-bit).
//
// unpermute_unit(out, inp, T, NH, U, i): the inverse for the attention's output: inp is (B, NH,
// T, HS) and out (B, T, NH, HS). Unit i of inp, in inp's order (i < B * NH * T * U < 2^31): the
// reads are again one sequential stream, and the stores land in runs of U units, one head's row,
// C values apart.

#ifndef KERNELS_COMMON_PERMUTE_UNITS_CUH
#define KERNELS_COMMON_PERMUTE_UNITS_CUH

__device__ __forceinline__ void permute_unit(int4* q, int4* k, int4* v, const int4* inp, int T, int NH,
                                             int U, unsigned i) {
    const unsigned head_units = (unsigned)NH * U;  // one of q, k, v in one position's row
    const unsigned row = i / (3 * head_units), r = i % (3 * head_units);
    const unsigned which = r / head_units, h = r % head_units / U, d = r % U;
    const unsigned b = row / T, t = row % T;
    int4 x = __ldcs(inp + i);  // read once: streaming
    int4* dst = which == 0 ? q : (which == 1 ? k : v);
    __stcs(dst + ((b * NH + h) * T + t) * U + d, x);  // < the unit count: 32-bit is enough
}

__device__ __forceinline__ void unpermute_unit(int4* out, const int4* inp, int T, int NH, int U, unsigned i) {
    const unsigned row = i / U, d = i % U;  // row = (b * NH + h) * T + t: one head's row of inp
    const unsigned t = row % T, bh = row / T;
    const unsigned b = bh / NH, h = bh % NH;
    int4 x = __ldcs(inp + i);  // read once: streaming
    __stcs(out + ((b * T + t) * NH + h) * U + d, x);  // < the unit count: 32-bit is enough
}

#endif  // KERNELS_COMMON_PERMUTE_UNITS_CUH
