"""What a bench session was asked for (`Options`, one object shared by the session and all its
parts, so a loop that changes an option for a while changes it for every part), and the
`Progress` callback the session reports through. bench.py re-exports both."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Callable

from .family import Family
from .isolate import DEFAULT_TIMEOUT


@dataclass
class Options:
    sizes: str | None = None            # "B=4,T=2048" over the family's defaults
    block_sizes: list[int] | None = None
    seed: int = 0
    seeds: int = 3
    test_sizes: bool = True             # also check at the family's (odd) test sizes
    timeout: float = DEFAULT_TIMEOUT
    budget: float = 0.3                 # seconds of timing per block size (front-runners)
    torch: bool = True
    flush: bool = True
    time: bool = True                   # False: check only
    screen: bool = True                 # time every block size briefly, the front-runners fully
    stage: bool = True                  # upload each family's cases once, shared by its versions (staging.py)
    # Version children started ahead of their jobs (children.py): a child's start (interpreter,
    # imports, CUDA context, ~1 s) takes longer than a typical version's check and timing (~0.5 s
    # on the H100), so two started ahead still kept the GPU waiting in a bench (50 s of 190).
    # `run` starts its one child at once.
    ahead: int = 3
    kept_baselines: bool = False        # reuse a day-old torch/copy row (baselines.py): `run`, not `bench`

    def sizes_for(self, family: Family) -> dict[str, int]:
        """The family's sizes: its defaults, with `sizes` over them."""
        return family.parse_sizes(self.sizes)

    def seed_list(self) -> list[int]:
        """The seeds every case is drawn at: `seeds` of them, from `seed` on (one at least)."""
        return [self.seed + i for i in range(max(1, self.seeds))]


Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """A Progress that says nothing (the session's default)."""


@dataclass
class RowJob:
    """What a rows job's child needs to check and time a row (providers.run_row), as it travels in
    the request: made by Session.request from the session's Options and the family, read back by
    the worker with from_request; no defaults are guessed on the way (a missing key is an error)."""
    time: bool
    flush: bool
    budget: float
    screen: bool
    bytes: int                      # the bytes a launch must move (a copy baseline: its own)
    flops: int | None
    ceiling_gbps: float

    def to_request(self) -> dict:
        return asdict(self)

    @classmethod
    def from_request(cls, req: dict, **override) -> "RowJob":
        return cls(**{f.name: req[f.name] for f in fields(cls)} | {k: v for k, v in override.items() if v is not None})
