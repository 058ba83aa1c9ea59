"""The torch baselines' first calls on a fresh machine, timed alone (no bench around them)."""
import os, sys, time
T0 = time.perf_counter()
def say(*a): print(f"[{time.perf_counter()-T0:7.3f}]", *a, flush=True)
import pycuda.autoprimaryctx  # noqa
say("pycuda")
import torch
say("torch imported", torch.__version__)
sys.path.insert(0, ".")
from references import fused_classifier as fc, adamw as aw, attention_forward as af
def timed(label, f):
    torch.cuda.synchronize(); t = time.perf_counter(); r = f(); torch.cuda.synchronize()
    say(f"{label}: {time.perf_counter()-t:.3f} s"); return r
torch.backends.cuda.matmul.allow_tf32 = False
x = timed("first cuda tensor", lambda: torch.zeros(1, device="cuda"))
for (B, T, V, Vp) in [(1, 3, 37, 40), (8, 1024, 50257, 50304), (8, 1024, 50257, 50304), (1, 2, 60001, 60007)]:
    lg = torch.randn(B, T, Vp, device="cuda").bfloat16()
    tg = torch.randint(0, V, (B, T), device="cuda", dtype=torch.int32)
    timed(f"fused_classifier bf16 {B},{T},{V},{Vp}", lambda: fc.torch_fused_classifier(lg.float(), tg, V, 1/(B*T)))
    timed(f"fused_classifier fp32 {B},{T},{V},{Vp}", lambda: fc.torch_fused_classifier(lg.float(), tg, V, 1/(B*T)))
for N in [7, 124475904, 124475904]:
    p, g, m, v = (torch.randn(N, device="cuda") * 0.01 for _ in range(4)); v = v.abs()
    hp = torch.tensor([1e-4, 0.9, 0.95, 1e-8, 0.1, 3.0]); n2 = (g * g).sum().reshape(1)
    aw._OPTIMIZERS.clear()
    timed(f"adamw fp32 N={N}", lambda: aw.torch_adamw(p, g, m, v, hp, n2))
for dt in (torch.float32, torch.bfloat16, torch.bfloat16):
    qkv = torch.randn(8, 1024, 3 * 768, device="cuda", dtype=dt)
    timed(f"attention {dt}", lambda: af.torch_attention(qkv, 12))
say("cache dirs:", os.popen("ls -la ~/.cache/torch ~/.cache/torch/kernels 2>&1 | head -20").read())
