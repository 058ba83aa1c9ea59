"""The 16 parameter tensors of GPT-2, in checkpoint order, as views into one flat fp32 buffer.

One buffer (not 16 arrays) because the optimizer, the gradient norm and the checkpoint all treat
the parameters as a single vector: the GPU trainer allocates params, grads, m and v once each and
hands kernels pointers at `offset` into them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .config import PARAM_NAMES, GPT2Config, param_shapes  # noqa: F401  (re-exported)
from .errors import TrainError

# The projections that write into the residual stream: GPT-2 scales their init by 1/sqrt(2L) so
# the stream's variance does not grow with depth.
RESIDUAL_PROJECTIONS = ("attprojw", "fcprojw")
LAYERNORM_WEIGHTS = ("ln1w", "ln2w", "lnfw")
BIASES = ("ln1b", "qkvb", "attprojb", "ln2b", "fcb", "fcprojb", "lnfb")
# The 2-D weight matrices: the only tensors weight decay applies to (GPT-2 / llm.c practice; never
# the biases, layernorm gains or offsets).
MATRICES = ("wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw")
# The tensors with one slice per layer (leading dimension L): a layer's gradients are those slices.
PER_LAYER = ("ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb")


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    offset: int  # in elements, into the flat buffer
    size: int    # elements

    @property
    def end(self) -> int:
        return self.offset + self.size


class ParamLayout:
    """Where each tensor lives in the flat buffer. `layout[name]` gives a Tensor (shape, offset,
    size); `views(flat)` gives name -> reshaped view sharing the buffer's memory."""

    def __init__(self, config: GPT2Config):
        self.config = config
        self.tensors: dict[str, Tensor] = {}
        offset = 0
        for name, shape in param_shapes(config).items():
            size = math.prod(shape)
            self.tensors[name] = Tensor(name, shape, offset, size)
            offset += size
        self.total = offset

    def __getitem__(self, name: str) -> Tensor:
        return self.tensors[name]

    def __iter__(self):
        return iter(self.tensors.values())

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        if flat.ndim != 1 or flat.size != self.total:
            raise TrainError(f"parameter buffer has shape {flat.shape}, expected ({self.total},) for "
                             f"{self.config.describe()}")
        return {t.name: flat[t.offset:t.end].reshape(t.shape) for t in self}

    def flatten(self, tensors: dict[str, np.ndarray], dtype=np.float32) -> np.ndarray:
        """The inverse of views: one flat buffer from name -> array (shapes checked)."""
        flat = np.empty(self.total, dtype=dtype)
        for t in self:
            if t.name not in tensors:
                raise TrainError(f"missing parameter tensor {t.name!r}")
            a = np.asarray(tensors[t.name])
            if a.shape != t.shape:
                raise TrainError(f"parameter {t.name}: expected shape {t.shape}, found {a.shape}")
            flat[t.offset:t.end] = a.reshape(-1)
        return flat


def layout(config: GPT2Config) -> ParamLayout:
    return ParamLayout(config)


def num_parameters(config: GPT2Config) -> int:
    return ParamLayout(config).total


def fresh_init(config: GPT2Config, seed: int = 0) -> np.ndarray:
    """GPT-2's initialisation as one flat float32 buffer: weights N(0, 0.02), the residual
    projections N(0, 0.02/sqrt(2L)), layernorm weights 1, biases 0, wte's padding rows 0."""
    lay = ParamLayout(config)
    flat = np.zeros(lay.total, dtype=np.float32)
    p = lay.views(flat)
    rng = np.random.default_rng(seed)
    residual_std = 0.02 / math.sqrt(2 * config.num_layers)
    for name in PARAM_NAMES:
        if name in BIASES:
            continue
        if name in LAYERNORM_WEIGHTS:
            p[name][...] = 1.0
            continue
        std = residual_std if name in RESIDUAL_PROJECTIONS else 0.02
        if name == "wte":
            V = config.vocab_size
            p[name][:V] = rng.standard_normal((V, config.channels), dtype=np.float32) * np.float32(std)
        else:
            p[name][...] = rng.standard_normal(p[name].shape, dtype=np.float32) * np.float32(std)
    return flat
