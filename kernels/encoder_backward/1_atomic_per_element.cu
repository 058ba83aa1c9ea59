/*
title = "One thread per dout element, atomicAdd into dwte and dwpe"
deterministic = false  # float atomicAdd: the sum's order, and so its last bits, vary from run to run
changed = "The starting point: every element of dout is added to its two destinations with atomicAdd."
why = """
Positions holding the same token write the same dwte row, and the B positions of a time step
write the same dwpe row, so plain += would lose updates; atomicAdd makes each add indivisible.
Consecutive threads own consecutive channels, so the reads of dout and the atomics (performed
in L2) are coalesced. Simple and fast, but the order in which colliding adds land varies from
run to run, and float addition is not associative: the bits of dwte and dwpe are not
reproducible.
"""
block_sizes = [64, 128, 256, 512, 1024]

[[launch]]
kernel = "encoder_backward1"
grid = "cdiv(N * C, block_size)"
block = "block_size"
args = ["dwte", "dwpe", "dout", "inp", "B", "T", "C", "V"]
*/

extern "C" __global__ void encoder_backward1(float* dwte, float* dwpe, const float* dout,
                                             const int* inp, int B, int T, int C, int V) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;  // 32-bit: B*T*C < 2^31 - 1024 (family precondition)
    if (idx >= B * T * C) return;
    int bt = idx / C, c = idx % C;
    int t = bt % T;
    int token = inp[bt];
    float d = dout[idx];
    if (token >= 0 && token < V) atomicAdd(dwte + (size_t)token * C + c, d);
    atomicAdd(dwpe + (size_t)t * C + c, d);
}
