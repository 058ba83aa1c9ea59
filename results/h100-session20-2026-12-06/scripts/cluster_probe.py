"""How many clusters of two the H100 holds at once for a cubin's kernel (cuOccupancyMaxActiveClusters):
argv = cubin, kernel name, dynamic shared bytes."""
import sys
from cuda.bindings import driver as cu

def ok(r):
    err, *rest = r if isinstance(r, tuple) else (r,)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise SystemExit(f"{err}")
    return rest[0] if len(rest) == 1 else rest

ok(cu.cuInit(0))
dev = ok(cu.cuDeviceGet(0))
ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
ok(cu.cuCtxSetCurrent(ctx))
mod = ok(cu.cuModuleLoad(sys.argv[1].encode()))
fn = ok(cu.cuModuleGetFunction(mod, sys.argv[2].encode()))
smem = int(sys.argv[3])
ok(cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem))
cfg = cu.CUlaunchConfig()
cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 132, 1, 1
cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 384, 1, 1
cfg.sharedMemBytes = smem
cfg.numAttrs = 0
print(sys.argv[2], "max active clusters:", ok(cu.cuOccupancyMaxActiveClusters(fn, cfg)))
