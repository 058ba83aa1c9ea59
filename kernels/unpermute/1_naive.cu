/*
title = "One thread per output element"
changed = "The starting point: each thread finds where its (b, t, h, d) element of out lives in inp and copies it."
why = """
Written from the output's side so that stores are coalesced; loads are coalesced within each
head's run of HS floats. One scalar per thread: the divisions that locate it cost more than the
copy itself.
"""
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "unpermute1"
grid = "cdiv(N, block_size)"
block = "block_size"
args = ["out", "inp", "B", "T", "NH", "HS"]
*/

extern "C" __global__ void unpermute1(float* out, const float* inp, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t N = (size_t)B * T * NH * HS;
    if (idx >= N) return;
    int d = idx % HS;
    int h = (idx / HS) % NH;
    int t = (idx / ((size_t)HS * NH)) % T;
    int b = idx / ((size_t)HS * NH * T);
    out[idx] = inp[(((size_t)b * NH + h) * T + t) * HS + d];
}
