/*
title = "cuBLAS: permute q and k, then one strided-batched GEMM for the full square"
changed = "The baseline: q and k are copied into per-head (B*NH, T, HS) blocks, then cuBLAS computes scale * q k^T for every (b, h) in one batched call."
why = """
cuBLAS's FP32 GEMM is the bar for the arithmetic: tiled, register-blocked, close to the FMA
ceiling. But it cannot skip the upper triangle, so it does twice the useful FLOPs and writes the
whole T x T square (twice the useful bytes); and batching needs a uniform stride between heads,
which the packed qkv layout does not have (head h of sequence b sits at b*T*3C + h*HS), hence
the permute copy first.
"""
block_sizes = [256]

[scratch]
qk = "2 * B * NH * T * HS"   # q then k, each (B*NH, T, HS)

[[launch]]
kernel = "trimat_permute_qk"
grid = ["cdiv(T * HS, block_size)", "B * NH"]
block = "block_size"
args = ["qk", "qkv", "B", "T", "NH", "HS"]

[[launch]]
library = "gemm"
a = "qk"
b = "qk[B * NH * T * HS]"
c = "preatt"
m = "T"
n = "T"
k = "HS"
trans_b = true
alpha = "1.0 / sqrt(HS)"
batch = "B * NH"
stride_a = "T * HS"
stride_b = "T * HS"
stride_c = "T * T"
*/

// q and k of head (b, h) into rows of their own (T, HS) block; v is not needed.
extern "C" __global__ void trimat_permute_qk(float* qk, const float* qkv, int B, int T, int NH, int HS) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)T * HS) return;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int t = i / HS, d = i % HS;
    size_t C = (size_t)NH * HS;
    size_t src = ((size_t)b * T + t) * 3 * C + (size_t)h * HS + d;
    size_t dst = (size_t)bh * T * HS + i;
    qk[dst] = qkv[src];
    qk[(size_t)B * NH * T * HS + dst] = qkv[src + C];
}
