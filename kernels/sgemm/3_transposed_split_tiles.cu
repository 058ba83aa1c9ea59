/*
title = "A transposed in shared memory, split 4x4 micro-tiles: conflict-free 128-bit fragment loads"
builds_on = 2
changed = "A's slice is stored transposed (As[k][row], rows padded by 4) and each thread's 8x8 outputs are four 4x4 quadrants 64 rows and 64 columns apart, so all fragment loads are float4 and no warp hits a bank twice."
why = """
With As[k][row], a thread's 8 A values for one k are two float4 loads instead of 8 scalar ones:
per step 4 shared loads (128-bit) feed 64 FMAs. The split micro-tile places thread tx's columns
at tx*4 and 64 + tx*4: the 16 threads of a row group read 16 consecutive float4 (256 contiguous
bytes), which the shared memory serves without conflicts, where version 2's tx*8 stride put two
threads on each bank. A arrives from global memory row-major (one float4 along K per thread)
and is scattered into 4 columns of As; padding each As row to 132 floats lands the two K
halves of a warp's stores on different banks.
"""
preconditions = ["M % 128 == 0", "N % 128 == 0", "K % 8 == 0"]

[[launch]]
kernel = "sgemm3"
grid = ["N // 128", "M // 128"]
block = 256
args = ["C", "A", "B", "M", "N", "K"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = [{ M = 128, N = 256, K = 24 }]
runs = ["seed=0 PRIORITY", "seed=1 SHUFFLE order=3"]
*/

#define APAD 4

extern "C" __global__ void __launch_bounds__(256)
sgemm3(float* C, const float* A, const float* B, int M, int N, int K) {
    __shared__ __align__(16) float As[8][128 + APAD];  // As[k][row]: A's slice transposed
    __shared__ __align__(16) float Bs[8][128];         // Bs[k][col]
    const int tid = threadIdx.x;
    const int tx = tid % 16;  // columns tx*4..+3 and 64+tx*4..+3
    const int ty = tid / 16;  // rows    ty*4..+3 and 64+ty*4..+3
    const int row0 = blockIdx.y * 128;
    const int col0 = blockIdx.x * 128;
    const int arow = tid / 2, ak = (tid % 2) * 4;
    const float* asrc = A + (size_t)(row0 + arow) * K + ak;
    const float* bsrc = B + (size_t)(tid / 32) * N + col0 + (tid % 32) * 4;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < K; k0 += 8) {
        float4 av = __ldg(reinterpret_cast<const float4*>(asrc + k0));
        As[ak + 0][arow] = av.x;
        As[ak + 1][arow] = av.y;
        As[ak + 2][arow] = av.z;
        As[ak + 3][arow] = av.w;
        *reinterpret_cast<float4*>(&Bs[tid / 32][(tid % 32) * 4]) = __ldg(reinterpret_cast<const float4*>(bsrc + (size_t)k0 * N));
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float4 a0 = *reinterpret_cast<const float4*>(&As[k][ty * 4]);
            float4 a1 = *reinterpret_cast<const float4*>(&As[k][64 + ty * 4]);
            float4 b0 = *reinterpret_cast<const float4*>(&Bs[k][tx * 4]);
            float4 b1 = *reinterpret_cast<const float4*>(&Bs[k][64 + tx * 4]);
            float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

    // acc[i][j]: row (i/4)*64 + ty*4 + i%4, column (j/4)*64 + tx*4 + j%4 of the tile.
#pragma unroll
    for (int i = 0; i < 8; i++) {
        float* c = C + (size_t)(row0 + (i / 4) * 64 + ty * 4 + (i % 4)) * N + col0 + tx * 4;
        *reinterpret_cast<float4*>(c) = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        *reinterpret_cast<float4*>(c + 64) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
}
