"""`workbench train`: GPT-2 in fp32 on the promoted kernels, one CUDA graph per micro-step.

The loop, like the C fp32 trainer's: every `val_every` steps rank 0 evaluates `val_batches`
batches; every `sample_every` steps it generates `gen_tokens` tokens from <|endoftext|>; then one
optimizer step. A step is `micro_steps` micro-steps on each of `world` GPUs: each takes its own
B*T+1-token window of the training file (`window`), runs forward, loss and backward, and the
parameter gradients add up (the first micro-step zeroes them, the classifier's dloss makes the
sum the mean over the step); the last one also sums the gradients over the GPUs, overlapped with
its backward, and updates (global norm, AdamW). Per micro-step the host copies the batch and the
plan of its tokens (which the embedding backward reads) into device buffers and replays a graph;
once per step it waits and reads the B*T per-token losses of each micro-step back. The host loads
and plans the next step's batches (`prepare`) while the GPU runs this one, so the plans (a few ms
of CPU per micro-step) stay off the critical path, and launches that next step before it waits for
this one's losses (TrainLoop.run_ahead), so the GPU never waits for the host between steps. The
graphs (GRAPH_NAMES): with one micro-step, one per step, [zero grads, forward, loss, backward,
update]; with more, the first micro-step's (zero grads, forward, loss, backward), the middle
ones' (forward, loss, backward) and the last one's (forward, loss, backward with the reductions,
update). Every `checkpoint_every` steps the run is saved (train/checkpoint.py) so that
`--resume` continues it bit for bit: same data windows, learning rates, optimizer state and
sampling RNG.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from references.encoder_backward import encoder_backward_plan
from workbench.power import PowerMeter, Reading, summarize
from workbench.promote import entry_key
from workbench.timing import matmul_peak

from . import checkpoint, formats
from .data import TrainData, ValData, window
from .distributed import drain_output
from .config import EOT, GPT2Config, PRESETS, preset
from .errors import TrainError
from .model import (FUSED_GELU, FUSED_LN, FUSED_QKV_BIAS, FUSED_RESIDUAL, Program, flops_per_token, fused_for,
                    memory_groups)
from .options import Run, TrainOptions  # noqa: F401  (TrainOptions: the trainer's options, re-exported)
from .params import fresh_init

SAMPLE_SEED = 1337  # the sampling RNG's seed, as the C trainer's
# The graphs of a step by (first micro-step, last micro-step): one when there is one micro-step.
GRAPH_NAMES = {(True, True): "step", (True, False): "first micro-step", (False, False): "middle micro-steps",
               (False, True): "last micro-step"}


def load_model(init: str, seed: int) -> tuple[GPT2Config, np.ndarray, str]:
    """A checkpoint path (v3 fp32 or v5 bf16) or a preset name for a fresh GPT-2 init."""
    if init in PRESETS:
        config = preset(init)
        return config, fresh_init(config, seed), f"fresh {init} (seed {seed})"
    path = Path(init)
    if not path.exists():
        raise TrainError(f"--init {init!r} is neither a checkpoint file nor a model ({', '.join(PRESETS)})")
    config, params = formats.read_checkpoint(path)
    return config, params, str(path)


@dataclass
class StepRecord:
    step: int
    loss: float
    ms: float
    tokens_per_s: float
    mfu: float
    host_us: float
    lr: float
    power: Reading | None = None  # the GPU's mean draw and SM clock over the step, and its clock reasons


@dataclass
class Trainer:
    """Holds one rank's device state of a run; `train()` below drives it."""

    run: Run
    config: GPT2Config
    params: np.ndarray
    dist: object  # distributed.Local or MPIWorld
    records: list[StepRecord] = field(default_factory=list)

    def __post_init__(self):
        self.dist.select_device()
        import pycuda.autoprimaryctx  # noqa: F401  (after the rank has chosen its GPU)
        import pycuda.driver as drv

        from .backends import Graph, KernelBackend, PromotedSet
        o, d = self.run.opts, self.dist
        self.drv = drv
        self.M = self.run.micro_steps
        self.promoted = PromotedSet(deterministic=o.deterministic)
        # The fused families run where the promoted set can serve them at the precision (under
        # --deterministic not one whose version adds with atomics and has no stand-in, as the layernorm
        # backward with the projections' bias gradients); the fc + GELU ones unless --no-fuse-gelu;
        # those the attention allows (fused_for: qkv's bias gradient through attproj's not with relu).
        wanted = fused_for(o.attention, (FUSED_GELU if o.fuse_gelu else ()) + (FUSED_LN, FUSED_RESIDUAL, FUSED_QKV_BIAS))
        fused = tuple(f for f in wanted if self.promoted.serves(f, o.precision))
        self.program = Program(self.config, o.batch, o.seq, o.attention, o.tf32, micro_steps=self.M, world=d.world,
                               rank=d.rank, zero=o.zero, weight_decay=o.weight_decay > 0, grad_clip=o.grad_clip,
                               precision=o.precision, fused=fused, recompute=o.recompute)
        self.free_at_start, self.total_memory = drv.mem_get_info()  # this process's context made, nothing allocated
        self.backend = KernelBackend(self.program, self.promoted, comm=d.gpu_comm(), side_stream=o.side_stream)
        padded = np.zeros(self.program.padded_params, dtype=np.float32)
        padded[:self.params.size] = self.params
        self.backend.upload("params", padded)
        if "params_bf16" in self.program.buffers:  # bf16: the copy the forward and backward read
            self.backend.upload("params_bf16", padded)
        self.stream = drv.Stream()
        BT = o.batch * o.seq
        # Pinned host buffers, one row per micro-step: the batches and the optimizer scalars go up
        # asynchronously, the per-token losses come back the same way. The batches and their plans
        # have two halves: step s goes up from half s % 2 while the host fills the other with step
        # s + 1, so no buffer is rewritten while a copy from it may be pending. Validation and
        # sampling have their own, so they never touch a prepared half.
        plan = self.program.buffers["eb_plan"].elems
        self.x = drv.pagelocked_empty((2, self.M, BT), np.int32)
        self.y = drv.pagelocked_empty((2, self.M, BT), np.int32)
        self.role = drv.pagelocked_empty((2, self.M, BT), np.int32)
        self.plan = drv.pagelocked_empty((2, self.M, plan), np.int32)
        self.prepared: int | None = None  # the step whose batches and plans half prepared % 2 holds
        self.eval_x = drv.pagelocked_empty(BT, np.int32)
        self.eval_y = drv.pagelocked_empty(BT, np.int32)
        self.eval_losses = drv.pagelocked_empty(BT, np.float32)
        # A step may be launched while the one before still runs (TrainLoop runs one ahead), so the
        # per-token losses and the optimizer scalars have a half per step too (step s: half s % 2).
        self.losses = drv.pagelocked_empty((2, self.M, BT), np.float32)
        self.optimizer_scalars = drv.pagelocked_empty((2, 2, 6), np.float32)  # [half][with weight decay, without]
        self.done = [drv.Event(drv.event_flags.DISABLE_TIMING) for _ in range(2)]  # each half's step finished
        self.launched: dict[int, tuple[float, float]] = {}  # step -> (perf_counter at its launch, host us)
        self.collected_at: float | None = None  # perf_counter when the last collected step was found done
        self.graphs: dict[tuple[bool, bool], object] = {}
        self.eval_graph = None
        self.forward_graph = None
        self._graph_cls = Graph

    # -- device work ---------------------------------------------------------------------------
    def _upload(self, name: str, host: np.ndarray) -> None:
        self.drv.memcpy_htod_async(self.backend.ptr(self.program.at(name)), host, self.stream)

    def _upload_batch(self, half: int, k: int) -> None:
        """Micro-step k's tokens, targets and plan from `half` of the pinned buffers."""
        for name, host in (("tokens", self.x), ("targets", self.y), ("eb_role", self.role), ("eb_plan", self.plan)):
            self._upload(name, host[half, k])

    def prepare(self, batches: TrainData, step: int) -> None:
        """Load the micro-steps' batches of optimizer step `step` into half step % 2 and plan their
        tokens for the embedding backward. The caller makes sure no copy from that half is pending."""
        d, M, h = self.dist, self.M, step % 2
        for k in range(M):
            batches.load(step, window(k, d.rank, d.world), self.x[h, k], self.y[h, k])
            self.role[h, k], self.plan[h, k] = encoder_backward_plan(self.x[h, k], self.config.channels)
        self.prepared = step

    def _enqueue_micro(self, stream, first: bool, last: bool) -> None:
        """One micro-step: the first zeroes the gradients, the last reduces them over the ranks
        (during its backward) and updates."""
        p = self.program
        backward = p.reduced_backward if last and self.dist.under_mpi else p.backward
        self.backend.run((p.zero_grads if first else []) + p.forward + p.loss + backward + (p.update if last else []),
                         stream)

    def _enqueue_eval(self, stream) -> None:
        p = self.program
        self.backend.run(p.forward + p.loss, stream)

    def _enqueue_forward(self, stream) -> None:
        self.backend.run(self.program.forward, stream)

    def _replay(self, graph, enqueue) -> None:
        if graph is None:
            enqueue(self.stream)
        else:
            graph.launch(self.stream)

    def capture(self) -> None:
        """After one uncaptured step (library handles, NCCL connections, first-launch costs): a
        graph per kind of micro-step (first, middle, last; one when there is one micro-step)."""
        for first, last in {(k == 0, k == self.M - 1) for k in range(self.M)}:
            self.graphs[(first, last)] = self._graph_cls(self.stream, lambda s, f=first, la=last: self._enqueue_micro(s, f, la))
        self.eval_graph = self._graph_cls(self.stream, self._enqueue_eval)
        self.forward_graph = self._graph_cls(self.stream, self._enqueue_forward)

    def launch(self, batches: TrainData, step: int, lr: float) -> None:
        """Enqueue optimizer step `step` on the stream: its scalars, per micro-step its batch, the
        graph and the copy of its losses back, all from or into half step % 2 of the pinned
        buffers. The caller makes sure no copy of step - 2 is pending (it collected step - 1)."""
        o, M, h = self.run.opts, self.M, step % 2
        t0 = time.perf_counter()
        if self.prepared != step:  # the first step, or one the loop did not prepare (a resume)
            self.prepare(batches, step)
        scalars = self.optimizer_scalars[h]
        scalars[:] = (lr, o.beta1, o.beta2, o.eps, o.weight_decay, step + 1)
        scalars[1, 4] = 0.0
        self.drv.memcpy_htod_async(self.backend.ptr(self.program.at("optimizer_scalars")), scalars[0], self.stream)
        if "optimizer_scalars_no_decay" in self.program.buffers:
            self.drv.memcpy_htod_async(self.backend.ptr(self.program.at("optimizer_scalars_no_decay")), scalars[1],
                                       self.stream)
        losses = self.backend.ptr(self.program.at("losses"))
        for k in range(M):
            first, last = k == 0, k == M - 1
            self._upload_batch(h, k)
            self._replay(self.graphs.get((first, last)), lambda s: self._enqueue_micro(s, first, last))
            self.drv.memcpy_dtoh_async(self.losses[h, k], losses, self.stream)
        self.done[h].record(self.stream)
        self.launched[step] = (t0, (time.perf_counter() - t0) * 1e6)

    def collect(self, step: int) -> tuple[float, float, float]:
        """Wait for launched step `step` (not for a later one launched behind it). Returns (this
        rank's mean loss, wall ms, host us spent launching it). The wall time runs from its launch,
        or from when the step before it was found done if that was later: with a step always
        waiting behind the running one, the time between two steps' ends."""
        self.dist.wait_event(self.done[step % 2], f"step {step + 1}")
        loss = float(np.mean(self.losses[step % 2].reshape(-1), dtype=np.float64))
        now = time.perf_counter()
        t0, host_us = self.launched.pop(step)
        start = t0 if self.collected_at is None else max(t0, self.collected_at)
        self.collected_at = now
        return loss, (now - start) * 1e3, host_us

    def _batch_loss(self) -> float:
        self.drv.memcpy_dtoh_async(self.eval_losses, self.backend.ptr(self.program.at("losses")), self.stream)
        self.stream.synchronize()
        return float(np.mean(self.eval_losses, dtype=np.float64))

    def val_loss(self, batches: ValData, n: int) -> float:
        """The mean loss of the first n windows of the validation shards (this rank alone)."""
        n = min(n, batches.windows)
        total = 0.0
        for i in range(n):
            batches.load(i, self.eval_x, self.eval_y)
            self._upload("tokens", self.eval_x)
            self._upload("targets", self.eval_y)
            self._replay(self.eval_graph, self._enqueue_eval)
            total += self._batch_loss()
        return total / max(1, n)

    def sample(self, n: int, rng: np.random.Generator) -> list[int]:
        """Generate n tokens from <|endoftext|> at temperature 1 (row 0 of the batch)."""
        cfg, o = self.config, self.run.opts
        tokens = [EOT]
        Vp, V = cfg.padded_vocab_size, cfg.vocab_size
        x = self.eval_x
        for _ in range(min(n, o.seq - 1)):
            x[:] = EOT
            x[:len(tokens)] = tokens
            self._upload("tokens", x)
            self._replay(self.forward_graph, self._enqueue_forward)
            t = len(tokens) - 1
            logits = self.backend.download("logits", elems=Vp, offset=t * Vp)[:V].astype(np.float64)
            probs = np.exp(logits - logits.max())
            probs /= probs.sum()
            tokens.append(int(rng.choice(V, p=probs)))
        return tokens[1:]

    # -- state ---------------------------------------------------------------------------------
    def params_now(self) -> np.ndarray:
        self.stream.synchronize()
        return self.backend.download("params", elems=self.program.num_params)

    def save(self, path: str | Path) -> Path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return formats.write_checkpoint(path, self.config, self.params_now())

    def holds_moments(self) -> bool:
        """Whether this rank's state file carries m and v (ZeRO-1: its shard; else rank 0 alone)."""
        return bool(self.run.opts.zero) or self.dist.is_root

    def state(self, step: int, rng: np.random.Generator) -> formats.TrainState:
        """This rank's part of the checkpoint after `step` optimizer steps."""
        o, d, p = self.run.opts, self.dist, self.program
        self.stream.synchronize()
        m = self.backend.download("m") if self.holds_moments() else np.empty(0, np.float32)
        v = self.backend.download("v") if self.holds_moments() else np.empty(0, np.float32)
        info = {"data": {"position": {"step": step, **self.run.train_data.position(step).as_dict()},
                         "train_tokens": o.train_tokens},
                "rng": {"sample": rng.bit_generator.state},
                "schedule": self.run.schedule.state(), "options": self.run.settings()}
        return formats.TrainState(step, d.world, d.rank, o.zero, self.M, o.batch, o.seq, self.run.total_batch, o.seed,
                                  p.num_params, p.shard[0] if m.size else 0, m, v, info)

    def restore(self, resume: checkpoint.Resume, rng: np.random.Generator) -> None:
        """Optimizer moments and the sampling RNG from the checkpoint (the parameters came with
        the model file). The moments are this rank's shard however many GPUs wrote them (and with
        or without ZeRO-1); the sampling RNG is rank 0's, the one rank that samples."""
        lo, hi = self.program.shard
        m, v = resume.moments(lo, hi, self.program.num_params)
        self.backend.upload("m", m)
        self.backend.upload("v", v)
        rng.bit_generator.state = formats.read_state(resume.state_of(0), moments=False).info["rng"]["sample"]

    def release(self) -> None:
        """Destroy the CUDA graphs once the GPU is done with them: a graph that captured NCCL calls
        holds the communicator, which cannot be finalized while it lives."""
        self.stream.synchronize()
        for g in [*self.graphs.values(), self.eval_graph, self.forward_graph]:
            if g is not None:
                g.destroy()
        self.graphs, self.eval_graph, self.forward_graph = {}, None, None


