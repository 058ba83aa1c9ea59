"""GPT-2 model sizes: the four classic depths, and tiny ones for tests."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .errors import TrainError

GPT2_VOCAB = 50257
EOT = 50256  # <|endoftext|>
# Rounding the vocabulary up to a multiple of 128 makes the classifier matmul's N dimension tile
# evenly (50257 -> 50304); the padding rows of wte stay zero and the loss never sees their logits.
VOCAB_ALIGN = 128


def pad_vocab(vocab_size: int, align: int = VOCAB_ALIGN) -> int:
    return -(-vocab_size // align) * align


@dataclass(frozen=True)
class GPT2Config:
    max_seq_len: int
    vocab_size: int
    num_layers: int
    num_heads: int
    channels: int
    # 0 means "vocab_size rounded up to 128"; give it to make a small test vocabulary pad less.
    padded_vocab_size: int = 0

    def __post_init__(self):
        if not self.padded_vocab_size:
            object.__setattr__(self, "padded_vocab_size", pad_vocab(self.vocab_size))
        for name in ("max_seq_len", "vocab_size", "num_layers", "num_heads", "channels"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise TrainError(f"GPT2Config: {name} must be a positive integer, got {value!r}")
        if self.padded_vocab_size < self.vocab_size:
            raise TrainError(f"GPT2Config: padded_vocab_size {self.padded_vocab_size} is smaller than "
                             f"vocab_size {self.vocab_size}")
        if self.channels % self.num_heads:
            raise TrainError(f"GPT2Config: channels {self.channels} is not a multiple of num_heads {self.num_heads}")

    @property
    def head_size(self) -> int:
        return self.channels // self.num_heads

    def replace(self, **changes) -> GPT2Config:
        if "vocab_size" in changes and "padded_vocab_size" not in changes:
            changes["padded_vocab_size"] = 0
        return dataclasses.replace(self, **changes)

    @property
    def num_parameters(self) -> int:
        return sum(math.prod(shape) for shape in param_shapes(self).values())

    def describe(self) -> str:
        return (f"L={self.num_layers} NH={self.num_heads} C={self.channels} maxT={self.max_seq_len} "
                f"V={self.vocab_size} Vp={self.padded_vocab_size}")


# Checkpoint order; weights in PyTorch's (out, in) layout.
PARAM_NAMES = ("wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb")


def param_shapes(config: GPT2Config) -> dict[str, tuple[int, ...]]:
    Vp, C, L, maxT = config.padded_vocab_size, config.channels, config.num_layers, config.max_seq_len
    return {
        "wte": (Vp, C), "wpe": (maxT, C),
        "ln1w": (L, C), "ln1b": (L, C),
        "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C),
        "ln2w": (L, C), "ln2b": (L, C),
        "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
        "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
        "lnfw": (C,), "lnfb": (C,),
    }


PRESETS: dict[str, GPT2Config] = {
    "d12": GPT2Config(1024, GPT2_VOCAB, 12, 12, 768),    # GPT-2 124M
    "d24": GPT2Config(1024, GPT2_VOCAB, 24, 16, 1024),   # GPT-2 350M
    "d36": GPT2Config(1024, GPT2_VOCAB, 36, 20, 1280),   # GPT-2 774M
    "d48": GPT2Config(1024, GPT2_VOCAB, 48, 25, 1600),   # GPT-2 1558M
    # For tests: the real vocabulary (so real token files and the tokenizer work) on a toy body.
    "tiny": GPT2Config(64, GPT2_VOCAB, 2, 2, 32),
    # For finite differences: everything small, vocabulary included; Vp > V keeps padding in play.
    "micro": GPT2Config(8, 11, 2, 2, 8, padded_vocab_size=16),
}


def preset(name: str) -> GPT2Config:
    try:
        return PRESETS[name]
    except KeyError:
        raise TrainError(f"unknown model preset {name!r} (presets: {', '.join(PRESETS)})") from None
