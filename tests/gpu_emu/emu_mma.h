// emu_mma.h: kernels/common/mma.cuh (the same names and signatures) for the
// emulator. Each function is a warp collective: the 32 lanes' registers are gathered into whole
// matrices using the PTX ISA's fragment tables, written here from the ISA text and not from the
// kernels ("Matrix Fragments for mma.m16n8k16 with floating point type", "... mma.m16n8k8",
// "ldmatrix"):
//   groupID g = laneid >> 2, threadID_in_group t = laneid % 4.
//   m16n8k16 .bf16 A (a0..a7, two per register, low half first):
//       row = g for ai with 0 <= i < 2 or 4 <= i < 6, else g + 8
//       col = 2t + (i & 1) for i < 4, 2t + (i & 1) + 8 for i >= 4
//   m16n8k16 .bf16 B (b0..b3): row = 2t + (i & 1) for i < 2, 2t + (i & 1) + 8 for i >= 2; col = g
//   C/D (c0..c3, f32): row = g for c0, c1, g + 8 for c2, c3; col = 2t + (i & 1)
//   m16n8k8 .tf32 A (a0..a3): row = g for a0, a2, g + 8 for a1, a3; col = t for a0, a1, t + 4 for a2, a3
//   m16n8k8 .tf32 B (b0, b1): row = t for b0, t + 4 for b1; col = g
//   ldmatrix .m8n8 .b16: lanes 8m .. 8m + 7 give the addresses of rows 0..7 of matrix m; lane l
//       receives, of each matrix, row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (low half first);
//       with .trans, the matrix transposed: elements (row 2 (l % 4), col l / 4) and
//       (row 2 (l % 4) + 1, col l / 4).
// Defines the real headers' include guards, so a kernel's #include of them is skipped.
#pragma once
#include "emu_bf16.h"

#define KERNELS_COMMON_MMA_CUH

inline float emu_bf16_bits(uint32_t h) { return __bfloat162float(__nv_bfloat16{uint16_t(h & 0xffff)}); }
inline float emu_tf32_bits(uint32_t u) {  // the tensor core reads the top 19 bits
    u &= 0xffffe000u;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    float out[4];
    warp_collective(10,
        [&](WarpSlot& s) {
            for (int i = 0; i < 4; i++) s.u[i] = a[i];
            s.u[4] = b0; s.u[5] = b1;
            for (int i = 0; i < 4; i++) s.f[i] = d[i];
        },
        [&](WarpSlot* all, int lane) {
            float A[16][16], B[16][8], C[16][8];
            for (int l = 0; l < 32; l++) {
                int g = l >> 2, t = l % 4;
                for (int i = 0; i < 8; i++) {
                    uint32_t reg = all[l].u[i / 2];
                    float v = emu_bf16_bits(i % 2 ? reg >> 16 : reg);
                    int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
                    int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
                    A[row][col] = v;
                }
                for (int i = 0; i < 4; i++) {
                    uint32_t reg = all[l].u[4 + i / 2];
                    float v = emu_bf16_bits(i % 2 ? reg >> 16 : reg);
                    int row = 2 * t + (i & 1) + (i >= 2 ? 8 : 0);
                    B[row][g] = v;
                }
                for (int i = 0; i < 4; i++) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = all[l].f[i];
            }
            int g = lane >> 2, t = lane % 4;
            for (int i = 0; i < 4; i++) {
                int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
                double acc = C[row][col];
                for (int k = 0; k < 16; k++) acc += double(A[row][k]) * double(B[k][col]);
                out[i] = float(acc);
            }
        });
    for (int i = 0; i < 4; i++) d[i] = out[i];
}

