"""attention_backward 13 / 14 (and variants) against NumPy, determinism, and whole-sequence timing.
usage: python3 bwd_check.py check SRC KN B T NH | det SRC KN B T NH | bench SRC KN B T NH"""
import sys, math, os
from pathlib import Path
import numpy as np
sys.path.insert(0, ".")
import pycuda.autoprimaryctx  # noqa
import pycuda.driver as drv
from workbench.compile import load_module

mode, SRC, KN = sys.argv[1:4]
B, T, NH = [int(x) for x in sys.argv[4:7]]
HS = 64; C = NH * HS
ORDERED = os.environ.get("ORDERED", "1") == "1"   # 14-style (ticket) or 13-style (atomics + dq pass)
CLUSTER = int(os.environ.get("CLUSTER", "0"))
NOPREP = os.environ.get("NOPREP", "0") == "1"   # version 15: a memset of the tickets and flags, then the kernel (takes out)
rng = np.random.default_rng(int(os.environ.get("SEED", "0")))
def bf(x):
    bits = (x.astype(np.float32).view(np.uint32) + 0x8000) >> 16
    return bits.astype(np.uint16), (bits << 16).astype(np.uint32).view(np.float32)
qkv_bits, qkv = bf(rng.standard_normal((B, T, 3, NH, HS)))
dout_bits, dout = bf(rng.standard_normal((B, T, NH, HS)))
q, k, v = (qkv[:, :, i].astype(np.float64).transpose(0, 2, 1, 3) for i in range(3))
g = dout.astype(np.float64).transpose(0, 2, 1, 3)
s = q @ k.swapaxes(-1, -2) / math.sqrt(HS)
s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
mx = s.max(-1, keepdims=True)
lse = np.log(np.exp(s - mx).sum(-1)) + mx[..., 0]
p = np.exp(s - lse[..., None])
out = p @ v
out_bits, out_b = bf(out.transpose(0, 2, 1, 3))
mod, res, warn = load_module(Path(SRC))
print(res, warn)
d_qkv = drv.to_device(qkv_bits); d_dout = drv.to_device(dout_bits); d_out = drv.to_device(out_bits)
d_lse = drv.to_device(lse.astype(np.float32))
nkb = (T + 127) // 128
DN = B * NH * nkb * 128 if NOPREP else B * NH * T
NT = 2 * B * NH * nkb if NOPREP else B * NH * nkb
d_D = drv.mem_alloc(DN * 4); d_dq = drv.mem_alloc(B * T * C * 4)
d_ticket = drv.mem_alloc(NT * 4)
d_dqkv = drv.mem_alloc(B * T * 3 * C * 2)
i32 = np.int32
prep = None if NOPREP else mod.get_function(KN + "_prep"); f = mod.get_function(KN)
shared = int(os.environ.get("SHARED", 1024 + 2 * 128 * 128 + 2 * 2 * 128 * 128 + 128 * 256 + 2 * 2 * 128 * 4 + 128 * 72 * 4))
f.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, shared)
sl2, sc = np.float32(1.4426950408889634 / math.sqrt(HS)), np.float32(1 / math.sqrt(HS))
grid_x = nkb if not CLUSTER else 2 * ((T + 255) // 256)
def launch():
    if NOPREP:
        drv.memset_d32_async(d_ticket, 0, NT)
        f(d_dq, d_ticket, d_dqkv, d_dout, d_out, d_qkv, d_lse, d_D, i32(T), i32(NH), sl2, sc, grid=(grid_x, B * NH, 1), block=(256, 1, 1), shared=shared)
    elif ORDERED:
        prep(d_ticket, d_D, d_dout, d_out, i32(B), i32(T), i32(NH), i32(HS), grid=((B * T * NH + 31) // 32, 1, 1), block=(256, 1, 1))
        f(d_dq, d_ticket, d_dqkv, d_dout, d_qkv, d_lse, d_D, i32(T), i32(NH), sl2, sc, grid=(grid_x, B * NH, 1), block=(256, 1, 1), shared=shared)
    else:
        prep(d_dq, d_D, d_dout, d_out, i32(B), i32(T), i32(NH), i32(HS), grid=((B * T * NH + 31) // 32, 1, 1), block=(256, 1, 1))
        f(d_dq, d_dqkv, d_dout, d_qkv, d_lse, d_D, i32(T), i32(NH), sl2, sc, grid=(grid_x, B * NH, 1), block=(256, 1, 1), shared=shared)
        mod.get_function(KN + "_dq")(d_dqkv, d_dq, i32(B * T), i32(C), sc, grid=((B * T * C + 2047) // 2048, 1, 1), block=(256, 1, 1))
def poison():
    drv.memset_d16(d_dqkv, 0x7FC0, B * T * 3 * C)
    drv.memset_d32(d_dq, 0x7FC00000, B * T * C)
    drv.memset_d32(d_ticket, 0x7FC00000, NT)
    drv.memset_d32(d_D, 0x7FC00000, DN)
if mode == "bench":
    poison()
    for it in range(3): launch()
    drv.Context.synchronize()
    ts = []
    for it in range(25):
        e0, e1 = drv.Event(), drv.Event()
        e0.record(); launch(); e1.record(); e1.synchronize()
        ts.append(e1.time_since(e0) * 1000)
    print(f"{SRC} B={B} T={T} NH={NH}: whole sequence median us {np.median(ts[5:]):.1f} min {min(ts[5:]):.1f}")
    if os.environ.get("PROF"):
        ptr, size = mod.get_global("g_prof")
        pr = np.empty(size // 8, np.uint64); drv.memcpy_dtoh(pr, ptr)
        pr = pr[: 192 * nkb * 4].reshape(192, nkb, 4).astype(np.int64)
        t0 = pr[:, :, 0].min()
        dur = (pr[:, :, 1] - pr[:, :, 0]) / 1e3; poll = pr[:, :, 2] / 1e3; spun = pr[:, :, 3]
        print("kernel span us", (pr[:, :, 1].max() - t0) / 1e3, "sum block us", dur.sum(), "sum poll us", poll.sum())
        for kb in range(nkb):
            print(f"  kb {kb}: tiles {nkb - kb} block us mean {dur[:, kb].mean():.1f} poll us mean {poll[:, kb].mean():.2f} tiles spun mean {spun[:, kb].mean():.2f}")
        for h in (0, 1, 16, 17, 100, 191):
            print(f"  head {h}: start us", ((pr[h, :, 0] - t0) / 1e3).round(1), "end", ((pr[h, :, 1] - t0) / 1e3).round(1), "poll", poll[h].round(2))
    sys.exit(0)
if mode == "det":
    outs = []
    for r in range(int(os.environ.get("REPS", "5"))):
        poison(); launch(); drv.Context.synchronize()
        outs.append(drv.from_device(d_dqkv, (B * T * 3 * C,), np.uint16))
    same = [bool(np.array_equal(outs[0], o)) for o in outs[1:]]
    diff = [int((outs[0] != o).sum()) for o in outs[1:]]
    print(f"{SRC} B={B} T={T} NH={NH}: runs identical to the first: {same} (differing elements: {diff})")
    sys.exit(0)
poison(); launch(); drv.Context.synchronize()
dv = p.swapaxes(-1, -2) @ g
dp = g @ v.swapaxes(-1, -2)
o = out_b.astype(np.float64).transpose(0, 2, 1, 3)
Dd = (g * o).sum(-1)
ds = p * (dp - Dd[..., None])
dq = ds @ k / math.sqrt(HS)
dk = ds.swapaxes(-1, -2) @ q / math.sqrt(HS)
got = (drv.from_device(d_dqkv, (B, T, 3, NH, HS), np.uint16).astype(np.uint32) << 16).view(np.float32)
ok = True
for name, ref, i in (("dq", dq, 0), ("dk", dk, 1), ("dv", dv, 2)):
    r = ref.transpose(0, 2, 1, 3)
    x = got[:, :, i]
    err = np.abs(x - r)
    bad = ~(err <= 2e-2 + 2e-2 * np.abs(r))
    ok &= not bad.any()
    print(f"  {name} max err {np.nanmax(err):.3g} nan {int(np.isnan(x).sum())} bad {int(bad.sum())} of {bad.size}")
    if bad.any():
        print("  bad t:", np.unique(np.nonzero(bad)[1])[:40])
print(f"{SRC} B={B} T={T} NH={NH}: {'PASS' if ok else 'FAIL'}")