class LlmcLog:
    """llm.c's log file (-o): `s:STEP tel:LOSS` for validation, `s:STEP trl:LOSS` for training;
    appended to by a resumed run. No path: nothing is written."""

    def __init__(self, path: str | None, append: bool = False):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "a" if append else "w") if path else None

    def write(self, step: int, kind: str, loss: float) -> None:
        if self.file:
            self.file.write(f"s:{step} {kind}:{loss:.6f}\n")
            self.file.flush()

    def close(self) -> None:
        if self.file:
            self.file.close()


class SilentUI:
    """The UI of every rank but 0: prints nothing."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def run_rows(run: Run, source: str) -> list[tuple[str, object]]:
    """The run's parameters, as `workbench train` shows them before it starts."""
    o = run.opts
    schedule = o.lr_schedule + (f", warm-up {o.warmup}" if o.warmup else "") + (
        f", to {o.final_lr_frac:g} x lr" if o.lr_schedule != "constant" else "") + (
        f" over the last {o.decay_frac:g} of the steps" if o.lr_schedule == "wsd" else "")
    train_data, val_data = run.train_data, run.val_data
    return [("train tokens (-i)", train_data.shards.describe()),
            ("val tokens (-j)", val_data.shards.describe() if val_data else f"{o.val_tokens} (off)"),
            ("log (-o)", o.log or "-"), ("batch size (-b)", o.batch), ("sequence length (-t)", o.seq),
            ("total batch", f"{run.total_batch:,} tokens = {o.batch}*{o.seq} x {run.micro_steps} micro-steps x "
                            f"{run.launch.world} GPU(s)"),
            ("learning rate (-l)", f"{o.lr:g} ({schedule})"),
            ("optimizer", f"AdamW beta1 {o.beta1:g} beta2 {o.beta2:g} eps {o.eps:g}, weight decay {o.weight_decay:g} "
                          f"(2-D weights), grad clip {o.grad_clip:g}" + (" (off)" if not o.grad_clip else "")),
            ("val every (-v)", o.val_every), ("val batches (-m)", o.val_batches),
            ("sample every (-s)", o.sample_every), ("generate (-g)", o.gen_tokens), ("init", source),
            ("steps", f"{run.steps} ({train_data.per_epoch} per epoch)"
                      + (f", resumed at {run.resume.step}" if run.resume else "")),
            ("attention", o.attention),
            ("checkpoints", f"every {o.checkpoint_every} steps into {o.checkpoint_dir}/"
                            + (f", keep {o.keep}" if o.keep else "") if o.checkpoint_every else "-"),
            ("ZeRO", f"stage {o.zero}"), ("deterministic", "yes" if o.deterministic else "no"),
            ("recompute", {0: "0 (every activation kept)", 1: "1 (GELU)", 2: "2 (GELU, layernorms)"}[o.recompute]),
            ("weight, bias gradients",
             "on a second stream (--side-stream)" if o.side_stream else "in order (--one-stream)"),
            ("save", o.save or "-")]


