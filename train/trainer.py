"""`workbench train`: GPT-2 in fp32 on the promoted kernels, one CUDA graph per step.

The loop, like the C fp32 trainer's: every step takes the next B*T tokens of the training file;
every `val_every` steps it evaluates `val_batches` batches; every `sample_every` steps it
generates `gen_tokens` tokens from <|endoftext|>. Per step the host copies the batch and the
optimizer's scalars into device buffers, replays one graph (forward, classifier, backward, global
norm, AdamW), and reads back the B*T per-token losses.
"""

from __future__ import annotations

import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from workbench.timing import matmul_peak

from . import formats
from .config import EOT, GPT2Config, PRESETS, preset
from .errors import TrainError
from .model import Program, flops_per_token
from .params import fresh_init

DATA_DIR = Path("data")


@dataclass
class TrainOptions:
    train_tokens: str = str(DATA_DIR / "tiny_shakespeare_train.bin")
    val_tokens: str = str(DATA_DIR / "tiny_shakespeare_val.bin")
    log: str | None = None
    batch: int = 4
    seq: int = 1024
    lr: float = 3e-4
    val_every: int = 20
    val_batches: int = 20
    sample_every: int = 20
    gen_tokens: int = 64
    init: str = "d12"
    steps: int | None = None
    attention: str = "softmax"
    tf32: bool = True
    save: str | None = None
    seed: int = 0
    warmup: int = 0          # linear warm-up steps (0: constant learning rate, as the C fp32 trainer)
    final_lr_frac: float = 1.0  # cosine decay to lr * this by the last step (1.0: no decay)
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0


class Batches:
    """Consecutive B*T+1-token windows of a token file, wrapping at its end (as the C trainer)."""

    def __init__(self, path: str, B: int, T: int):
        self.path = path
        self.tokens = formats.read_tokens(path).astype(np.int32)
        self.B, self.T = B, T
        if self.tokens.size < B * T + 1:
            raise TrainError(f"{path}: {self.tokens.size:,} tokens, fewer than one batch of B*T+1 = {B * T + 1:,}")
        self.pos = 0

    @property
    def per_epoch(self) -> int:
        return (self.tokens.size - 1) // (self.B * self.T)

    def reset(self) -> None:
        self.pos = 0

    def next(self, x: np.ndarray, y: np.ndarray) -> None:
        n = self.B * self.T
        if self.pos + n + 1 > self.tokens.size:
            self.pos = 0
        x[:] = self.tokens[self.pos:self.pos + n]
        y[:] = self.tokens[self.pos + 1:self.pos + n + 1]
        self.pos += n


def learning_rate(opts: TrainOptions, step: int, total: int) -> float:
    if opts.warmup and step < opts.warmup:
        return opts.lr * (step + 1) / opts.warmup
    if opts.final_lr_frac >= 1.0 or total <= opts.warmup:
        return opts.lr
    frac = (step - opts.warmup) / max(1, total - opts.warmup)
    low = opts.lr * opts.final_lr_frac
    return low + 0.5 * (opts.lr - low) * (1 + math.cos(math.pi * frac))


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


