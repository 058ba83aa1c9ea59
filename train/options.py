"""The trainer's options, and every check of them that needs no GPU.

`prepare` turns TrainOptions into a `Run`: the data files read as far as their headers, the model
size known (a preset, or a checkpoint's header), the optimizer step split into micro-steps, the
number of steps fixed, a resume's checkpoint found and its settings adopted, and every output
path created or proven writable. Each failure is one line naming the option (errors.bad_option),
raised before PyCUDA is imported: a mistyped option never costs a GPU set-up, nor a trained model.
"""

from __future__ import annotations

import dataclasses
import os
from glob import has_magic as glob_has_magic
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import checkpoint, formats
from .config import GPT2Config, PRESETS
from .data import Shards, TrainData, ValData
from .distributed import Launch
from .errors import OptionError, TrainError, bad_option
from .model import attention_variant
from .schedule import Schedule

DATA_DIR = Path("data")

# What a resumed run keeps from its checkpoint (with the flag that sets it): an option given
# explicitly with another value is refused; --steps alone may change (a longer run).
KEPT = {"seq": "--seq-len", "total_batch": "--total-batch",
        "attention": "--attention", "precision": "--precision", "tf32": "--tf32", "lr": "--lr", "lr_schedule": "--lr-schedule",
        "warmup": "--warmup", "final_lr_frac": "--final-lr-frac", "decay_frac": "--decay-frac",
        "beta1": "--beta1", "beta2": "--beta2", "eps": "--eps", "weight_decay": "--weight-decay",
        "grad_clip": "--grad-clip", "seed": "--seed"}
# What a resumed run also takes from its checkpoint unless given again: where the data and the log
# are, how it evaluates and samples, how often and where it checkpoints; and how the total batch is
# split (B per GPU, ZeRO), which may change with the number of GPUs: the global batches stay the same.
CARRIED = ("batch", "zero", "train_tokens", "val_tokens", "log", "val_every", "val_batches", "sample_every", "gen_tokens",
           "checkpoint_every", "checkpoint_dir", "keep")


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
    steps: int = -1               # -1: one epoch of the training file
    attention: str | None = None  # softmax, flash, cudnn, relu (None: softmax at fp32, flash at bf16)
    precision: str = "fp32"       # fp32, or bf16 (mixed: fp32 master weights and optimizer state)
    tf32: bool = True
    save: str | None = None
    seed: int = 0
    lr_schedule: str = "constant"
    warmup: int = 0               # linear warm-up steps
    final_lr_frac: float = 0.0    # cosine / linear / wsd end at lr * this
    decay_frac: float = 0.2       # wsd decays over this last fraction of the steps
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0     # on the 2-D weights only
    grad_clip: float = 1.0        # max global gradient norm (0: no clipping)
    total_batch: int | None = None  # tokens per optimizer step (None: B * T * GPUs)
    checkpoint_every: int = 0
    checkpoint_dir: str = "out"
    keep: int = 0                 # checkpoints kept (0: all)
    resume: str | None = None     # a checkpoint file or folder, or "latest"
    deterministic: bool = False
    zero: int = 0                 # 1: ZeRO-1, the optimizer state sharded over the GPUs
    json: str | None = None       # the run's summary (losses included), written at the end
    force: bool = False           # replace an existing -o, --save or --json file
    comm_timeout: float = 60.0    # seconds a rank waits for the others before it stops the job
    explicit: frozenset = field(default_factory=frozenset)  # the options given on the command line


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
        opts = dataclasses.replace(opts, attention="flash" if opts.precision == "bf16" else "softmax")
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
    probe_in = Path(folder)
    if not create:
        while not probe_in.exists() and probe_in.parent != probe_in:
            probe_in = probe_in.parent
    try:
        if create:
            probe_in.mkdir(parents=True, exist_ok=True)
        elif not probe_in.is_dir():
            raise NotADirectoryError(20, "Not a directory")
        fd, probe = tempfile.mkstemp(dir=probe_in, prefix=".probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise bad_option(option, f"cannot write into {folder}: {e.strerror or e}") from None


def writable_file(path: Path, option: str, replace: bool = False) -> None:
    """Prove `path` can be written without touching the disk; an existing file only with `replace`."""
    if path.is_dir():
        raise bad_option(option, f"{path} is a folder")
    if path.exists() and not replace:
        raise bad_option(option, f"{path} exists: pass --force to replace it")
    writable_folder(path.parent, option, create=False)
    if path.exists() and not os.access(path, os.W_OK):
        raise bad_option(option, f"cannot write {path}: permission denied")