def _decoder(train_tokens: str):
    """Decode with gpt2_tokenizer.bin beside the data (prepro writes it), else tiktoken."""
    path = Path(train_tokens).parent / "gpt2_tokenizer.bin"
    if path.exists():
        tok = formats.read_tokenizer(path)
        return tok.decode
    try:
        import tiktoken
        enc = tiktoken.get_encoding("gpt2")
        return lambda ids: enc.decode(list(ids))
    except Exception:
        return lambda ids: " ".join(map(str, ids))


def _notes(trainer: Trainer, run: Run, ui) -> None:
    p = trainer.program
    moments = 2 * 4 * p.shard_elems
    ui.note(f"optimizer state (m, v): {moments / 2**20:,.1f} MiB per GPU"
            + (f" (ZeRO-1: {p.shard_elems:,} of {p.num_params:,} parameters on each of {p.world} GPUs)"
               if run.opts.zero else ""))
    # at the run's precision: a bf16 run's families (the fused ones) may have no fp32 version promoted
    for family, e in trainer.promoted.stand_ins({c.family for c in p.calls}, p.precision).items():
        ui.note(f"--deterministic: {family} runs version {e['version']} ({e['title']}) in place of the promoted "
                f"version {trainer.promoted.manifest[entry_key(family, p.precision)]['version']}")
    for key, (e, why) in trainer.backend.fallbacks.items():
        ui.note(f"{key}: the promoted {why}: runs version {e['version']} ({e['title']}), its fallback")
    for family in p.fused:
        e = trainer.promoted.entry(family, p.precision)
        why = ("--fuse-gelu" if family in FUSED_GELU else
               "fused (not under --deterministic)" if family == FUSED_LN else "fused")
        ui.note(f"{why}: {family} version {e['version']} ({e['title']})")
    if run.resume:
        ui.note(f"resuming {run.resume.model} at step {run.resume.step}")
    grace = os.environ.get("OMPI_MCA_odls_base_sigkill_timeout")
    if run.launch.launcher == "OMPI_COMM_WORLD_SIZE" and run.opts.checkpoint_every and not (grace or "").isdigit():
        ui.note("mpirun, interrupted, sends its ranks SIGTERM and SIGKILL 1 s later: too soon to checkpoint; "
                "`mpirun --mca odls_base_sigkill_timeout 30 ...` gives them the time")


