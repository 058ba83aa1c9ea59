/*
title = "bf16: a block per 32-column stripe, rows split across warps, fp32 sums"
builds_on = 4
precision = "bf16"
changed = "The first bf16 version: dout and dbias are bf16. Like version 4, lanes sit on consecutive columns (coalesced 64-byte rows of bf16), the block's warps take every 8th row each, and their partial sums meet in shared memory; all sums are fp32 and dbias is rounded to bf16 once, after the +=."
why = """
Nothing new in the parallel structure: the lesson is the storage. dout is read as bf16, half the
bytes of version 4, and converted to fp32 before it is added, because a bf16 running sum of
thousands of terms would lose everything past its third digit. Any OC works (no vector width),
so this version covers the odd test sizes; version 8 is the fast one.
"""
block_sizes = [256]

[[launch]]
kernel = "bias_bf16_stripes"
grid = "cdiv(OC, 32)"
block = [32, 8]
args = ["dbias", "dout", "N", "OC"]

[[emulate]]
slow = true  # coverage CI runs in its slow set (the build would lengthen the quick run)
sizes = [{ B = 2, T = 3, OC = 37 }, { B = 1, T = 300, OC = 520 }]
runs = ["bs=256 seed=0 PRIORITY", "bs=256 seed=1 SHUFFLE order=3"]
*/

#include "bf16.cuh"

extern "C" __global__ void bias_bf16_stripes(bf16* dbias, const bf16* dout, int N, int OC) {
    __shared__ float group_sums[8][32];
    const int lane = threadIdx.x;
    const int oc = blockIdx.x * 32 + lane;
    float sum = 0.0f;
    if (oc < OC) {
        for (int row = threadIdx.y; row < N; row += blockDim.y) sum += to_float(dout[(size_t)row * OC + oc]);
    }
    group_sums[threadIdx.y][lane] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && oc < OC) {
        float s = 0.0f;
        for (int g = 0; g < 8; g++) s += group_sums[g][lane];
        dbias[oc] = to_bf16(to_float(dbias[oc]) + s);
    }
}
