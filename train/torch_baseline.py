"""The PyTorch baseline for `workbench train`, timed the same way in the same session:
the same GPT-2 (train/gpt2_torch.py) with torch.compile, TF32 matmuls, flash attention
(SDPA), fused AdamW and the same clipping, on the same token file, B and T; --precision bf16
runs the forward under bf16 autocast (fp32 master weights), as people train GPT-2 in PyTorch.

    python -m train.torch_baseline -b 4 -t 1024 --steps 50
    python -m train.torch_baseline -b 16 --precision bf16
    mpirun -np 8 python -m train.torch_baseline -b 16 --precision bf16 --total-batch 524288

Many GPUs: under mpirun (Open MPI's OMPI_COMM_WORLD_*) or torchrun (WORLD_SIZE, RANK,
LOCAL_RANK) each rank runs on GPU LOCAL_RANK, the model wrapped in DistributedDataParallel
(NCCL; gloo with --device cpu). torch.compile is applied to the inner model before DDP wraps it,
as PyTorch's "Where to apply torch.compile?" recommends: DDP's forward then calls the compiled
module inside its `_inside_ddp_forward`, so Dynamo's DDPOptimizer splits the graph at DDP's
bucket boundaries and the C++ reducer all-reduces each bucket while the backward goes on; DDP's
own Python (no_sync, the reducer) stays eager. --total-batch accumulates gradients over
micro-steps (no_sync on all but the last). The data layout is the trainer's: global batch s
starts at token s*total_batch, window w = micro*world + rank is its B*T+1 tokens at
start + w*B*T, and the file wraps by whole global batches. One process with no launcher
variables runs without a process group, as before.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from train import distributed
from train.distributed import Launch
from train.errors import TrainError, bad_option

DEFAULT_PORT = 29517
# torchrun's (size, rank, local rank, processes on this host), after the MPI launchers the trainer
# reads (train/distributed.py), which come first.
TORCHRUN = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def launch_from_env(env=None) -> Launch:
    return distributed.launch_from_env(env, (*distributed.LAUNCHERS, TORCHRUN))


class GlobalBatches:
    """This rank's windows of each global batch: the trainer's layout (train/data.py), so both
    read the same tokens on any number of GPUs; -i may be a glob of shards, as for the trainer."""

    def __init__(self, pattern: str, B: int, T: int, total: int, world: int, rank: int):
        from train.data import Shards, TrainData

        self.data = TrainData(Shards(pattern), B, T, total)
        self.world, self.rank = world, rank
        self.micro_steps = total // (B * T * world)

    def load(self, step: int, x: np.ndarray, y: np.ndarray) -> None:
        """x, y: (micro_steps, B*T) int32, filled with this rank's windows of global batch `step`."""
        from train.data import window
        for m in range(self.micro_steps):
            self.data.load(step, window(m, self.rank, self.world), x[m], y[m])


def parse(argv=None) -> argparse.Namespace:
    from train.config import PRESETS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-i", "--train-tokens", default="data/tiny_shakespeare_train.bin")
    ap.add_argument("-b", "--batch", type=int, default=4, help="B per rank and micro-step")
    ap.add_argument("-t", "--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--total-batch", type=int, default=None, metavar="TOKENS",
                    help="tokens per optimizer step, a multiple of B*T*world (default B*T*world)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu (for tests): fp32, no torch.compile, no fused AdamW, gloo between ranks")
    ap.add_argument("--init", default="d12", choices=tuple(PRESETS), help="model preset, freshly initialized")
    ap.add_argument("--seed", type=int, default=0, help="the fresh init's seed")
    ap.add_argument("--json", default=None, metavar="PATH", help="rank 0 writes the summary here")
    ap.add_argument("--port", type=int, default=None,
                    help=f"MASTER_PORT for the process group (default: $MASTER_PORT, else {DEFAULT_PORT})")
    return ap.parse_args(argv)


def check(a: argparse.Namespace, launch: Launch) -> None:
    """Every option, before torch touches a device: one line naming the bad one."""
    from train.config import preset

    for opt, value in (("-b", a.batch), ("-t", a.seq), ("--steps", a.steps)):
        if value < 1:
            raise bad_option(opt, f"{value} is not a positive integer")
    if a.seq > preset(a.init).max_seq_len:
        raise bad_option("-t", f"{a.seq} is longer than {a.init}'s context of {preset(a.init).max_seq_len}")
    per_step = a.batch * a.seq * launch.world
    if a.total_batch is None:
        a.total_batch = per_step
    if a.total_batch < 1 or a.total_batch % per_step:
        raise bad_option("--total-batch", f"{a.total_batch} is not a positive multiple of B*T*world = "
                                          f"{a.batch}*{a.seq}*{launch.world} = {per_step}")
    if a.device == "cpu":
        if a.precision == "bf16":
            raise bad_option("--precision", "bf16 needs --device cuda (the CPU baseline is fp32)")
        a.no_compile = True
    if a.port is not None and not 0 < a.port < 65536:
        raise bad_option("--port", f"{a.port} is not a TCP port")
    GlobalBatches(a.train_tokens, a.batch, a.seq, a.total_batch, launch.world, launch.rank)  # headers: its checks
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)