class Interrupts:
    """Ctrl-C, or SIGTERM (a scheduler's stop; mpirun's, when it is interrupted), while the loop
    runs: the first asks the run to finish its step, checkpoint (with --checkpoint-every) and stop;
    a second stops the process at once."""

    def __init__(self, dist):
        self.dist, self.flag, self.old = dist, False, {}

    def __enter__(self) -> "Interrupts":
        self.old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.old.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum, frame) -> None:
        if self.flag:
            sys.stderr.write(f"error: rank {self.dist.rank}: {signal.Signals(signum).name} again: stopping now, "
                             "without a checkpoint\n")
            drain_output()
            os._exit(128 + signum)
        self.flag = True
        self.dist.stop_requested()


class TrainLoop:
    """One run of `workbench train` on this rank: set-up (the model, the Trainer, a resume's state,
    the tables), then the steps with validation, sampling and checkpoints between them, then the
    saved model, the summary and the release of the graphs."""

    def __init__(self, run: Run, ui, dist):
        self.run, self.ui, self.dist, o = run, ui, dist, run.opts
        if run.resume:
            config, params = formats.read_checkpoint(run.resume.model)
            source = f"{run.resume.model} (step {run.resume.step})"
        else:
            config, params, source = load_model(o.init, o.seed)
        ui.run_table(run_rows(run, source))
        for note in run.notes:
            ui.note(note)
        ui.model_table(config)
        self.trainer = Trainer(run, config, params, dist)
        self.rng = np.random.default_rng(SAMPLE_SEED)
        self.start = 0
        if run.resume:
            self.trainer.restore(run.resume, self.rng)
            self.start = run.resume.step
        peak_kind = "bf16" if o.precision == "bf16" else ("tf32" if o.tf32 else "fp32")
        self.peak = matmul_peak(peak_kind) if dist.is_root else math.nan
        device = self.trainer.drv.Context.get_device()
        ui.device_line(device.name(), peak_kind, self.peak)
        self.power = PowerMeter(device.pci_bus_id())
        self.power.start()
        memory = self.trainer.backend.memory()
        ui.memory_table(memory, memory_groups(memory))
        _notes(self.trainer, run, ui)
        dist.barrier("the other ranks' set-up (compiling, capturing)")
        self.decode = _decoder(o.train_tokens)
        self.log = LlmcLog(o.log if dist.is_root else None, append=run.resume is not None)
        self.flops_per_tok = flops_per_token(config, o.seq)
        self.summary = {"steps": self.start, "start_step": self.start, "losses": [], "lrs": [], "val_losses": [],
                        "samples": [], "stopped": None, "checkpoints": [], "world": dist.world,
                        "micro_steps": run.micro_steps, "total_batch": run.total_batch,
                        "memory": memory_report(self.trainer)}
        self.last_finite: tuple[int, float] | None = None
        self.checkpointed = self.start

    def go(self) -> dict:
        failed = True
        try:
            with Interrupts(self.dist) as interrupts:
                halted = self.steps(interrupts)
                if self.run.opts.checkpoint_every and self.checkpointed < self.summary["steps"]:  # a stop, or the end
                    self.checkpoint(self.summary["steps"])
                if halted:
                    self.summary["stopped"] = f"interrupted after step {self.summary['steps']}"
                    self.ui.note(self.summary["stopped"])
            failed = False
        finally:
            self.finish(failed)
        self.ui.summary(self.summary)
        return self.summary

    def steps(self, interrupts: Interrupts) -> bool:
        """Train to the last step or an agreed stop; True if stopped by a signal. While a step runs
        the next one is launched behind it where nothing between them needs the GPU to stop
        (run_ahead), so the GPU goes from one step's last kernel to the next one's first while the
        host records, prints and checks the step that ended. The steps and their inputs are the
        same either way; a stop comes after the step in flight."""
        run, dist, stop = self.run, self.dist, False
        trainer, data = self.trainer, run.train_data
        in_flight = False  # whether `step` was launched behind the step before it
        # under MPI only the flag the ranks agreed on (`stop`) counts: they must stop together
        stopping = lambda: stop or (interrupts.flag and not dist.under_mpi)  # noqa: E731
        for step in range(self.start, run.steps + 1):
            last = step == run.steps
            if not in_flight:
                self.between_steps(step, last)
                halted = stopping()
                if last or halted:
                    return halted
                self.power.skip()  # the GPU's draw before this launch (validation, sampling) is no step's
                trainer.launch(data, step, run.schedule(step))
            # the next step's batches and plans while the GPU runs this one: their half was last
            # read by the step before this one, which has been collected
            trainer.prepare(data, step + 1)
            in_flight = self.run_ahead(step, stopping())
            if in_flight:
                trainer.launch(data, step + 1, run.schedule(step + 1))
            power = self.power.take()  # the samples since the last step's take: one step's period
            local, ms, host_us = trainer.collect(step)
            loss_sum, stops = dist.total([local, float(interrupts.flag)], f"the losses of step {step + 1}")
            stop = stops > 0
            self.after_step(step, loss_sum / dist.world, ms, host_us, run.schedule(step), power)
        return False

    def run_ahead(self, step: int, stopping: bool) -> bool:
        """Whether step + 1 may be launched while `step` runs: not after the first step (the graphs
        are captured after it), not when a stop was asked for, and not when anything between the
        two needs the GPU or the state after `step`: a checkpoint after it, validation or sampling
        before step + 1, or the end of the run. Under MPI every rank decides alike (`stopping` is
        the agreed stop there), so they launch the same steps."""
        o, nxt = self.run.opts, step + 1
        return not (stopping or step == self.start or nxt >= self.run.steps
                    or (o.checkpoint_every and nxt % o.checkpoint_every == 0)
                    or (self.run.val_data is not None and nxt % o.val_every == 0)
                    or (o.sample_every > 0 and nxt % o.sample_every == 0))

    def between_steps(self, step: int, last: bool) -> None:
        """Rank 0's validation and sampling before `step`, which the other ranks wait out."""
        o, dist, s = self.run.opts, self.dist, self.summary
        phase = False
        if self.run.val_data is not None and (step % o.val_every == 0 or last):
            phase = True
            if dist.is_root:
                vl = self.trainer.val_loss(self.run.val_data, o.val_batches)
                s["val_losses"].append((step, vl))
                self.ui.val(step, vl)
                self.log.write(step, "tel", vl)
        if o.sample_every > 0 and step > 0 and (step % o.sample_every == 0 or last):
            phase = True
            if dist.is_root:
                tokens = self.trainer.sample(o.gen_tokens, self.rng)
                s["samples"].append((step, tokens))
                self.ui.sample(step, self.decode(tokens))
        if phase:
            dist.barrier(f"rank 0's validation and sampling at step {step}")

    def after_step(self, step: int, loss: float, ms: float, host_us: float, lr: float,
                   power: Reading | None = None) -> None:
        """Record optimizer step `step` + 1 (its loss the mean over the ranks); capture the graphs
        after the first; checkpoint when due. A loss that is not finite ends the run."""
        s, o, trainer = self.summary, self.run.opts, self.trainer
        if not math.isfinite(loss):
            s["stopped"] = f"loss is {loss} at step {step + 1}" + (
                f" (last finite loss {self.last_finite[1]:.6f} at step {self.last_finite[0]})" if self.last_finite else "")
            raise TrainError(s["stopped"] + ": stopping")
        self.last_finite = (step + 1, loss)
        if step == self.start:
            trainer.capture()  # after the first (uncaptured) step has warmed everything up
            free, total_mem = trainer.drv.mem_get_info()
            s["gpu_memory_used"] = total_mem - free
            s["memory"] = memory_report(trainer, free)
        tps = self.run.total_batch / (ms / 1e3)
        mfu = 100 * self.flops_per_tok * tps / self.dist.world / (self.peak * 1e12)
        rec = StepRecord(step + 1, loss, ms, tps, mfu, host_us, lr, power)
        trainer.records.append(rec)
        s["losses"].append(loss)
        s["lrs"].append(lr)
        s["steps"] = step + 1
        self.ui.step(rec, self.run.steps)
        self.log.write(step + 1, "trl", loss)
        if o.checkpoint_every and (step + 1) % o.checkpoint_every == 0:
            self.checkpoint(step + 1)

    def checkpoint(self, step: int) -> None:
        o = self.run.opts
        path = checkpoint.save(Path(o.checkpoint_dir), step, self.trainer.state(step, self.rng), self.dist,
                               self.trainer.save, o.keep)
        self.summary["checkpoints"].append(str(path))
        self.ui.note(f"checkpoint {path} (step {step})")
        self.checkpointed = step

    def finish(self, failed: bool) -> None:
        """The log closed, the model saved (--save), the summary written (--json), the graphs
        destroyed; after a failure only what needs no GPU work past the failure."""
        o, dist, s, trainer = self.run.opts, self.dist, self.summary, self.trainer
        self.log.close()
        if o.save and dist.is_root and not failed:
            path = trainer.save(o.save)
            s["saved"] = str(path)
            self.ui.note(f"saved {path}")
        s.update(timing(trainer.records, self.power.limit_w, self.power.max_mhz), peak_tflops=self.peak,
                 peak_memory=trainer.backend.memory(),
                 graph_nodes={GRAPH_NAMES[kind]: g.nodes for kind, g in trainer.graphs.items()})
        if o.json and dist.is_root:
            Path(o.json).parent.mkdir(parents=True, exist_ok=True)
            formats.atomic_write(o.json, [json.dumps(s, indent=1, default=str).encode() + b"\n"])
        self.power.close()
        if not failed:  # after a failure the GPU may be stuck on a dead peer: the process just ends
            trainer.release()


