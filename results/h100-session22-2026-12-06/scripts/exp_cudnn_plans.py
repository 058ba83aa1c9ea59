"""Session 22, call 7: does cuDNN have a faster plan for the trainer's attention than the one its
heuristic builds first? For the causal bf16 SDPA forward and backward at (B, T, NH, HS) = (B, 1024,
12, 64), as workbench/library_calls builds them (same layouts), every plan of heur_mode A, B and
FALLBACK is built (build_plan_policy.ALL) and timed (CUDA events, one execution between two events,
median of 30), beside the plan the library call uses now (the first that builds)."""
import os

import numpy as np
import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv

import cudnn
from workbench import library_calls as lc

B, T, NH, HS = int(os.environ.get("B", 32)), 1024, 12, 64
C = NH * HS
rng = np.random.default_rng(0)


def bf16(n, scale=1.0):
    x = rng.standard_normal(n, dtype=np.float32) * scale
    return drv.to_device((x.view(np.uint32) >> 16).astype(np.uint16))


qkv, dout = bf16(B * T * 3 * C), bf16(B * T * C, 0.1)
out, dqkv = drv.mem_alloc(B * T * C * 2), drv.mem_alloc(B * T * 3 * C * 2)
lse = drv.mem_alloc(B * NH * T * 4)
q, k, v = int(qkv), int(qkv) + C * 2, int(qkv) + 2 * C * 2
dq, dk, dv = int(dqkv), int(dqkv) + C * 2, int(dqkv) + 2 * C * 2
lc.sdpa_cudnn(q, k, v, int(out), int(lse), B, T, NH, HS)(None)  # the forward's out and lse, for the backward
drv.Context.synchronize()


def graph(backward):
    qkv_stride, out_stride, lse_stride = lc._sdpa_layout(B, T, NH, HS)
    g = lc._bf16_graph()
    bf = cudnn.data_type.BFLOAT16
    tq, tk, tv = (g.tensor(name=n, dim=[B, NH, T, HS], stride=qkv_stride, data_type=bf) for n in ("q", "k", "v"))
    if not backward:
        to, ts = g.sdpa(name="sdpa", q=tq, k=tk, v=tv, generate_stats=True, attn_scale=1 / 8.0,
                        diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, diagonal_band_right_bound=0)
        to.set_output(True).set_dim([B, NH, T, HS]).set_stride(out_stride).set_data_type(bf)
        ts.set_output(True).set_dim([B, NH, T, 1]).set_stride(lse_stride).set_data_type(cudnn.data_type.FLOAT)
        return g, {tq: q, tk: k, tv: v, to: int(out), ts: int(lse)}
    to = g.tensor(name="o", dim=[B, NH, T, HS], stride=out_stride, data_type=bf)
    tdo = g.tensor(name="dO", dim=[B, NH, T, HS], stride=out_stride, data_type=bf)
    ts = g.tensor(name="stats", dim=[B, NH, T, 1], stride=lse_stride, data_type=cudnn.data_type.FLOAT)
    tdq, tdk, tdv = g.sdpa_backward(name="sdpa_backward", q=tq, k=tk, v=tv, o=to, dO=tdo, stats=ts,
                                    attn_scale=1 / 8.0, diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT,
                                    diagonal_band_right_bound=0)
    for t in (tdq, tdk, tdv):
        t.set_output(True).set_dim([B, NH, T, HS]).set_stride(qkv_stride).set_data_type(bf)
    return g, {tq: q, tk: k, tv: v, to: int(out), tdo: int(dout), ts: int(lse), tdq: dq, tdk: dk, tdv: dv}


def time_plans(name, backward, modes):
    g, pack = graph(backward)
    g.validate()
    g.build_operation_graph()
    g.create_execution_plans(modes)
    g.check_support()
    g.build_plans(cudnn.build_plan_policy.ALL)
    handle = lc.cudnn_handle()
    n = g.get_execution_plan_count()
    print(f"{name} (modes {[str(m) for m in modes]}): {n} plans", flush=True)
    for i in range(n):
        try:
            pname = g.get_plan_name_at_index(i)
            ws = drv.mem_alloc(max(16, g.get_workspace_size_plan_at_index(i)))
            run = lambda: g.execute_plan_at_index(pack, int(ws), i, handle=handle)  # noqa: E731
            for _ in range(3):
                run()
            drv.Context.synchronize()
            ts = []
            for _ in range(30):
                a, b = drv.Event(), drv.Event()
                a.record(); run(); b.record(); b.synchronize()
                ts.append(b.time_since(a) * 1e3)
            print(f"  plan {i}: {np.median(ts):8.1f} us (p10 {np.percentile(ts, 10):.1f})  {pname}", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"  plan {i}: not run: {type(e).__name__}: {str(e)[:160]}", flush=True)


for backward, name in ((False, "forward"), (True, "backward")):
    for modes in ([cudnn.heur_mode.A], [cudnn.heur_mode.B], [cudnn.heur_mode.FALLBACK]):
        try:
            time_plans(f"{name} B={B}", backward, modes)
        except Exception as e:  # noqa: BLE001
            print(f"{name} modes {modes}: {type(e).__name__}: {str(e)[:200]}", flush=True)
