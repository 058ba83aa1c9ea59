"""The trainer's data: token shards (llm.c's format, one file or a glob of many) and the batches
each rank reads from them.

`-i 'data/fineweb_train_*.bin'` names a shard set: the files the glob matches, in sorted order
(a plain path is a set of one). Only headers are read up front (`Shards`), so every check runs
before any GPU work; the tokens themselves are memory-mapped when a batch needs them.

Training (`TrainData`): optimizer step s reads global batch s, total_batch + 1 consecutive tokens
of one shard; its rows of T tokens are split among the GPUs and micro-steps, micro-step k of rank
r taking window k * world + r, the B rows from token (k * world + r) * B * T of the global batch.
Each shard holds (tokens - 1) // total_batch whole global batches; the set walks the shards in
order, then starts over (an epoch spans every shard). Where a global batch lies depends only on
the step and the total batch, not on how it is split, so a run resumed on another number of GPUs
(or another B, with the same --total-batch) reads exactly the tokens the run would have read.

Validation (`ValData`): windows of B*T + 1 tokens, one after another through the shards; rank 0
evaluates the first --val-batches of them.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import formats
from .errors import TrainError


@dataclass(frozen=True)
class Shard:
    path: str
    tokens: int


class Shards:
    """The token files a -i / -j value names, in order, with their token counts (headers only)."""

    def __init__(self, pattern: str, what: str = "token file"):
        self.pattern = str(pattern)
        if glob.has_magic(self.pattern):
            paths = sorted(p for p in glob.glob(os.path.expanduser(self.pattern)) if not os.path.isdir(p))
            if not paths:
                raise TrainError(f"{self.pattern}: the glob matches no file")
        else:
            path = Path(self.pattern).expanduser()
            if not path.exists():
                raise TrainError(f"{self.pattern}: no such file")
            if path.is_dir():
                raise TrainError(f"{self.pattern}: is a folder (give a token file, or a glob such as "
                                 f"'{self.pattern.rstrip('/')}/*_train_*.bin')")
            paths = [str(path)]
        self.shards = [Shard(p, formats.token_count(p)) for p in _same_format(paths)]
        self._maps: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.shards)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    def describe(self) -> str:
        n = len(self.shards)
        return f"{self.pattern} ({self.tokens:,} tokens" + (f" in {n} shards)" if n > 1 else ")")

    def read(self, i: int, start: int, n: int) -> np.ndarray:
        """n tokens of shard i from token `start` (memory-mapped, opened on first use)."""
        tokens = self._maps.get(i)
        if tokens is None:
            tokens = self._maps[i] = formats.read_tokens(self.shards[i].path, mmap=True)
        return tokens[start:start + n]


def _same_format(paths: list[str]) -> list[str]:
    """Refuse a set whose files are not all GPT-2 token files of one version, in one line naming a
    file that differs (formats.token_count then checks each file's size)."""
    kinds = {}
    for p in paths:
        try:
            with open(p, "rb") as f:
                head = np.frombuffer(f.read(8), dtype="<i4")
        except OSError as e:
            raise TrainError(f"{p}: cannot read ({e.strerror})") from None
        magic, version = (int(head[0]), int(head[1])) if head.size == 2 else (None, None)
        kinds.setdefault((magic, version), p)
    if len(kinds) > 1:
        (k1, p1), (k2, p2) = list(kinds.items())[:2]
        raise TrainError(f"the shards are of mixed formats: {p1} is {_kind(*k1)}, {p2} is {_kind(*k2)}")
    return paths


def _kind(magic, version) -> str:
    if magic is None:
        return "shorter than a header"
    if magic == formats.TOKENS_MAGIC:
        return f"a token file of version {version}"
    return formats.KNOWN_MAGICS.get(magic, f"not an llm.c file (magic {magic})")


@dataclass(frozen=True)
class Position:
    """Where a global batch starts: shard index, its file, and the token offset in it."""
    shard: int
    path: str
    offset: int

    def as_dict(self) -> dict:
        return {"shard": self.shard, "file": os.path.basename(self.path), "offset": self.offset}


class TrainData:
    """Global batches of `total_batch` tokens through a shard set; see the module docstring."""

    def __init__(self, shards: Shards, B: int, T: int, total_batch: int):
        self.shards, self.B, self.T, self.total_batch = shards, B, T, total_batch
        short = [s for s in shards.shards if s.tokens < total_batch + 1]
        if short:
            s = short[0]
            more = f" (and {len(short) - 1} more)" if len(short) > 1 else ""
            raise TrainError(f"{s.path}{more}: {s.tokens:,} tokens, shorter than one global batch of total batch + 1 "
                             f"= {total_batch + 1:,} tokens")
        self.per_shard = [(s.tokens - 1) // total_batch for s in shards.shards]
        self.per_epoch = sum(self.per_shard)

    def position(self, step: int) -> Position:
        """Where optimizer step `step`'s global batch starts."""
        g = step % self.per_epoch
        for i, n in enumerate(self.per_shard):
            if g < n:
                return Position(i, self.shards.shards[i].path, g * self.total_batch)
            g -= n
        raise AssertionError("unreachable")

    def load(self, step: int, window: int, x: np.ndarray, y: np.ndarray) -> None:
        """Window `window` (micro-step * world + rank) of step `step`'s global batch: B*T inputs
        into x, the B*T next tokens into y."""
        n = self.B * self.T
        if not 0 <= window < self.total_batch // n:
            raise ValueError(f"window {window} is outside a global batch of {self.total_batch // n}")
        pos = self.position(step)
        chunk = self.shards.read(pos.shard, pos.offset + window * n, n + 1)
        x[:] = chunk[:n]
        y[:] = chunk[1:]


class ValData:
    """Consecutive windows of B*T + 1 tokens through a shard set."""

    def __init__(self, shards: Shards, B: int, T: int):
        self.shards, self.B, self.T = shards, B, T
        n = B * T
        self.per_shard = [(s.tokens - 1) // n for s in shards.shards]
        self.windows = sum(self.per_shard)
        if self.windows == 0:
            raise TrainError(f"{shards.pattern}: {shards.tokens:,} tokens, no shard holds one batch of B*T+1 = "
                             f"{n + 1:,} tokens")

    def load(self, i: int, x: np.ndarray, y: np.ndarray) -> None:
        n = self.B * self.T
        i %= self.windows
        for shard, count in enumerate(self.per_shard):
            if i < count:
                chunk = self.shards.read(shard, i * n, n + 1)
                x[:] = chunk[:n]
                y[:] = chunk[1:]
                return
            i -= count


def window(micro: int, rank: int, world: int) -> int:
    """The window of a global batch that rank `rank` trains on at micro-step `micro`: the ranks
    take consecutive windows, then the micro-steps."""
    return micro * world + rank
