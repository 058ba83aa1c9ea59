"""One launch of a variant (argv[1]) at a small shape with the given dynamic shared memory (argv[2])."""
import os, sys, numpy as np
import pycuda.autoprimaryctx  # noqa
import pycuda.driver as drv
from pycuda.compiler import SourceModule
from workbench.tensor_maps import encode, on_device
here = os.path.dirname(os.path.abspath(__file__)); root = os.path.abspath(os.path.join(here, "../../.."))
M, N, K = int(os.environ.get("M", 1024)), 384, 256
smem = int(sys.argv[2])
A = drv.to_device(np.full((M, K), 0x3F80, np.uint16)); B = drv.to_device(np.full((N, K), 0x3F80, np.uint16))
bias = drv.to_device(np.zeros(N, np.uint16)); out = drv.mem_alloc(M * N * 2); pre = drv.mem_alloc(M * N * 2)
ma, mb = on_device(encode(int(A), M, K, 128, 64, "bf16")), on_device(encode(int(B), N, K, 192, 64, "bf16"))
mod = SourceModule(open(os.path.join(here, sys.argv[1])).read(), arch="sm_90a", no_extern_c=True, options=["-O3", "--use_fast_math", "-lineinfo"],
                   include_dirs=[here, os.path.join(root, "kernels/common")])
f = mod.get_function("matmul_forward_gelu7")
f.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
f.prepare("PPPPPiii")
f.prepared_call((6, 1, 1), (384, 1, 1), np.uintp(ma), np.uintp(mb), np.uintp(int(out)), np.uintp(int(pre)), np.uintp(int(bias)), np.int32(M), np.int32(N), np.int32(K), shared_size=smem)
drv.Context.synchronize()
print(sys.argv[1], smem, "ok", flush=True)
