"""Learning-rate schedules: the learning rate of optimizer step `step` (0-based) of `total`.

Every schedule starts with a linear warm-up over `warmup` steps, lr * (step + 1) / warmup, then:

* constant: lr to the end (the default; with no warm-up, the C fp32 trainer's behaviour);
* cosine: from lr at the first step after the warm-up down to lr * final_frac at the last step,
  along half a cosine;
* linear: the same, along a straight line;
* wsd (warm-up, stable, decay): lr until the last `decay_frac` of the steps, then a straight
  line down to lr * final_frac at the last step.

Pure functions of their arguments: a resumed run gets the same rate at every step as the run it
continues, and the tests check them on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

SCHEDULES = ("constant", "cosine", "linear", "wsd")


@dataclass(frozen=True)
class Schedule:
    kind: str
    lr: float
    total: int
    warmup: int = 0
    final_frac: float = 0.0
    decay_frac: float = 0.2

    def __post_init__(self):
        if self.kind not in SCHEDULES:
            raise ValueError(f"unknown learning-rate schedule {self.kind!r} (schedules: {', '.join(SCHEDULES)})")

    @property
    def decay_start(self) -> int:
        """The step at which the rate starts to fall (it still equals lr there)."""
        if self.kind == "wsd":
            return max(self.warmup, self.total - max(1, round(self.decay_frac * self.total)))
        return self.warmup

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        if self.kind == "constant":
            return self.lr
        start, last = self.decay_start, self.total - 1
        progress = min(1.0, max(0.0, (step - start) / (last - start))) if last > start else 1.0
        low = self.lr * self.final_frac
        if self.kind == "cosine":
            return low + (self.lr - low) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.lr - (self.lr - low) * progress

    def state(self) -> dict:
        """What a checkpoint records, and `Schedule(**state)` rebuilds."""
        return asdict(self)