def memory_report(trainer: Trainer, free_now: int | None = None) -> dict:
    """The run's GPU memory in bytes: its buffers by kind (model.memory_groups: parameters,
    gradients, optimizer state, activations, scratch) and their total; the GPU's size and what was
    free before the buffers; after the graphs are captured (free_now), what is in use on the GPU
    and how much of that this run took (buffers, library workspaces, graphs, code)."""
    memory = trainer.backend.memory()
    out = {**memory_groups(memory), "buffers": sum(memory.values()), "recompute": trainer.run.opts.recompute,
           "gpu_total": trainer.total_memory, "gpu_free_at_start": trainer.free_at_start}
    if free_now is not None:
        out.update(gpu_used_after_capture=trainer.total_memory - free_now,
                   run_after_capture=trainer.free_at_start - free_now)
    return out


def train(run: Run, ui, dist) -> dict:
    """Run training; `ui` prints (see train/ui.py), `dist` is the process group
    (train/distributed.py). Returns a summary dict (also what tests check)."""
    return TrainLoop(run, ui, dist).go()


def timing(records: list[StepRecord], power_limit_w: float | None = None, sm_max_mhz: int | None = None) -> dict:
    """Median step figures over steps 10-50 (the first steps warm up and capture the graph), and
    the GPU's power and SM clock over the same steps where they were read (workbench/power.py)."""
    span = [r for r in records if 10 <= r.step <= 50] or records[1:] or records
    if not span:
        return {}
    read = [r for r in span if r.power is not None]
    power = summarize([r.power for r in read], power_limit_w, sm_max_mhz, [r.ms for r in read])
    return {"median_ms": float(np.median([r.ms for r in span])),
            "median_tokens_per_s": float(np.median([r.tokens_per_s for r in span])),
            "median_mfu": float(np.median([r.mfu for r in span])),
            "median_host_us": float(np.median([r.host_us for r in span])),
            "window": f"steps {span[0].step}-{span[-1].step}", **({"power": power} if power else {})}
