"""The PyTorch baseline for `workbench train`, timed the same way in the same session:
the same GPT-2 (train/gpt2_torch.py) with torch.compile, TF32 matmuls, flash attention
(SDPA), fused AdamW and the same clipping, on the same token file, B and T; --precision bf16
runs the forward under bf16 autocast (fp32 master weights), as people train GPT-2 in PyTorch.

    python -m train.torch_baseline -b 4 -t 1024 --steps 50
    python -m train.torch_baseline -b 16 --precision bf16
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv=None) -> dict:
    import torch

    from train.gpt2_torch import GPT
    from train.config import preset
    from train.params import fresh_init
    from train.trainer import Batches

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-i", "--train-tokens", default="data/tiny_shakespeare_train.bin")
    ap.add_argument("-b", "--batch", type=int, default=4)
    ap.add_argument("-t", "--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    a = ap.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    config = preset("d12")
    model = GPT.from_flat(config, fresh_init(config, 0), device="cuda", sdpa=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=True)
    fwd = model if a.no_compile else torch.compile(model)
    data = Batches(a.train_tokens, a.batch, a.seq)
    x = np.empty(a.batch * a.seq, np.int32)
    y = np.empty_like(x)
    times, losses = [], []
    for step in range(a.steps):
        data.load(step, x, y)
        t0 = time.perf_counter()
        xb = torch.from_numpy(x.reshape(a.batch, a.seq)).cuda(non_blocking=True).long()
        yb = torch.from_numpy(y.reshape(a.batch, a.seq)).cuda(non_blocking=True).long()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            _, loss = fwd(xb, yb)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())  # synchronizes, as our trainer's loss read-back does
        times.append((time.perf_counter() - t0) * 1e3)
        print(f"torch step {step + 1}/{a.steps}: loss {losses[-1]:.6f} ({times[-1]:.1f} ms)", flush=True)
    window = times[9:50] if len(times) >= 10 else times
    ms = float(np.median(window))
    out = {"median_ms": ms, "tokens_per_s": a.batch * a.seq / (ms / 1e3), "losses": losses,
           "peak_memory_bytes": torch.cuda.max_memory_allocated()}
    print(f"torch baseline ({a.precision}, torch.compile={'off' if a.no_compile else 'on'}, TF32, SDPA, fused AdamW), "
          f"B={a.batch} T={a.seq}: median {ms:.2f} ms/step over steps 10-{min(50, a.steps)}, "
          f"{out['tokens_per_s']:,.0f} tok/s, peak memory {out['peak_memory_bytes'] / 2**30:.2f} GiB")
    return out


if __name__ == "__main__":
    main()
