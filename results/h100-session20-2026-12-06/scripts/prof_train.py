"""GPU time per step of `workbench train` by kernel (torch.profiler's CUPTI view of every kernel in the process)."""
import sys
import torch
from torch.profiler import ProfilerActivity, profile
steps = int(__import__("os").environ.get("PROF_STEPS", "10"))
sys.argv = ["workbench", "train", "--precision", "bf16", "--steps", str(steps), "-v", "0", "-s", "0", *sys.argv[1:]]
from workbench.cli.app import main
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    try:
        main()
    except SystemExit:
        pass
ev = [e for e in prof.key_averages()]
t = lambda e: getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
total = sum(t(e) for e in ev)
print(f"GPU time per step (all kernels and copies, start-up spread over {steps} steps): {total/1e3/steps:.2f} ms")
for e in sorted(ev, key=lambda e: -t(e))[:45]:
    print(f"{t(e)/1e3/steps:9.3f} ms {e.count/steps:7.1f}x  {e.key[:110]}")