inline void mma_tf32_1688(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    float out[4];
    warp_collective(11,
        [&](WarpSlot& s) {
            for (int i = 0; i < 4; i++) s.u[i] = a[i];
            s.u[4] = b0; s.u[5] = b1;
            for (int i = 0; i < 4; i++) s.f[i] = d[i];
        },
        [&](WarpSlot* all, int lane) {
            float A[16][8], B[8][8], C[16][8];
            for (int l = 0; l < 32; l++) {
                int g = l >> 2, t = l % 4;
                for (int i = 0; i < 4; i++) {
                    int row = (i == 0 || i == 2) ? g : g + 8;
                    int col = (i < 2) ? t : t + 4;
                    A[row][col] = emu_tf32_bits(all[l].u[i]);
                }
                B[t][g] = emu_tf32_bits(all[l].u[4]);
                B[t + 4][g] = emu_tf32_bits(all[l].u[5]);
                for (int i = 0; i < 4; i++) C[g + (i >= 2 ? 8 : 0)][2 * t + (i & 1)] = all[l].f[i];
            }
            int g = lane >> 2, t = lane % 4;
            for (int i = 0; i < 4; i++) {
                int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
                double acc = C[row][col];
                for (int k = 0; k < 8; k++) acc += double(A[row][k]) * double(B[k][col]);
                out[i] = float(acc);
            }
        });
    for (int i = 0; i < 4; i++) d[i] = out[i];
}

inline void emu_ldmatrix(unsigned (&r)[4], const void* p, bool trans) {
    emu_check_smem(p, 16, 16, "ldmatrix row address");
    warp_collective(trans ? 21 : 20, [&](WarpSlot& s) { s.addr = p; },
        [&](WarpSlot* all, int lane) {
            for (int m = 0; m < 4; m++) {
                auto elem = [&](int row, int col) {
                    uint16_t v;
                    std::memcpy(&v, static_cast<const unsigned char*>(all[8 * m + row].addr) + 2 * col, 2);
                    return uint32_t(v);
                };
                int g = lane / 4, t = lane % 4;
                uint32_t lo = trans ? elem(2 * t, g) : elem(g, 2 * t);
                uint32_t hi = trans ? elem(2 * t + 1, g) : elem(g, 2 * t + 1);
                r[m] = lo | (hi << 16);
            }
        });
}
// mma.cuh also takes 32-bit shared-space addresses (smem_addr): here, offsets into `smem`.
inline uint32_t smem_addr(const void* p) {
    emu_check_smem(p, 0, 1, "smem_addr");
    return uint32_t(static_cast<const unsigned char*>(p) - smem);
}
inline void ldmatrix_x4(unsigned (&r)[4], const void* p) { emu_ldmatrix(r, p, false); }
inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) { emu_ldmatrix(r, p, true); }
inline void ldmatrix_x4(unsigned (&r)[4], uint32_t a) { emu_ldmatrix(r, smem + a, false); }
inline void ldmatrix_x4_trans(unsigned (&r)[4], uint32_t a) { emu_ldmatrix(r, smem + a, true); }

inline void emu_cp_async(void* dst, const void* src, bool valid, int bytes) {
    emu_check_smem(dst, bytes, bytes, "cp.async destination");
    PendingCopy c;
    c.dst = dst;
    c.bytes = bytes;
    c.group = me().committed;
    if (valid) {
        emu_check_global(src, bytes, "cp.async source");
        std::memcpy(c.data, src, bytes);
    } else {
        std::memset(c.data, 0, bytes);
    }
    if (emu.cp_mode == EARLY) std::memcpy(dst, c.data, bytes);
    else me().pending.push_back(c);
}
inline void cp_async_16(void* dst, const void* src, bool valid) { emu_cp_async(dst, src, valid, 16); }
inline void cp_async_16(uint32_t dst, const void* src, bool valid) { emu_cp_async(smem + dst, src, valid, 16); }
inline void cp_async_4(void* dst, const void* src, bool valid) { emu_cp_async(dst, src, valid, 4); }
inline void cp_async_commit() { me().committed++; }
template <int N>
inline void cp_async_wait() {
    auto& f = me();
    std::vector<PendingCopy> keep;
    for (auto& c : f.pending) {
        if (c.group < f.committed - N) std::memcpy(c.dst, c.data, c.bytes);
        else keep.push_back(c);
    }
    f.pending.swap(keep);
}

inline unsigned pack_bf16x2(float lo, float hi) {
    return unsigned(__float2bfloat16_rn(lo).bits) | (unsigned(__float2bfloat16_rn(hi).bits) << 16);
}
inline unsigned to_tf32(float x) {  // cvt.rna.tf32.f32: nearest, ties away from zero
    uint32_t u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;
    return u & 0xffffe000u;
}
