/*
title = "Version 3 with the token's round trip shortened: all ids asked of L2 at the start, wpe loaded before the token"
changed = "Version 3's grid of float4 threads with two changes at the top of the kernel: block 0 asks L2 for the whole of inp (one bulk prefetch, 32 KB at the default sizes), so every later block finds its token in L2 instead of DRAM; and each thread loads its wpe float4, which needs no token, before its token, so the two are in flight together and only the wte load waits."
why = """
Where version 3's time goes, measured on the H100 (2026-11-24, experiment copies of version 3
timed beside it, L2 flushed): with the token ids in sequential order (id n = n % V: the rows are
read in table order, as a copy reads) 25.7 us, against 26.2 us with the family's random ids and
26.1 us with the random ids sorted: the gather's pattern costs ~2%. With the token not loaded at
all (computed from the position, a diagnostic that fails the check) 25.0 us against 26.0 us:
the token's round trip costs ~4%, and it is the larger part of the gap to the copy (24.0 us).
Version 9's header guessed the pattern; this measurement says the dependency.

Each thread of version 3 waits for its token (a DRAM round trip: the 32 KB of ids are read
nowhere else first) and only then issues its wte and wpe loads. Two changes remove most of that
wait without changing the grid's shape, which versions 6 and 8 showed is worth keeping:
* block 0's first thread asks L2 for all of inp with one bulk prefetch (sm_90; a hint, nothing
  on older GPUs). The first wave's threads still go to DRAM for their ids, but the other ~80% of
  blocks start after the ids have landed in L2, and their token load is an L2 hit;
* the wpe load needs no token: it is issued before the token load, so its latency overlaps the
  token's instead of following it.
A token outside the vocabulary still writes NaN (the wpe value loaded for it is dropped).
Tried beside version 3 (bench encoder_forward, experiment copies, two runs): the prefetch alone
25.9 and 25.7 us (version 3 25.7 and 25.9); with the wpe load first 25.3 and 25.7 us. Prediction:
~25.4 us, 0.94-0.95x the copy; the rest of the gap is the first wave's DRAM round trip on its
ids and the gather's pattern.

Measured on the H100 (2026-11-24, commit 7c8eef7): bench --all 25.4 us against the copy's 24.2
us (0.95x), version 3 26.2 us (0.92x) in the same run; interleaved with version 3 three times
each (block 256, results/h100-encoder-forward-interleaved-2026-11-24.txt) 25.8, 25.8 and 26.0 us
against 26.3, 26.2 and 26.1: 1.3% faster, 0.92-0.93x the copy timed beside each. So about the
prediction, and the bar of 0.95x is met in one measurement of two. Three more runs of the family
(same file): 25.7, 26.0 and 25.7 us (0.91-0.94x), version 3 25.9, 25.8 and 26.2. Two or four
float4 of one row a thread (one token load for all of them; experiments beside it in those runs)
took 25.5-25.8 us: no faster, so the token wait left is not per thread but the first wave's.

Is the rest address translation? The gathers touch all 77 of wte's 2 MB pages at random. Tried on
the H100 (2026-11-25, experiment copies beside this version, three rounds, block 256): the first
block(s) touching every page of wte (a prefetch a 2 MB or a 64 KB page) before the gathers, 25.3-
25.6 us against this version's 25.5: no change, so the page walks cost nothing measurable. With
V = 2048 (a 6 MB wte whose rows are reused from L2) 22.6 us, 1.05x the copy: what is left is the
reads of distinct rows from DRAM after a dependent load, not their addresses.
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
