"""Times v7 (as in the tree) and its main loop alone at M=16384, N=3072, K=768, events over 20 launches."""
import os, numpy as np
import pycuda.autoprimaryctx  # noqa
import pycuda.driver as drv
from pycuda.compiler import SourceModule
from workbench.tensor_maps import encode, on_device
here = os.path.dirname(os.path.abspath(__file__)); root = os.path.abspath(os.path.join(here, "../../.."))
M, N, K = 16384, 3072, 768
rng = np.random.default_rng(0)
A = drv.to_device(rng.integers(0, 2**16, (M, K), dtype=np.uint16) & 0x3FFF)
B = drv.to_device(rng.integers(0, 2**16, (N, K), dtype=np.uint16) & 0x3FFF)
bias = drv.to_device(np.zeros(N, np.uint16)); out = drv.mem_alloc(M * N * 2); pre = drv.mem_alloc(M * N * 2)
ma = on_device(encode(int(A), M, K, 128, 64, "bf16"))
VARIANTS = {"v7.cu": (192, 4, 216128), "v7_mainloop.cu": (192, 4, 216128), "ml_192x4.cu": (192, 4, 0), "ml_192x5.cu": (192, 5, 0),
            "ml_192x3.cu": (192, 3, 0), "ml_256x4.cu": (256, 4, 0)}
import sys
for name, (bn, st, smem) in VARIANTS.items():
    if len(sys.argv) > 1 and name not in sys.argv[1:]:
        continue
    smem = smem or 1024 + st * (128 + bn) * 128 + 16 * st
    mb = on_device(encode(int(B), N, K, bn, 64, "bf16"))
    mod = SourceModule(open(os.path.join(here, name)).read(), arch="sm_90a", no_extern_c=True, options=["-O3", "--use_fast_math"],
                       include_dirs=[here, os.path.join(root, "kernels/common")])
    f = mod.get_function("matmul_forward_gelu7")
    f.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    f.prepare("PPPPPiii")
    args = [np.uintp(ma), np.uintp(mb), np.uintp(int(out)), np.uintp(int(pre)), np.uintp(int(bias)), np.int32(M), np.int32(N), np.int32(K)]
    for _ in range(3): f.prepared_call((132, 1, 1), (384, 1, 1), *args, shared_size=smem)
    ts = []
    for _ in range(20):
        e0, e1 = drv.Event(), drv.Event(); e0.record()
        f.prepared_call((132, 1, 1), (384, 1, 1), *args, shared_size=smem); e1.record(); e1.synchronize()
        ts.append(e1.time_since(e0) * 1e3)
    print(f"{name}: median {np.median(ts):.1f} us  min {min(ts):.1f}  ({2*M*N*K/np.median(ts)/1e6:.0f} TFLOP/s)", flush=True)
