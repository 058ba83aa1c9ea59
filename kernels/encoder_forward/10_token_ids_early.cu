/*
title = "Version 3 with the token's round trip shortened: all ids asked of L2 at the start, wpe loaded before the token"
builds_on = 3
changed = "Version 3's grid of float4 threads with two changes at the top of the kernel: block 0 asks L2 for the whole of inp (one bulk prefetch, 32 KB at the default sizes), so every later block finds its token in L2 instead of DRAM; and each thread loads its wpe float4, which needs no token, before its token, so the two are in flight together and only the wte load waits."
why = """
Where version 3's time goes, measured with experiment copies beside it: with the token ids in
table order (the rows read as a copy reads them) it is only ~2% faster, while with the token not
loaded at all (computed from the position, a diagnostic that fails the check) it is ~4% faster:
the token's round trip, not the gather's pattern, is the larger part of the gap to the copy.

Each thread of version 3 waits for its token (a DRAM round trip: the ids are read nowhere else
first) and only then issues its wte and wpe loads. Two changes remove most of that wait without
changing the grid's shape, which versions 6 and 8 showed is worth keeping:
* block 0's first thread asks L2 for all of inp with one bulk prefetch (sm_90; a hint, nothing on
  older GPUs). The first wave's threads still go to DRAM for their ids, but the later blocks start
  after the ids have landed in L2, and their token load is an L2 hit;
* the wpe load needs no token: it is issued before the token load, so its latency overlaps the
  token's instead of following it.
A token outside the vocabulary still writes NaN (the wpe value loaded for it is dropped).
What is left of the gap is the first wave's round trip on its ids, not address translation (warming
wte's pages first changed nothing).

The prediction, the measurements and the experiments: results/notes/encoder_forward.md.
"""
preconditions = ["C % 4 == 0"]
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "encoder_forward10"
grid = "cdiv(N * C // 4, block_size)"
block = "block_size"
args = ["out", "inp", "wte", "wpe", "B", "T", "C", "V"]

[[emulate]]
sizes = ["test", { B = 2, T = 9, C = 784, V = 50 }, { B = 5, T = 67, C = 64, V = 300 },
  { B = 1, T = 3, C = 8, V = 7 }, { B = 3, T = 5, C = 16, V = 100 }]
runs = ["bs=64 seed=0 PRIORITY sms=1", "bs=128 seed=1 SHUFFLE", "bs=256 seed=2 PRIORITY sms=1",
  "bs=512 seed=0 SHUFFLE", "bs=1024 seed=1 PRIORITY sms=1"]
*/
#include "l2_prefetch.cuh"  // prefetch_l2_ints: inp asked of L2 in one instruction (sm_90)

extern "C" __global__ void encoder_forward10(float* out, const int* __restrict__ inp,
                                             const float* __restrict__ wte,
                                             const float* __restrict__ wpe, int B, int T, int C,
                                             int V) {
    if (blockIdx.x == 0 && threadIdx.x == 0) prefetch_l2_ints(inp, B * T);
    int C4 = C / 4;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // which float4 of out
    if (idx >= B * T * C4) return;
    int bt = idx / C4, c4 = idx % C4;
    int t = bt % T;
    float4 p = __ldg(reinterpret_cast<const float4*>(wpe + (size_t)t * C) + c4);  // needs no token
    int token = __ldg(inp + bt);
    if (token < 0 || token >= V) {  // outside the vocabulary: NaN, loudly
        float nan = __int_as_float(0x7fc00000);
        __stcs(reinterpret_cast<float4*>(out) + idx, make_float4(nan, nan, nan, nan));
        return;
    }
    float4 w = __ldg(reinterpret_cast<const float4*>(wte + (size_t)token * C) + c4);
    __stcs(reinterpret_cast<float4*>(out) + idx, make_float4(w.x + p.x, w.y + p.y, w.z + p.z, w.w + p.w));
}
