"""The trainer's options, and every check of them that needs no GPU.

`prepare` turns TrainOptions into a `Run`: the data files read as far as their headers, the model
size known (a preset, or a checkpoint's header), the optimizer step split into micro-steps, the
number of steps fixed, a resume's checkpoint found and its settings adopted, and every output
path created or proven writable. Each failure is one line naming the option (errors.bad_option),
raised before PyCUDA is imported: a mistyped option never costs a GPU set-up, nor a trained model.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from glob import has_magic as glob_has_magic
from pathlib import Path

import click

from workbench.files import unwritable_folder

from . import checkpoint, formats
from .backends import default_attention
from .config import GPT2Config, PRESETS
from .data import Shards, TrainData, ValData
from .distributed import Launch
from .errors import OptionError, TrainError, bad_option
from .model import attention_variant
from .schedule import SCHEDULES, Schedule

DATA_DIR = Path("data")

# -- the options, said once --------------------------------------------------------------------------
# Each field of TrainOptions is one `workbench train` option: its default, its flags and help
# (metadata: the CLI is made from them, train_options below), and what a resumed run does with it:
# KEPT, the checkpoint's value is kept and another given explicitly is refused (--steps alone may
# grow: a longer run); CARRIED, the checkpoint's value unless given again.
KEPT_, CARRIED_ = "kept", "carried"


class Finite(click.FloatRange):
    """A float in range that is also finite: nan and inf are refused (a range check lets nan by)."""

    name = "finite float"

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class StepCount(click.ParamType):
    name = "steps"

    def convert(self, value, param, ctx):
        n = click.INT.convert(value, param, ctx)
        if n != -1 and n < 1:
            self.fail(f"{n} is not >= 1 (or -1, one epoch)", param, ctx)
        return n


SIZE, COUNT = click.IntRange(min=1), click.IntRange(min=0)


def opt(default, *decls: str, help: str = "", resume: str | None = None, **click_kw):
    """A TrainOptions field that is the option `decls` (click's declarations) with this default."""
    meta = {"decls": decls, "help": help, "resume": resume, "click": click_kw}
    if isinstance(default, (list, dict, set, frozenset)):
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class TrainOptions:
    train_tokens: str = opt(str(DATA_DIR / "tiny_shakespeare_train.bin"), "-i", "--train-tokens", resume=CARRIED_,
                            help="Training tokens: a token file, or a quoted glob of shards walked in sorted order "
                                 "(e.g. 'data/fineweb_train_*.bin'; each shard at least one global batch + 1 tokens).")
    val_tokens: str = opt(str(DATA_DIR / "tiny_shakespeare_val.bin"), "-j", "--val-tokens", resume=CARRIED_,
                          help="Validation tokens: a token file or a quoted glob of shards.")
    log: str | None = opt(None, "-o", "--log", resume=CARRIED_,
                          help="Log file: step, train loss, val loss (llm.c format; appended to on --resume).")
    batch: int = opt(4, "-b", "--batch-size", type=SIZE, resume=CARRIED_,
                     help="Batch size B (per GPU, per micro-step).")
    seq: int = opt(1024, "-t", "--seq-len", type=SIZE, resume=KEPT_, help="Sequence length T.")
    lr: float = opt(3e-4, "-l", "--lr", type=Finite(min=0), resume=KEPT_, help="Peak learning rate.")
    val_every: int = opt(20, "-v", "--val-every", type=COUNT, resume=CARRIED_,
                         help="Validation loss every N steps (0: never).")
    val_batches: int = opt(20, "-m", "--val-batches", type=SIZE, resume=CARRIED_,
                           help="Validation batches (capped by the file).")
    sample_every: int = opt(20, "-s", "--sample-every", type=COUNT, resume=CARRIED_,
                            help="Sample every N steps (0: never).")
    gen_tokens: int = opt(64, "-g", "--gen-tokens", type=SIZE, resume=CARRIED_, help="Tokens to generate per sample.")
    init: str = opt("d12", "--init", help="Checkpoint (v3 fp32 / v5 bf16) or fresh model: d12, d24, d36, d48, tiny.")
    steps: int = opt(-1, "--steps", type=StepCount(), help="Optimizer steps; -1: one epoch of the training file.")
    precision: str = opt("fp32", "--precision", type=click.Choice(["fp32", "bf16"]), resume=KEPT_,
                         help="bf16: bf16 activations, weights and gradients on the promoted bf16 kernels, fp32 master "
                              "weights and optimizer state, logits' loss in fp32.")
    attention: str | None = opt(None, "--attention", type=click.Choice(["softmax", "flash", "cudnn", "relu"]),
                                resume=KEPT_,
                                help="What each costs (errors against a float64 reference, the families' checks): "
                                     "softmax: the promoted attention at the precision, fp32 on CUDA cores (~1e-6, "
                                     "exact; the slowest); flash: our tensor-core flash attention (fp32: TF32 inputs, "
                                     "~1.5e-3, as exact as the --tf32 matmuls around it; bf16: bf16 inputs, fp32 sums, "
                                     "~4e-3); cudnn: cuDNN's fused attention (bf16 only, the same ~4e-3 as flash, and "
                                     "faster); relu: ReLU attention, another model (fp32: CUDA cores; bf16: tensor "
                                     "cores). [default: the fastest that is as exact as the run's matmuls: flash at "
                                     "fp32 with --tf32, softmax with --no-tf32, cudnn at bf16 where it is promoted "
                                     "and the cuDNN frontend is installed, else flash]")
    tf32: bool = opt(True, "--tf32/--no-tf32", resume=KEPT_, help="TF32 tensor cores for the fp32 matmuls.")
    save: str | None = opt(None, "--save", type=click.Path(dir_okay=False),
                           help="Write a v3 checkpoint here at the end (and on Ctrl-C).")
    seed: int = opt(0, "--seed", type=click.IntRange(0, 2**31 - 1), resume=KEPT_, help="Seed of a fresh init.")
    lr_schedule: str = opt("constant", "--lr-schedule", type=click.Choice(SCHEDULES), resume=KEPT_,
                           help="cosine / linear: decay to lr * --final-lr-frac at the last step; wsd: constant, then "
                                "linear decay over the last --decay-frac of the steps. All start with --warmup.")
    warmup: int = opt(0, "--warmup", type=COUNT, resume=KEPT_, help="Linear learning-rate warm-up steps.")
    final_lr_frac: float = opt(0.0, "--final-lr-frac", type=Finite(0, 1), resume=KEPT_,
                               help="The decaying schedules end at lr * this.")
    decay_frac: float = opt(0.2, "--decay-frac", type=Finite(0, 1, min_open=True), resume=KEPT_,
                            help="wsd: the fraction of the steps the decay takes.")
    grad_clip: float = opt(1.0, "--grad-clip", type=Finite(min=0), resume=KEPT_,
                           help="Clip the gradient to this global norm (0: no clipping).")
    weight_decay: float = opt(0.0, "--weight-decay", type=Finite(min=0), resume=KEPT_,
                              help="AdamW's decoupled weight decay, on the 2-D weights only (wte, wpe, the four "
                                   "matmul weights).")
    beta1: float = opt(0.9, "--beta1", type=Finite(0, 1, max_open=True), resume=KEPT_)
    beta2: float = opt(0.999, "--beta2", type=Finite(0, 1, max_open=True), resume=KEPT_)
    eps: float = opt(1e-8, "--eps", type=Finite(min=0, min_open=True), resume=KEPT_)
    total_batch: int | None = opt(None, "--total-batch", type=SIZE, resume=KEPT_,
                                  help="Tokens per optimizer step: a multiple of B*T*GPUs, reached by accumulating "
                                       "gradients over micro-steps [default: B*T*GPUs].")
    checkpoint_every: int = opt(0, "--checkpoint-every", type=COUNT, resume=CARRIED_,
                                help="Write a checkpoint (model + optimizer state) every N steps, at the last step and "
                                     "on Ctrl-C (0: never).")
    checkpoint_dir: str = opt("out", "--checkpoint-dir", type=click.Path(file_okay=False), resume=CARRIED_,
                              help="Folder of the checkpoints and of `latest`, their pointer.")
    keep: int = opt(0, "--keep", type=COUNT, resume=CARRIED_, help="Keep only the newest K checkpoints (0: all).")
    resume: str | None = opt(None, "--resume", metavar="PATH|latest", show_default=False,
                             help="Continue a run from a checkpoint (latest: the newest in --checkpoint-dir; or a "
                                  "folder, or its model_*.bin): same data, learning rates, optimizer state and sampling "
                                  "as without the stop, on any number of GPUs (same --total-batch). latest also starts "
                                  "the run when no checkpoint exists yet and exits 0 when the run is already complete, "
                                  "so `until workbench train ... --checkpoint-every N --resume latest; do sleep 1; "
                                  "done` finishes a run that keeps being killed.")
    deterministic: bool = opt(False, "--deterministic", is_flag=True,
                              help="Bit-identical runs: families promoted with float atomics run their promoted "
                                   "deterministic stand-in, and the layernorm backward that also sums the "
                                   "projections' bias gradients (layernorm_backward_proj_bias, atomics only) gives "
                                   "way to layernorm_backward and matmul_backward_bias.")
    fuse_gelu: bool = opt(True, "--fuse-gelu/--no-fuse-gelu",
                          help="The MLP's fc layer and GELU as one GEMM with the GELU in its epilogue, and their "
                               "backward likewise (matmul_forward_gelu, matmul_backward_dgelu), where a version of "
                               "them is promoted at the precision.")
    side_stream: bool = opt(False, "--side-stream/--one-stream",
                            help="Run the weight-gradient GEMMs (cuBLASLt's) and the bias gradients on a second "
                                 "stream beside the rest of the backward, joined where a later call needs their "
                                 "buffers: the same kernels on the same operands, so the same numbers. Off by "
                                 "default: on an H100 at bf16 B=32 it measured from 0.4 ms a step faster to no "
                                 "faster, by machine.")
    zero: int = opt(0, "--zero", type=click.IntRange(0, 1), resume=CARRIED_,
                    help="1: ZeRO-1, each GPU keeps and updates only its shard of the optimizer state.")
    recompute: int = opt(0, "--recompute", type=click.IntRange(0, 2), resume=CARRIED_,
                         help="Memory for time: 0 keeps every activation for the backward; 1 recomputes each layer's "
                              "GELU output there instead (one buffer for all layers); 2 also its layernorm outputs. "
                              "The step's numbers are the same at every setting.")
    json: str | None = opt(None, "--json", type=click.Path(dir_okay=False),
                           help="Write the run's summary (the losses included) here.")
    force: bool = opt(False, "--force", is_flag=True,
                      help="Replace an existing -o, --save or --json file (a resumed run may replace its own without "
                           "it).")
    comm_timeout: float = opt(60.0, "--comm-timeout", type=Finite(min=1),
                              help="Under mpirun: seconds a rank waits for the others before it stops every rank.")
    explicit: frozenset = field(default_factory=frozenset)  # the options given on the command line (not an option)


def described() -> list[dataclasses.Field]:
    """The fields of TrainOptions that are options, in --help order."""
    return [f for f in dataclasses.fields(TrainOptions) if "decls" in f.metadata]


def flag_of(name: str) -> str:
    """The option's long flag, as errors name it (--batch-size for batch)."""
    decls = next(f for f in described() if f.name == name).metadata["decls"]
    return [d for d in decls if d.startswith("--")][0].split("/")[0]


def train_options(command):
    """Decorate a click command with every TrainOptions option (their defaults shown unless None)."""
    for f in reversed(described()):
        m = f.metadata
        kw = dict(m["click"])
        if f.default is not None and not kw.get("is_flag"):
            kw.setdefault("show_default", True)
        if f.default is not dataclasses.MISSING:
            kw.setdefault("default", f.default)
        command = click.option(*m["decls"], f.name, help=m["help"] or None, **kw)(command)
    return command


# What a resumed run keeps (with the flag that sets it), and what it carries over unless given.
KEPT = {f.name: flag_of(f.name) for f in described() if f.metadata["resume"] == KEPT_}
CARRIED = tuple(f.name for f in described() if f.metadata["resume"] == CARRIED_)


@dataclass
class Run:
    """Options resolved against the data, the model, the checkpoint and the process group."""
    opts: TrainOptions
    launch: Launch
    config: GPT2Config
    micro_steps: int
    steps: int
    schedule: Schedule
    resume: checkpoint.Resume | None = None
    train_data: TrainData | None = None
    val_data: ValData | None = None
    notes: tuple[str, ...] = ()

    @property
    def total_batch(self) -> int:
        return self.opts.batch * self.opts.seq * self.micro_steps * self.launch.world

    def settings(self) -> dict:
        """What a checkpoint records for a resume: KEPT, CARRIED and the number of steps."""
        out = {key: getattr(self.opts, key) for key in (*KEPT, *CARRIED)}
        return {**out, "total_batch": self.total_batch, "steps": self.steps}


class RunComplete(TrainError):
    """`--resume latest` found the run's last step already checkpointed: nothing to do (exit 0),
    which ends a retry loop such as `until workbench train ... --resume latest; do sleep 1; done`."""

    exit_code = 0


def prepare(opts: TrainOptions, launch: Launch) -> Run:
    resume, notes = None, []
    if opts.resume:
        resume = find_resume(opts)
        if resume is None:
            notes.append(f"--resume latest: no checkpoint in {opts.checkpoint_dir}/ yet: starting a fresh run")
        else:
            opts = adopt(opts, resume, launch)
    if opts.attention is None:
        opts = dataclasses.replace(opts, attention=default_attention(opts.precision, opts.tf32))
    try:
        variant = attention_variant(opts.attention, opts.precision)
    except TrainError as e:
        raise bad_option("--attention", str(e)) from None
    if variant == "tf32" and not opts.tf32:
        raise bad_option("--attention", "flash at fp32 runs on TF32 tensor cores: it needs --tf32 "
                                        "(--attention softmax is the exact fp32 one)")
    # Outputs: a file that exists is replaced only with --force, or by the run it belongs to (a
    # resumed run appends to its log and rewrites its summary and model); missing folders are made
    # when the first file is written, so a run refused here leaves nothing behind.
    replace = opts.force or resume is not None
    for path, option in ((opts.log, "-o"), (opts.save, "--save"), (opts.json, "--json")):
        if path:
            writable_file(Path(path), option, replace)
    if opts.checkpoint_every > 0:
        writable_folder(Path(opts.checkpoint_dir), "--checkpoint-dir", create=False)
    config = model_config(opts.init if resume is None else str(resume.model), "--init" if resume is None else "--resume")
    B, T = opts.batch, opts.seq
    if T > config.max_seq_len:
        raise bad_option("--seq-len", f"{T} is longer than the model's maximum sequence length {config.max_seq_len}")
    per_step = B * T * launch.world
    total_batch = opts.total_batch or per_step
    if total_batch % per_step:
        if resume is not None:
            raise bad_option("--total-batch", f"the checkpoint's total batch of {total_batch:,} tokens is not a multiple "
                                              f"of B*T*GPUs = {B}*{T}*{launch.world} = {per_step:,}: give a -b that "
                                              f"divides it on {launch.world} GPU(s)")
        raise bad_option("--total-batch", f"{total_batch} is not a multiple of B*T*GPUs = {B}*{T}*{launch.world} = "
                                          f"{per_step} tokens")
    micro_steps = total_batch // per_step
    train_data = data_of(lambda: TrainData(token_shards(opts.train_tokens, "-i"), B, T, total_batch), "-i")
    val_data = data_of(lambda: ValData(token_shards(opts.val_tokens, "-j"), B, T), "-j") if opts.val_every > 0 else None
    steps = opts.steps if opts.steps != -1 else train_data.per_epoch
    if resume is not None:
        check_position(resume, train_data)
        if resume.step >= steps:
            if opts.resume == "latest" and (resume.step == steps or "steps" not in opts.explicit):
                raise RunComplete(f"the run is complete: {opts.checkpoint_dir}/ holds its checkpoint of step "
                                  f"{resume.step} of {steps} (give a larger --steps to train on)")
            raise bad_option("--steps", f"the checkpoint is at step {resume.step} of {steps}: nothing left to train "
                                        f"(give a larger --steps)")
    check_schedule_options(opts)
    schedule = Schedule(opts.lr_schedule, opts.lr, steps, opts.warmup, opts.final_lr_frac, opts.decay_frac)
    return Run(opts, launch, config, micro_steps, steps, schedule, resume, train_data, val_data, tuple(notes))


def find_resume(opts: TrainOptions) -> checkpoint.Resume | None:
    """The checkpoint --resume names; None for `latest` when no checkpoint exists yet (a retry
    loop's first start), which then needs --checkpoint-every so that a later start can resume."""
    latest = opts.resume == "latest"
    if latest and checkpoint.read_latest(Path(opts.checkpoint_dir)) is None:
        if opts.checkpoint_every <= 0:
            raise bad_option("--resume", f"no checkpoint in {opts.checkpoint_dir}/ to resume, and without "
                                         f"--checkpoint-every N this run would write none either")
        return None
    if "init" in opts.explicit and not latest:
        raise bad_option("--init", "give --init or --resume, not both (a resumed run continues its checkpoint's model)")
    return checkpoint.find(opts.resume, Path(opts.checkpoint_dir))


def check_position(resume: checkpoint.Resume, data: TrainData) -> None:
    """The global batch the checkpoint's run would read next must be the one these shards give."""
    saved = formats.read_state(resume.state_of(0), moments=False).info.get("data", {}).get("position")
    if saved is None:  # written before positions were recorded
        return
    here = data.position(resume.step).as_dict()
    if (saved["file"], saved["offset"]) != (here["file"], here["offset"]):
        raise bad_option("-i", f"the checkpoint's run reads step {resume.step + 1} from token {saved['offset']:,} of "
                               f"{saved['file']}; these shards put it at token {here['offset']:,} of {here['file']}: "
                               f"resume with the run's own -i")


def adopt(opts: TrainOptions, resume: checkpoint.Resume, launch: Launch) -> TrainOptions:
    """The options with the checkpoint's settings: KEPT ones refused where an explicit option
    differs; the number of steps and CARRIED ones taken unless given. The number of GPUs may
    differ from the checkpoint's (the optimizer state is re-sharded: Trainer.restore)."""
    state = formats.read_state(resume.state_of(0), moments=False)
    saved = state.info.get("options", {})
    changes = {}
    for key, flag in KEPT.items():
        if key not in saved:
            raise TrainError(f"{resume.state_of(0)}: the state records no {key}; it was not written by this trainer")
        if key in opts.explicit and getattr(opts, key) != saved[key]:
            raise bad_option(flag, f"{getattr(opts, key)} differs from the checkpoint's {saved[key]}: a resumed run "
                                   f"keeps the settings it was started with (leave {flag} out)")
        changes[key] = saved[key]
    for key in ("steps", *CARRIED):
        if key not in opts.explicit and key in saved:
            changes[key] = saved[key]
    return dataclasses.replace(opts, **changes)


def model_config(init: str, option: str) -> GPT2Config:
    if init in PRESETS:
        return PRESETS[init]
    if not Path(init).is_file():
        raise bad_option(option, f"{init!r} is neither a checkpoint file nor a model ({', '.join(PRESETS)})")
    try:
        return formats.checkpoint_config(init)[0]
    except TrainError as e:
        raise bad_option(option, str(e)) from None


def data_of(make, option: str):
    """make(), with a TrainError about the data (a shard shorter than a batch) as one line naming `option`."""
    try:
        return make()
    except OptionError:
        raise
    except TrainError as e:
        raise bad_option(option, str(e)) from None


def token_shards(pattern: str, option: str) -> Shards:
    """The shard set a -i / -j value names (a file or a glob), headers read and checked."""
    if not glob_has_magic(pattern) and not Path(pattern).exists():
        raise bad_option(option, f"{pattern} does not exist: run `workbench prepro tinyshakespeare` (or `workbench "
                                 f"prepro text FILES...`) first, or pass {option}")
    try:
        return Shards(pattern)
    except TrainError as e:
        raise bad_option(option, str(e)) from None


def check_schedule_options(opts: TrainOptions) -> None:
    if "final_lr_frac" in opts.explicit and opts.lr_schedule == "constant":
        raise bad_option("--final-lr-frac", "the constant schedule does not decay: add --lr-schedule cosine, linear or wsd")
    if "decay_frac" in opts.explicit and opts.lr_schedule != "wsd":
        raise bad_option("--decay-frac", "only the wsd schedule has a decay phase: add --lr-schedule wsd")


def writable_folder(folder: Path, option: str, create: bool = True) -> None:
    """Prove a file can be made in `folder`: create it (and its parents) first, or with
    create=False probe its nearest existing ancestor, leaving the disk as it was."""
    why = unwritable_folder(folder, create)
    if why:
        raise bad_option(option, f"cannot write into {folder}: {why}")


def writable_file(path: Path, option: str, replace: bool = False) -> None:
    """Prove `path` can be written without touching the disk; an existing file only with `replace`."""
    if path.is_dir():
        raise bad_option(option, f"{path} is a folder")
    if path.exists() and not replace:
        raise bad_option(option, f"{path} exists: pass --force to replace it")
    writable_folder(path.parent, option, create=False)
    if path.exists() and not os.access(path, os.W_OK):
        raise bad_option(option, f"cannot write {path}: permission denied")
