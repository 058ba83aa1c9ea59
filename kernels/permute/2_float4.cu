/*
title = "128-bit loads and stores, streaming hints"
builds_on = 1
changed = "Each thread moves one float4 of q, k and v (12 floats) instead of one float of each; a 2-D grid (blockIdx.y = the (b, h) pair) keeps the index arithmetic in 32 bits."
why = """
A head's row of HS floats is contiguous on both sides, so with HS % 4 == 0 four neighbours can
travel as one 128-bit access: a quarter of the instructions and of the index arithmetic, and
three independent 16-byte loads in flight per thread. Version 1's 64-bit divisions are emulated
in software (dozens of instructions each); here blockIdx.y names the head and only one 32-bit
division by HS/4 is left. Nothing is reused, so loads and stores
carry the streaming hints (__ldcs/__stcs) and do not evict data from L2 that others still need.
"""
preconditions = ["HS % 4 == 0", "B * NH <= 65535"]
block_sizes = [128, 256, 512, 1024]

[[launch]]
kernel = "permute2"
grid = ["cdiv(T * HS / 4, block_size)", "B * NH"]
block = "block_size"
args = ["q", "k", "v", "inp", "B", "T", "NH", "HS"]
*/

extern "C" __global__ void permute2(float* q, float* k, float* v, const float* inp,
                                    int B, int T, int NH, int HS) {
    int hs4 = HS / 4;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;  // a float4 of this head's (T, HS) block
    if (i >= (unsigned)T * hs4) return;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    int t = i / hs4, d4 = i % hs4;
    size_t C4 = (size_t)NH * hs4;
    // HS % 4 == 0 makes C a multiple of 4 too, so every float4 below is 16-byte aligned.
    const float4* src = reinterpret_cast<const float4*>(inp) + ((size_t)b * T + t) * 3 * C4 + (size_t)h * hs4 + d4;
    size_t dst = (size_t)bh * T * hs4 + i;
    float4 vq = __ldcs(src);
    float4 vk = __ldcs(src + C4);
    float4 vv = __ldcs(src + 2 * C4);
    __stcs(reinterpret_cast<float4*>(q) + dst, vq);
    __stcs(reinterpret_cast<float4*>(k) + dst, vk);
    __stcs(reinterpret_cast<float4*>(v) + dst, vv);
}
