/*
title = "Shared-memory tiles, 128-bit loads and stores, only the lower-triangle tiles launched"
builds_on = 3
changed = "A block stages 64 rows of q and 64 of k in shared memory (transposed, HS in chunks of 32) with float4 loads; each thread computes 4 x 4 scores from 128-bit shared loads and stores them as float4. The grid enumerates only the tiles on or below the diagonal."
why = """
Global loads now happen once per tile instead of once per thread: each q and k value is read
from memory by one thread and then served 16 times from shared memory. Storing the tiles
transposed (Qt[d][row], Kt[d][col]) makes a thread's 4 rows and 4 columns contiguous, so one
LDS.128 fetches each: 2 shared loads per 16 FMAs, broadcast for q and conflict-free for k. The
linear tile index is unpacked into (row tile, column tile <= row tile), so no block is launched
above the diagonal. Output rows go out as float4 when T % 4 == 0 (a float4 straddling the
diagonal also stores its above-diagonal products: harmless, those entries are not part of the op).
"""
preconditions = ["HS % 4 == 0"]

[[launch]]
kernel = "trimat4"
grid = ["cdiv(T, 64) * (cdiv(T, 64) + 1) // 2", "B * NH"]
block = 256
args = ["preatt", "qkv", "B", "T", "NH", "HS", "1.0 / sqrt(HS)"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = [{ B = 1, T = 70, NH = 2, HS = 8 }]
runs = ["seed=0 PRIORITY", "seed=1 SHUFFLE order=3"]
*/

#define TILE 64
#define DK 32  // head channels staged per step: 2 x 32 x 64 floats = 16 KB of shared memory

extern "C" __global__ void __launch_bounds__(256) trimat4(float* preatt, const float* qkv, int B, int T,
                                                          int NH, int HS, float scale) {
    __shared__ __align__(16) float Qt[DK][TILE];
    __shared__ __align__(16) float Kt[DK][TILE];
    // Linear index -> (ti, tj) with tj <= ti: x = ti (ti + 1) / 2 + tj.
    int x = blockIdx.x;
    int ti = (int)((sqrtf(8.0f * x + 1.0f) - 1.0f) * 0.5f);
    while (ti * (ti + 1) / 2 > x) ti--;  // float rounding of the square root
    while ((ti + 1) * (ti + 2) / 2 <= x) ti++;
    int tj = x - ti * (ti + 1) / 2;
    int row0 = ti * TILE, col0 = tj * TILE;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    size_t C = (size_t)NH * HS, rs = 3 * C;
    const float* qb = qkv + (size_t)b * T * rs + (size_t)h * HS;
    const float* kb = qb + C;

    float acc[4][4] = {};
    for (int d0 = 0; d0 < HS; d0 += DK) {
        __syncthreads();  // the previous chunk has been consumed
        // Consecutive threads take consecutive rows, so the transposed stores hit consecutive banks.
        for (int i = tid; i < TILE * (DK / 4); i += 256) {
            int r = i % TILE, d = d0 + 4 * (i / TILE);
            float4 qv = make_float4(0.f, 0.f, 0.f, 0.f), kv = qv;
            if (d < HS) {  // HS % 4 == 0: the whole float4 is in range
                if (row0 + r < T) qv = *reinterpret_cast<const float4*>(qb + (size_t)(row0 + r) * rs + d);
                if (col0 + r < T) kv = *reinterpret_cast<const float4*>(kb + (size_t)(col0 + r) * rs + d);
            }
            int dd = d - d0;
            Qt[dd][r] = qv.x; Qt[dd + 1][r] = qv.y; Qt[dd + 2][r] = qv.z; Qt[dd + 3][r] = qv.w;
            Kt[dd][r] = kv.x; Kt[dd + 1][r] = kv.y; Kt[dd + 2][r] = kv.z; Kt[dd + 3][r] = kv.w;
        }
        __syncthreads();
#pragma unroll
        for (int d = 0; d < DK; d++) {
            float4 qv = *reinterpret_cast<const float4*>(&Qt[d][4 * ty]);
            float4 kv = *reinterpret_cast<const float4*>(&Kt[d][4 * tx]);
            float qa[4] = {qv.x, qv.y, qv.z, qv.w}, ka[4] = {kv.x, kv.y, kv.z, kv.w};
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int c = 0; c < 4; c++) acc[a][c] = fmaf(qa[a], ka[c], acc[a][c]);
        }
    }
    int t2 = col0 + 4 * tx;
#pragma unroll
    for (int a = 0; a < 4; a++) {
        int t = row0 + 4 * ty + a;
        if (t >= T || t2 > t) continue;  // out of range, or all four columns above the diagonal
        float* dst = preatt + ((size_t)bh * T + t) * T + t2;
        if ((T & 3) == 0) {  // row starts and t2 are multiples of 4: aligned, and t2 + 3 < T
            *reinterpret_cast<float4*>(dst) = make_float4(acc[a][0] * scale, acc[a][1] * scale,
                                                          acc[a][2] * scale, acc[a][3] * scale);
        } else {
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (t2 + c <= t) dst[c] = acc[a][c] * scale;  // t2 + c <= t < T
        }
    }
}