@dataclass
class Trainer:
    """Holds the device state of one run; `train()` below drives it."""

    opts: TrainOptions
    config: GPT2Config
    params: np.ndarray
    say: Callable = print
    records: list[StepRecord] = field(default_factory=list)

    def __post_init__(self):
        import pycuda.autoprimaryctx  # noqa: F401
        import pycuda.driver as drv

        from .backends import Graph, KernelBackend, PromotedSet
        o, cfg = self.opts, self.config
        self.drv = drv
        if o.seq > cfg.max_seq_len:
            raise TrainError(f"-t {o.seq} is longer than the model's maximum sequence length {cfg.max_seq_len}")
        self.program = Program(cfg, o.batch, o.seq, o.attention, o.tf32)
        self.backend = KernelBackend(self.program, PromotedSet())
        self.backend.upload("params", self.params.astype(np.float32))
        self.stream = drv.Stream()
        BT = o.batch * o.seq
        # Pinned host buffers: the batch and the optimizer scalars go up asynchronously.
        self.x = drv.pagelocked_empty(BT, np.int32)
        self.y = drv.pagelocked_empty(BT, np.int32)
        self.optimizer_scalars = drv.pagelocked_empty(6, np.float32)
        self.losses = drv.pagelocked_empty(BT, np.float32)
        self.steps_graph = None
        self.eval_graph = None
        self.forward_graph = None
        self._graph_cls = Graph

    # -- device work ---------------------------------------------------------------------------
    def _upload_batch(self) -> None:
        s, backend = self.stream, self.backend
        self.drv.memcpy_htod_async(backend.ptr(self.program.at("tokens")), self.x, s)
        self.drv.memcpy_htod_async(backend.ptr(self.program.at("targets")), self.y, s)

    def _enqueue_step(self, stream) -> None:
        p = self.program
        self.backend.run(p.forward + p.loss + p.backward + p.update, stream)

    def _enqueue_eval(self, stream) -> None:
        p = self.program
        self.backend.run(p.forward + p.loss, stream)

    def _enqueue_forward(self, stream) -> None:
        self.backend.run(self.program.forward, stream)

    def capture(self) -> None:
        """One warm-up step uncaptured (library handles, first-launch costs), then the graphs."""
        self.steps_graph = self._graph_cls(self.stream, self._enqueue_step)
        self.eval_graph = self._graph_cls(self.stream, self._enqueue_eval)
        self.forward_graph = self._graph_cls(self.stream, self._enqueue_forward)

    def _mean_loss(self) -> float:
        self.drv.memcpy_dtoh_async(self.losses, self.backend.ptr(self.program.at("losses")), self.stream)
        self.stream.synchronize()
        return float(np.mean(self.losses, dtype=np.float64))

    def step(self, batches: Batches, step: int, total: int) -> tuple[float, float, float, float]:
        """One optimizer step. Returns (loss, wall ms, host us spent outside the graph, lr)."""
        o = self.opts
        t0 = time.perf_counter()
        batches.next(self.x, self.y)
        lr = learning_rate(o, step, total)
        self.optimizer_scalars[:] = (lr, o.beta1, o.beta2, o.eps, o.weight_decay, step + 1)
        self._upload_batch()
        self.drv.memcpy_htod_async(self.backend.ptr(self.program.at("optimizer_scalars")), self.optimizer_scalars, self.stream)
        if self.steps_graph is None:
            self._enqueue_step(self.stream)
        else:
            self.steps_graph.launch(self.stream)
        t1 = time.perf_counter()
        loss = self._mean_loss()  # waits for the GPU
        t2 = time.perf_counter()
        return loss, (t2 - t0) * 1e3, (t1 - t0) * 1e6, lr

    def val_loss(self, batches: Batches, n: int) -> float:
        batches.reset()
        total = 0.0
        n = min(n, batches.per_epoch)
        for _ in range(n):
            batches.next(self.x, self.y)
            self._upload_batch()
            if self.eval_graph is None:
                self._enqueue_eval(self.stream)
            else:
                self.eval_graph.launch(self.stream)
            total += self._mean_loss()
        return total / max(1, n)

    def sample(self, n: int, seed: int) -> list[int]:
        """Generate n tokens from <|endoftext|> at temperature 1 (row 0 of the batch)."""
        cfg, o = self.config, self.opts
        rng = np.random.default_rng(seed)
        tokens = [EOT]
        Vp, V = cfg.padded_vocab_size, cfg.vocab_size
        for _ in range(min(n, o.seq - 1)):
            self.x[:] = EOT
            self.x[:len(tokens)] = tokens
            self.drv.memcpy_htod_async(self.backend.ptr(self.program.at("tokens")), self.x, self.stream)
            if self.forward_graph is None:
                self._enqueue_forward(self.stream)
            else:
                self.forward_graph.launch(self.stream)
            row = np.empty(Vp, dtype=np.float32)
            t = len(tokens) - 1
            self.drv.memcpy_dtoh_async(row, self.backend.ptr(self.program.at("logits")) + 4 * t * Vp, self.stream)
            self.stream.synchronize()
            logits = row[:V].astype(np.float64)
            probs = np.exp(logits - logits.max())
            probs /= probs.sum()
            tokens.append(int(rng.choice(V, p=probs)))
        return tokens[1:]

    def save(self, path: str) -> Path:
        self.stream.synchronize()
        params = self.backend.download("params")
        return formats.write_checkpoint(path, self.config, params)


