"""attention_backward 12 against NumPy at one size: dq, dk, dv errors and where."""
import sys, math
from pathlib import Path
import numpy as np
sys.path.insert(0, ".")
import pycuda.autoprimaryctx  # noqa
import pycuda.driver as drv
from workbench.compile import load_module

B, T, NH, HS = [int(x) for x in (sys.argv[1:5] if len(sys.argv) > 4 else (1, 200, 2, 64))]
C = NH * HS
rng = np.random.default_rng(0)
def bf(x):
    bits = (x.astype(np.float32).view(np.uint32) + 0x8000) >> 16
    return bits.astype(np.uint16), (bits << 16).astype(np.uint32).view(np.float32)
qkv_bits, qkv = bf(rng.standard_normal((B, T, 3, NH, HS)))
dout_bits, dout = bf(rng.standard_normal((B, T, NH, HS)))
q, k, v = (qkv[:, :, i].astype(np.float64).transpose(0, 2, 1, 3) for i in range(3))  # B NH T HS
g = dout.astype(np.float64).transpose(0, 2, 1, 3)
s = q @ k.swapaxes(-1, -2) / math.sqrt(HS)
s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
mx = s.max(-1, keepdims=True)
lse = np.log(np.exp(s - mx).sum(-1)) + mx[..., 0]
p = np.exp(s - lse[..., None])
out = p @ v
out_bits, out_b = bf(out.transpose(0, 2, 1, 3))
o = out_b.astype(np.float64).transpose(0, 2, 1, 3)
dv = p.swapaxes(-1, -2) @ g
dp = g @ v.swapaxes(-1, -2)
Dd = (g * o).sum(-1)
ds = p * (dp - Dd[..., None])
dq = ds @ k / math.sqrt(HS)
dk = ds.swapaxes(-1, -2) @ q / math.sqrt(HS)
import os
SRC = os.environ.get("SRC", "kernels/attention_backward/12_flash_wgmma_bf16.cu")
KN = os.environ.get("KN", "attention_backward12")
mod, res, warn = load_module(Path(SRC))
print(res, warn)
d_qkv = drv.to_device(qkv_bits); d_dout = drv.to_device(dout_bits); d_out = drv.to_device(out_bits)
d_lse = drv.to_device(lse.astype(np.float32))
d_D = drv.mem_alloc(B * NH * T * 4); d_dq = drv.mem_alloc(B * T * C * 4)
d_dqkv = drv.mem_alloc(B * T * 3 * C * 2); drv.memset_d16(d_dqkv, 0x7FC0, B * T * 3 * C)
drv.memset_d32(d_dq, 0x7FC00000, B * T * C)
i32 = np.int32
mod.get_function(KN + "_prep")(d_dq, d_D, d_dout, d_out, i32(B), i32(T), i32(NH), i32(HS),
    grid=((B * T * NH + 31) // 32, 1, 1), block=(256, 1, 1))
f = mod.get_function(KN)
shared = int(os.environ.get('SHARED', 1024 + 2 * 128 * 128 + 2 * 2 * 64 * 128 + 128 * 128 + 2 * 2 * 64 * 4))
GRID_KEYS = int(os.environ.get('GRID_KEYS', 128)); BLOCK = int(os.environ.get('BLOCK', 256))
f.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
f(d_dq, d_dqkv, d_dout, d_qkv, d_lse, d_D, i32(T), i32(NH), np.float32(1.4426950408889634 / math.sqrt(HS)),
  np.float32(1 / math.sqrt(HS)), grid=(B * NH, (T + GRID_KEYS - 1) // GRID_KEYS, 1), block=(BLOCK, 1, 1), shared=shared)
if KN.endswith("14"):
    mod.get_function(KN + "_dq")(d_dqkv, d_dq, i32(B), i32(T), i32(NH), np.float32(1 / math.sqrt(HS)),
        grid=((B * T * NH * 8 + 255) // 256, 1, 1), block=(256, 1, 1))
else:
    mod.get_function(KN + "_dq")(d_dqkv, d_dq, i32(B * T), i32(C), np.float32(1 / math.sqrt(HS)),
        grid=((B * T * C + 2047) // 2048, 1, 1), block=(256, 1, 1))
drv.Context.synchronize()
if os.environ.get("BENCH"):
    ts = []
    for it in range(25):
        e0, e1 = drv.Event(), drv.Event()
        e0.record()
        f(d_dq, d_dqkv, d_dout, d_qkv, d_lse, d_D, i32(T), i32(NH), np.float32(1.4426950408889634 / math.sqrt(HS)),
          np.float32(1 / math.sqrt(HS)), grid=(B * NH, (T + GRID_KEYS - 1) // GRID_KEYS, 1), block=(BLOCK, 1, 1), shared=shared)
        e1.record(); e1.synchronize()
        ts.append(e1.time_since(e0) * 1000)
    print(SRC, "main kernel median us", np.median(ts[5:]), "min", min(ts[5:]))
    sys.exit(0)
got = (drv.from_device(d_dqkv, (B, T, 3, NH, HS), np.uint16).astype(np.uint32) << 16).view(np.float32)
Dgot = drv.from_device(d_D, (B, NH, T), np.float32)
print("D max err", np.abs(Dgot - Dd).max())
for name, ref, i in (("dq", dq, 0), ("dk", dk, 1), ("dv", dv, 2)):
    r = ref.transpose(0, 2, 1, 3)
    x = got[:, :, i]
    err = np.abs(x - r)
    bad = ~(err <= 2e-2 + 2e-2 * np.abs(r))
    print(name, "max err", np.nanmax(err), "nan", np.isnan(x).sum(), "bad", bad.sum(), "of", bad.size, "max |ref|", np.abs(r).max())
    if bad.any():
        print("  bad t:", np.unique(np.nonzero(bad)[1])[:40], "... count", len(np.unique(np.nonzero(bad)[1])))
        print("  bad ch:", np.unique(np.nonzero(bad)[3])[:64])
        bt = np.nonzero(bad)[1][0]; print("  sample t", bt, x[0, bt, 0, :6], r[0, bt, 0, :6])
