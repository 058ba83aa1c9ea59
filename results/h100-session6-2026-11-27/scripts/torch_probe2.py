"""First calls of the torch ops the cold run and the bench wait on, in a fresh process."""
import sys, time
T0 = time.perf_counter()
def say(*a): print(f"[{time.perf_counter()-T0:7.3f}]", *a, flush=True)
import torch
say("torch imported")
import torch.nn.functional as F
x = torch.randn(8, 1024, 768, device="cuda"); w = torch.ones(768, device="cuda"); b = torch.zeros(768, device="cuda")
torch.cuda.synchronize(); say("tensors")
for i in range(2):
    t = time.perf_counter(); F.layer_norm(x, (768,), w, b, 1e-5); torch.cuda.synchronize(); say(f"layer_norm fp32 {i}: {time.perf_counter()-t:.3f}")
lg = torch.randn(1, 3, 40, device="cuda").bfloat16()
t = time.perf_counter(); y = lg.float(); torch.cuda.synchronize(); say(f"bf16->float {time.perf_counter()-t:.3f}")
xx = y[..., :37].detach().requires_grad_(True)
t = time.perf_counter(); l = F.cross_entropy(xx.reshape(-1, 37), torch.zeros(3, dtype=torch.long, device="cuda"), reduction="none"); torch.cuda.synchronize(); say(f"cross_entropy {time.perf_counter()-t:.3f}")
t = time.perf_counter(); g, = torch.autograd.grad(l, xx, grad_outputs=torch.full_like(l, 0.1)); torch.cuda.synchronize(); say(f"autograd {time.perf_counter()-t:.3f}")
