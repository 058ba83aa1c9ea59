"""Kernel time vs wall time over the last steps of `workbench train` (torch.profiler's CUPTI view):
how busy the GPU is, and the biggest idle gaps with the kernels on either side."""
import sys, collections
import torch
from torch.profiler import ProfilerActivity, profile
steps = 14
sys.argv = ["workbench", "train", "--precision", "bf16", "--steps", str(steps), "-v", "0", "-s", "0", *sys.argv[1:]]
from workbench.cli.app import main
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    try:
        main()
    except SystemExit:
        pass
ks = []
for e in prof.events():
    if e.device_type == torch.autograd.DeviceType.CUDA:
        tr = e.time_range
        ks.append((tr.start, tr.end, e.name))
ks.sort()
end = ks[-1][1]
win = [k for k in ks if k[0] >= end - 4 * 30000]  # the last ~4 steps (us)
busy, last_end, gaps = 0, None, []
cur_s, cur_e = None, None
for s, e, n in win:
    if cur_e is None or s > cur_e:
        if cur_e is not None:
            busy += cur_e - cur_s
            gaps.append((s - cur_e, prev, n))
        cur_s, cur_e = s, e
    else:
        cur_e = max(cur_e, e)
    prev = n
busy += cur_e - cur_s
span = win[-1][1] - win[0][0]
print(f"window {span/1e3:.2f} ms, busy {busy/1e3:.2f} ms ({100*busy/span:.1f}%), {len(win)} kernels, {len(gaps)} gaps, "
      f"idle {sum(g[0] for g in gaps)/1e3:.2f} ms")
hist = collections.Counter()
for g, a, b in gaps:
    hist[min(int(g), 20)] += 1
print("gap histogram (us: count):", dict(sorted(hist.items())))
for g, a, b in sorted(gaps, reverse=True)[:25]:
    print(f"{g:9.1f} us  after {a[:70]}  before {b[:70]}")