def run_rows(o: TrainOptions, source: str, total: int, train_data: Batches, val_data: Batches | None) -> list[tuple[str, object]]:
    """The run's parameters, as `workbench train` shows them before it starts."""
    return [("train tokens (-i)", f"{o.train_tokens} ({train_data.tokens.size:,} tokens)"),
            ("val tokens (-j)", f"{o.val_tokens}" + (f" ({val_data.tokens.size:,} tokens)" if val_data else " (off)")),
            ("log (-o)", o.log or "-"), ("batch size (-b)", o.batch), ("sequence length (-t)", o.seq),
            ("learning rate (-l)", o.lr), ("val every (-v)", o.val_every), ("val batches (-m)", o.val_batches),
            ("sample every (-s)", o.sample_every), ("generate (-g)", o.gen_tokens), ("init", source),
            ("steps", f"{total} ({train_data.per_epoch} per epoch)"), ("attention", o.attention),
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


def train(opts: TrainOptions, ui) -> dict:
    """Run training; `ui` prints (see cli.py). Returns a summary dict (also what tests check)."""
    if opts.attention not in ("softmax", "relu"):
        raise TrainError(f"--attention must be softmax or relu, got {opts.attention!r}")
    config, params, source = load_model(opts.init, opts.seed)
    train_data = Batches(opts.train_tokens, opts.batch, opts.seq)
    val_data = Batches(opts.val_tokens, opts.batch, opts.seq) if opts.val_every > 0 else None
    total = opts.steps if opts.steps is not None else train_data.per_epoch
    ui.run_table(run_rows(opts, source, total, train_data, val_data))
    ui.model_table(config)
    trainer = Trainer(opts, config, params)
    peak = matmul_peak("tf32" if opts.tf32 else "fp32")
    ui.device_line(trainer.drv.Context.get_device().name(), opts.tf32, peak)
    ui.memory_table(trainer.backend.memory())
    decode = _decoder(opts.train_tokens)
    log = open(opts.log, "w") if opts.log else None
    flops_per_tok = flops_per_token(config, opts.seq)
    summary = {"steps": 0, "losses": [], "val_losses": [], "stopped": None}
    interrupted = {"flag": False}

    def on_sigint(signum, frame):
        interrupted["flag"] = True
    old = signal.signal(signal.SIGINT, on_sigint)
    last_finite = None
    try:
        for step in range(total + 1):
            last = step == total
            if val_data is not None and (step % opts.val_every == 0 or last):
                vl = trainer.val_loss(val_data, opts.val_batches)
                summary["val_losses"].append((step, vl))
                ui.val(step, vl)
                if log:
                    log.write(f"s:{step} tel:{vl:.6f}\n")
                    log.flush()
            if opts.sample_every > 0 and step > 0 and (step % opts.sample_every == 0 or last):
                ui.sample(step, decode(trainer.sample(opts.gen_tokens, seed=1337)))
            if last or interrupted["flag"]:
                break
            loss, ms, host_us, lr = trainer.step(train_data, step, total)
            if not math.isfinite(loss):
                summary["stopped"] = f"loss is {loss} at step {step + 1}" + (
                    f" (last finite loss {last_finite[1]:.6f} at step {last_finite[0]})" if last_finite else "")
                raise TrainError(summary["stopped"] + ": stopping")
            last_finite = (step + 1, loss)
            if step == 0:
                trainer.capture()  # after the first (uncaptured) step has warmed everything up
                free, total_mem = trainer.drv.mem_get_info()
                summary["gpu_memory_used"] = total_mem - free
            tps = opts.batch * opts.seq / (ms / 1e3)
            rec = StepRecord(step + 1, loss, ms, tps, 100 * flops_per_tok * tps / (peak * 1e12), host_us, lr)
            trainer.records.append(rec)
            summary["losses"].append(loss)
            summary["steps"] = step + 1
            ui.step(rec, total)
            if log:
                log.write(f"s:{step + 1} trl:{loss:.6f}\n")
                log.flush()
        if interrupted["flag"]:
            summary["stopped"] = f"interrupted after step {summary['steps']}"
            ui.note(summary["stopped"])
    finally:
        signal.signal(signal.SIGINT, old)
        if log:
            log.close()
        ok = summary["stopped"] is None or summary["stopped"].startswith("interrupted")
        if opts.save and ok:
            path = trainer.save(opts.save)
            summary["saved"] = str(path)
            ui.note(f"saved {path}")
    summary.update(timing(trainer.records), peak_tflops=peak, peak_memory=trainer.backend.memory(),
                   graph_nodes=getattr(trainer.steps_graph, "nodes", None))
    ui.summary(summary)
    return summary


def timing(records: list[StepRecord]) -> dict:
    """Median step figures over steps 10-50 (the first steps warm up and capture the graph)."""
    window = [r for r in records if 10 <= r.step <= 50] or records[1:] or records
    if not window:
        return {}
    return {"median_ms": float(np.median([r.ms for r in window])),
            "median_tokens_per_s": float(np.median([r.tokens_per_s for r in window])),
            "median_mfu": float(np.median([r.mfu for r in window])),
            "median_host_us": float(np.median([r.host_us for r in window])),
            "window": f"steps {window[0].step}-{window[-1].step}"}
