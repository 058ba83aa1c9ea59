"""Checkpoints of a run: a folder of llm.c model checkpoints, our state files, and a pointer.

For optimizer step N (N steps done) the folder holds

    model_0000000N.bin          the parameters, an llm.c v3 checkpoint (`--init` takes it)
    state_0000000N_RRRRR.bin    rank R's trainer state (formats.py documents the layout)
    latest                      {"step": N, "world": W}: the newest complete checkpoint

Every file is written through a temporary file and os.replace. The order makes a checkpoint
complete before anything points at it: each rank writes its state, rank 0 the model, all ranks
meet at a barrier, then rank 0 replaces `latest`. A kill -9 at any moment leaves `latest` naming
the previous complete checkpoint; `--keep K` deletes older steps only after that.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import formats
from .errors import TrainError, bad_option

LATEST = "latest"
MODEL_RE = re.compile(r"model_(\d{8})\.bin$")
STATE_RE = re.compile(r"state_(\d{8})_(\d{5})\.bin$")


def model_path(folder: Path, step: int) -> Path:
    return Path(folder) / f"model_{step:08d}.bin"


def state_path(folder: Path, step: int, rank: int) -> Path:
    return Path(folder) / f"state_{step:08d}_{rank:05d}.bin"


def save(folder: Path, step: int, state: formats.TrainState, dist, write_model, keep: int = 0) -> Path:
    """Write one checkpoint from every rank. `write_model(path)` is called on rank 0 only;
    `dist` gives rank, is_root and barrier(what) (train/distributed.py)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    formats.write_state(state_path(folder, step, dist.rank), state)
    model = model_path(folder, step)
    if dist.is_root:
        write_model(model)
    dist.barrier("writing the checkpoint")
    if dist.is_root:
        write_latest(folder, step, dist.world)
        prune(folder, keep)
    return model


def write_latest(folder: Path, step: int, world: int) -> Path:
    return formats.atomic_write(Path(folder) / LATEST, [json.dumps({"step": step, "world": world}).encode() + b"\n"])


def steps_in(folder: Path) -> list[int]:
    """The steps any checkpoint file in `folder` belongs to, oldest first."""
    found = set()
    for p in Path(folder).iterdir():
        m = MODEL_RE.match(p.name) or STATE_RE.match(p.name)
        if m:
            found.add(int(m.group(1)))
    return sorted(found)


def prune(folder: Path, keep: int) -> list[Path]:
    """Keep the newest `keep` steps (0: all) and the one `latest` names; delete the rest, and the
    temporary files of writes that were killed. Returns what was deleted."""
    folder = Path(folder)
    removed = [p for p in folder.iterdir() if p.name.startswith((".model_", ".state_", f".{LATEST}."))
               and p.name.endswith(".tmp")]
    if keep > 0:
        protected = set(steps_in(folder)[-keep:])
        latest = read_latest(folder)
        if latest is not None:
            protected.add(latest)
        for p in folder.iterdir():
            m = MODEL_RE.match(p.name) or STATE_RE.match(p.name)
            if m and int(m.group(1)) not in protected:
                removed.append(p)
    for p in removed:
        p.unlink(missing_ok=True)
    return removed


def read_latest(folder: Path) -> int | None:
    path = Path(folder) / LATEST
    try:
        return int(json.loads(path.read_text())["step"])
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError):
        raise bad_option("--resume", f"{path} is not a checkpoint pointer (expected {{\"step\": N, ...}})") from None


@dataclass
class Resume:
    """A complete checkpoint to continue from."""
    step: int
    model: Path
    states: list[Path]  # one per rank, rank order

    def state_of(self, rank: int) -> Path:
        return self.states[rank]

    def moments(self, lo: int, hi: int, num_params: int) -> tuple[np.ndarray, np.ndarray]:
        """AdamW's m and v for parameters [lo, hi) of the flat vector, gathered from the state
        files however the writing run sharded them (ZeRO-1 over any number of GPUs: each file its
        shard; without it: rank 0's file holds them all), so that a run on another number of GPUs,
        with or without ZeRO-1, takes its own shard. Past the last parameter (padding): zeros."""
        m, v = np.zeros(hi - lo, np.float32), np.zeros(hi - lo, np.float32)
        covered = np.zeros(hi - lo, bool)
        for path in self.states:
            start, ms, vs = formats.read_state_moments(path, lo, hi)
            m[start - lo:start - lo + ms.size] = ms
            v[start - lo:start - lo + vs.size] = vs
            covered[start - lo:start - lo + ms.size] = True
        real = min(hi, num_params) - lo
        if real > 0 and not covered[:real].all():
            first = lo + int(np.argmin(covered[:real]))
            raise TrainError(f"the checkpoint of step {self.step} ({self.model.parent}) holds no optimizer state for "
                             f"parameter {first:,}: its state files are incomplete")
        return m, v


def find(spec: str, checkpoint_dir: Path) -> Resume:
    """`--resume latest` (in --checkpoint-dir), a checkpoint folder (its latest), or a
    model_*.bin / state_*.bin file of the step to continue from."""
    path = Path(checkpoint_dir) if spec == "latest" else Path(spec)
    if path.is_dir():
        step = read_latest(path)
        if step is None:
            raise bad_option("--resume", f"no checkpoint to resume in {path} ({path / LATEST} is missing)")
        folder = path
    elif path.exists():
        m = MODEL_RE.match(path.name) or STATE_RE.match(path.name)
        if not m:
            raise bad_option("--resume", f"{path} is not a checkpoint file (model_NNNNNNNN.bin or "
                                         f"state_NNNNNNNN_RRRRR.bin)")
        step, folder = int(m.group(1)), path.parent
    elif spec == "latest":
        raise bad_option("--resume", f"no checkpoint to resume: the checkpoint folder {path} does not exist")
    else:
        raise bad_option("--resume", f"{path}: no such file or folder")
    model = model_path(folder, step)
    first = state_path(folder, step, 0)
    for p in (model, first):
        if not p.is_file():
            raise bad_option("--resume", f"the checkpoint of step {step} is incomplete: {p} is missing")
    world = formats.read_state(first, moments=False).world
    states = [state_path(folder, step, r) for r in range(world)]
    missing = [str(p) for p in states if not p.is_file()]
    if missing:
        raise bad_option("--resume", f"the checkpoint of step {step} is incomplete: {', '.join(missing)} missing")
    return Resume(step, model, states)