def main(argv=None) -> dict:
    a = parse(argv)
    launch = launch_from_env()
    check(a, launch)

    import torch
    import torch.distributed as dist

    from train.config import preset
    from train.gpt2_torch import GPT
    from train.params import fresh_init

    world, rank, local = launch.world, launch.rank, launch.local_rank
    cuda = a.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            raise TrainError("--device cuda: torch sees no CUDA device")
        if launch.launcher and local >= torch.cuda.device_count():
            raise TrainError(f"local rank {local} has no GPU: this node has {torch.cuda.device_count()}")
    if launch.launcher:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if a.port is not None:
            os.environ["MASTER_PORT"] = str(a.port)
        else:
            os.environ.setdefault("MASTER_PORT", str(DEFAULT_PORT))
        if cuda:
            torch.cuda.set_device(local)
            dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", local))
        else:
            dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        return _run(a, launch, torch, dist, GPT, preset, fresh_init)
    finally:
        if launch.launcher and dist.is_initialized():
            dist.destroy_process_group()


def _run(a, launch: Launch, torch, dist, GPT, preset, fresh_init) -> dict:
    world, rank, local = launch.world, launch.rank, launch.local_rank
    cuda = a.device == "cuda"
    device = torch.device("cuda", local) if cuda and launch.launcher else torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(a.seed)
    config = preset(a.init)
    model = GPT.from_flat(config, fresh_init(config, a.seed), device=device, sdpa=True)
    if not a.no_compile:
        model.compile()  # the inner module, in place: DDP then calls it (see the module's docstring)
    ddp = None
    if launch.launcher:
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = DDP(model, device_ids=[local] if cuda else None, gradient_as_bucket_view=True)
    fwd = ddp if ddp is not None else model
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                            fused=cuda)
    data = GlobalBatches(a.train_tokens, a.batch, a.seq, a.total_batch, world, rank)
    micro = data.micro_steps
    x = np.empty((micro, a.batch * a.seq), np.int32)
    y = np.empty_like(x)
    lead = rank == 0
    times, losses = [], []
    for step in range(a.steps):
        data.load(step, x, y)
        t0 = time.perf_counter()
        xb = torch.from_numpy(x.reshape(micro, a.batch, a.seq)).to(device, non_blocking=True).long()
        yb = torch.from_numpy(y.reshape(micro, a.batch, a.seq)).to(device, non_blocking=True).long()
        opt.zero_grad(set_to_none=True)
        step_loss = None
        for m in range(micro):
            sync = ddp is None or m == micro - 1
            with contextlib.nullcontext() if sync else ddp.no_sync():
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda and a.precision == "bf16"):
                    _, loss = fwd(xb[m], yb[m])
                (loss / micro if micro > 1 else loss).backward()
            part = loss.detach() / micro if micro > 1 else loss.detach()
            step_loss = part if step_loss is None else step_loss + part
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if ddp is not None:  # the step's mean loss over every rank (gloo has no AVG)
            dist.all_reduce(step_loss, op=dist.ReduceOp.SUM)
            step_loss = step_loss / world
        losses.append(step_loss.item())  # synchronizes, as our trainer's loss read-back does
        times.append((time.perf_counter() - t0) * 1e3)
        if lead:
            print(f"torch step {step + 1}/{a.steps}: loss {losses[-1]:.6f} ({times[-1]:.1f} ms)", flush=True)
    window = times[9:50] if len(times) >= 10 else times
    ms = float(np.median(window))
    peak = torch.cuda.max_memory_allocated(device) if cuda else None
    out = {"median_ms": ms, "tokens_per_s": a.total_batch / (ms / 1e3), "world": world, "micro_steps": micro,
           "total_batch": a.total_batch, "losses": losses, "peak_memory_bytes": peak,
           "batch": a.batch, "seq": a.seq, "precision": a.precision, "compile": not a.no_compile,
           "device": a.device, "model": a.init}
    if lead:
        unit = ("GPU", "GPUs") if cuda else ("CPU process", "CPU processes")
        where = f"DDP over {world} {unit[world > 1]}" if ddp else "1 process"
        mem = f"peak memory {peak / 2**30:.2f} GiB" if peak is not None else "peak memory n/a (cpu)"
        features = "TF32, SDPA, fused AdamW" if cuda else "SDPA, AdamW, cpu"
        print(f"torch baseline ({a.precision}, torch.compile={'off' if a.no_compile else 'on'}, {features}, {where}), "
              f"B={a.batch} T={a.seq}, world {world}, total batch {a.total_batch:,} tokens = {micro} micro-step"
              f"{'s' if micro > 1 else ''} x {world} rank{'s' if world > 1 else ''} x B*T: "
              f"median {ms:.2f} ms/step over steps {10 if len(times) >= 10 else 1}-{min(50, a.steps)}, "
              f"{out['tokens_per_s']:,.0f} tok/s, {mem}", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    try:
        main()
    except TrainError as e:
        print(f"Error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
