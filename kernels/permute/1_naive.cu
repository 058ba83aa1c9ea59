/*
title = "One thread per output element"
changed = "The starting point: each thread computes where its (b, h, t, d) element of q lives in qkv and copies it, and the same for k and v."
why = """
The copy is written from the output's side: consecutive threads write consecutive addresses of
q, k and v (coalesced stores), and read runs of HS consecutive floats of qkv (coalesced within a
head's row). Each thread moves three scalars; the index arithmetic (divisions by HS, T, NH) is
a large share of its work.
"""
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "permute1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["q", "k", "v", "inp", "B", "T", "NH", "HS"]
*/

extern "C" __global__ void permute1(float* q, float* k, float* v, const float* inp,
                                    int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t N = (size_t)B * NH * T * HS;
    if (idx >= N) return;
    int d = idx % HS;
    int t = (idx / HS) % T;
    int h = (idx / ((size_t)HS * T)) % NH;
    int b = idx / ((size_t)HS * T * NH);
    size_t C = (size_t)NH * HS;
    size_t src = ((size_t)b * T + t) * 3 * C + (size_t)h * HS + d;
    q[idx] = inp[src];
    k[idx] = inp[src + C];
    v[idx] = inp[src + 2 * C];
}
