"""Session 16 probe: gemm_wgmma's main loop alone at M=16384, N=3072, K=768 (the fc GEMM at B=16)
over tile widths, stage counts, map placement and L2 promotion, beside cuBLASLt's plain, bias and
GELU_AUX_BIAS GEMMs of the same shape, all visited in turn each round (the same seconds' clocks)."""
import os, sys, json, numpy as np
import pycuda.autoprimaryctx  # noqa
import pycuda.driver as drv
from pycuda.compiler import SourceModule
from workbench import tensor_maps
from workbench.library_calls import gemm_lt
here = os.path.dirname(os.path.abspath(__file__)); root = os.path.abspath(os.path.join(here, "../.."))
M, N, K = [int(x) for x in os.environ.get("SHAPE", "16384,3072,768").split(",")]
rng = np.random.default_rng(0)
def rand_bf16(shape):  # bf16 bits of N(0,1)-ish floats
    x = rng.standard_normal(shape, dtype=np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)
A = drv.to_device(rand_bf16((M, K))); B = drv.to_device(rand_bf16((N, K)))
bias = drv.to_device(rand_bf16((N,)) ); D = drv.mem_alloc(M * N * 2); AUX = drv.mem_alloc(M * N * 2)
SMS = drv.Context.get_device().get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
VARIANTS = [  # name, BN, stages, constmap, promotion
    ("192x4", 192, 4, 0, 3), ("192x5", 192, 5, 0, 3), ("192x3", 192, 3, 0, 3),
    ("256x3", 256, 3, 0, 3), ("256x4", 256, 4, 0, 3),
    ("128x4", 128, 4, 0, 3), ("128x6", 128, 6, 0, 3), ("128x7", 128, 7, 0, 3),
    ("192x4 constmap", 192, 4, 1, 3), ("192x4 promo128", 192, 4, 0, 2), ("192x4 promoNone", 192, 4, 0, 0),
    ("192x5 constmap", 192, 5, 1, 3),
]
only = sys.argv[1:]
runs = {}
stream = drv.Stream()
for name, bn, st, cm, promo in VARIANTS:
    if only and name not in only:
        continue
    try:
        tensor_maps.L2_PROMOTION_256B = promo
        ma = tensor_maps.encode(int(A), M, K, 128, 64, "bf16"); mb = tensor_maps.encode(int(B), N, K, bn, 64, "bf16")
        mod = SourceModule(open(os.path.join(here, "ml.cu")).read(), arch="sm_90a", no_extern_c=True,
                           options=["-O3", f"-DXBN={bn}", f"-DXST={st}", f"-DX_CONSTMAP={cm}"],
                           include_dirs=[here, os.path.join(root, "kernels/common")])
        f = mod.get_function("ml")
        smem = 1024 + st * (128 + bn) * 128 + 16 * st
        f.set_attribute(drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        if cm:
            g, _ = mod.get_global("cmaps"); drv.memcpy_htod(g, np.frombuffer(ma + mb, np.uint8))
            pa = pb = 0
        else:
            pa, pb = tensor_maps.on_device(ma), tensor_maps.on_device(mb)
        f.prepare("PPPiii")
        tiles = -(-M // 128) * -(-N // bn)
        grid = (min(tiles, SMS), 1, 1)
        args = (np.uintp(pa), np.uintp(pb), np.uintp(int(D)), np.int32(M), np.int32(N), np.int32(K))
        def launch(s, f=f, grid=grid, args=args, smem=smem):
            f.prepared_async_call(grid, (384, 1, 1), s, *args, shared_size=smem)
        launch(stream); stream.synchronize()
        runs[name] = launch
        print(f"{name}: smem {smem}, grid {grid[0]}, ok", flush=True)
    except Exception as e:  # noqa
        print(f"{name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
        drv.Context.synchronize() if False else None
tensor_maps.L2_PROMOTION_256B = 3
for name, kw in [("cublasLt plain t8", dict(tune=8)), ("cublasLt bias t8", dict(bias=int(bias), tune=8)),
                 ("cublasLt gelu_aux_bias t8", dict(bias=int(bias), gelu=True, aux=int(AUX), tune=8))]:
    if only and name not in only:
        continue
    call = gemm_lt(int(A), int(B), int(D), M, N, K, trans_b=True, dtype="bf16", **kw)
    call(stream); stream.synchronize()
    runs[name] = call
times = {n: [] for n in runs}
for _ in range(3):
    for n, r in runs.items(): r(stream)
stream.synchronize()
for rnd in range(7):
    for n, r in runs.items():
        e0, e1 = drv.Event(), drv.Event(); e0.record(stream)
        for _ in range(5): r(stream)
        e1.record(stream); e1.synchronize()
        times[n].append(e1.time_since(e0) * 1e3 / 5)
out = {}
for n, ts in times.items():
    med = float(np.median(ts)); out[n] = dict(median_us=med, min_us=float(min(ts)), max_us=float(max(ts)))
    print(f"{n:28s} median {med:7.1f} us  [{min(ts):6.1f} .. {max(ts):6.1f}]  {2*M*N*K/med/1e6:5.0f} TFLOP/s", flush=True)
if os.environ.get("JSON"):
    json.dump(dict(shape=[M, N, K], times=out), open(os.environ["JSON"], "w"), indent=1)
