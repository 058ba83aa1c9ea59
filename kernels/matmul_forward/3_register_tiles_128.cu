/*
title = "128x128 tiles, 8x8 outputs per thread in registers, float4 shared loads"
builds_on = 2
changed = "256 threads compute a 128x128 output tile, each an 8x8 block held in registers; inp and weight tiles (128 x 8 along C) are stored transposed in double-buffered shared memory and read back as float4."
why = """
Version 2 does two shared-memory loads per FMA. Here each step along C loads 8 inp and 8 weight
values into registers (four 128-bit loads) and does 64 FMAs with them: 16 FMAs per load, so the
FP32 pipes, not shared memory, become the limit. Each global element is now reused 128 times
per block. Both operands are contiguous along C, so each thread fetches one float4 of each from
global memory and stores it transposed (C-major) into shared memory; a 4-float row padding keeps
those scalar stores conflict-free. Each thread's 8x8 block is split into four 4x4 quadrants 64
rows/columns apart, so a warp's float4 fragment reads hit consecutive addresses (no bank
conflicts). Two shared buffers: the next tile is fetched into registers while the current one is
computed and stored into the idle buffer, so one __syncthreads per 8-wide step suffices and the
global latency hides behind 512 FMAs.
"""
preconditions = ["N % 128 == 0", "OC % 128 == 0", "C % 8 == 0"]

[[launch]]
kernel = "matmul_forward3"
grid = ["OC // 128", "N // 128"]
block = 256
args = ["out", "inp", "weight", "bias", "N", "C", "OC"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = [{ B = 1, T = 128, C = 24, OC = 256 }]
runs = ["seed=0 PRIORITY", "seed=1 SHUFFLE order=3"]
*/

#define TILE 128  // output rows and columns per block
#define TK 8      // C-slice per shared-memory tile
#define PAD 4     // keeps float4 alignment and spreads the transposed stores over all banks

// Load this thread's float4 of a 128 x 8 tile (row-major, C contiguous) from global memory.
__device__ __forceinline__ float4 load_slice(const float* src) {
    return __ldg(reinterpret_cast<const float4*>(src));
}

// Store it transposed: dst[k][row], so the compute loop can read 4 consecutive rows at once.
__device__ __forceinline__ void store_transposed(float (*dst)[TILE + PAD], float4 v, int row, int k) {
    dst[k + 0][row] = v.x;
    dst[k + 1][row] = v.y;
    dst[k + 2][row] = v.z;
    dst[k + 3][row] = v.w;
}

extern "C" __global__ void __launch_bounds__(256, 2)
matmul_forward3(float* out, const float* inp, const float* weight, const float* bias,
                int N, int C, int OC) {
    __shared__ __align__(16) float xs[2][TK][TILE + PAD];  // xs[buf][k][row]
    __shared__ __align__(16) float ws[2][TK][TILE + PAD];  // ws[buf][k][oc]
    const int tid = threadIdx.x;
    const int tx = tid % 16;  // owns columns tx*4..+3 and 64+tx*4..+3 of the tile
    const int ty = tid / 16;  // owns rows    ty*4..+3 and 64+ty*4..+3
    const int row0 = blockIdx.y * TILE;
    const int oc0 = blockIdx.x * TILE;

    // Loading: 128 rows x 8 floats = 256 float4, one per thread: row tid/2, k offset 0 or 4.
    const int lrow = tid / 2;
    const int lk = (tid % 2) * 4;
    const float* xsrc = inp + (size_t)(row0 + lrow) * C + lk;
    const float* wsrc = weight + (size_t)(oc0 + lrow) * C + lk;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;

    store_transposed(xs[0], load_slice(xsrc), lrow, lk);
    store_transposed(ws[0], load_slice(wsrc), lrow, lk);
    __syncthreads();

    const int ntiles = C / TK;
    for (int t = 0; t < ntiles; t++) {
        const int cur = t & 1;
        const bool more = t + 1 < ntiles;
        float4 xnext, wnext;
        if (more) {  // issued now, consumed after the compute below: the latency is hidden
            xnext = load_slice(xsrc + (t + 1) * TK);
            wnext = load_slice(wsrc + (t + 1) * TK);
        }
#pragma unroll
        for (int k = 0; k < TK; k++) {
            float4 x0 = *reinterpret_cast<const float4*>(&xs[cur][k][ty * 4]);
            float4 x1 = *reinterpret_cast<const float4*>(&xs[cur][k][64 + ty * 4]);
            float4 w0 = *reinterpret_cast<const float4*>(&ws[cur][k][tx * 4]);
            float4 w1 = *reinterpret_cast<const float4*>(&ws[cur][k][64 + tx * 4]);
            float a[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
            float b[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (more) {
            // The other buffer was last read in iteration t-1, before its closing barrier.
            store_transposed(xs[cur ^ 1], xnext, lrow, lk);
            store_transposed(ws[cur ^ 1], wnext, lrow, lk);
        }
        __syncthreads();
    }

    // Epilogue: add the bias and write the four 4x4 quadrants as float4 rows.
#pragma unroll
    for (int half_c = 0; half_c < 2; half_c++) {
        const int oc = oc0 + half_c * 64 + tx * 4;
        const float4 b = __ldg(reinterpret_cast<const float4*>(bias + oc));
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int row = row0 + (i / 4) * 64 + ty * 4 + (i % 4);
            const int j0 = half_c * 4;
            float4 v = make_float4(acc[i][j0] + b.x, acc[i][j0 + 1] + b.y,
                                   acc[i][j0 + 2] + b.z, acc[i][j0 + 3] + b.w);
            *reinterpret_cast<float4*>(out + (size_t)row * OC + oc) = v;
        }
    }
}
