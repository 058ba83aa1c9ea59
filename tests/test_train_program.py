"""The trainer's program (train/model.py) run call by call through the family references
(train/ops.py's ReferenceOps) equals the NumPy GPT-2: the wiring the GPU trainer uses is right."""

import numpy as np
import pytest

from references.adamw import adamw
from references.gpt2 import gpt2_backward, gpt2_forward
from train.config import preset
from train.model import ATTENTION, Program
from train.ops import ReferenceOps
from train.params import fresh_init


def run_step(config, B, T, seed=0):
    rng = np.random.default_rng(seed)
    params = fresh_init(config, seed)
    tokens = rng.integers(0, config.vocab_size, size=(B, T))
    targets = rng.integers(0, config.vocab_size, size=(B, T))
    program = Program(config, B, T)
    ops = ReferenceOps(program)
    ops.host["params"][:] = params
    ops.host["tokens"][:] = tokens.ravel()
    ops.host["targets"][:] = targets.ravel()
    return program, ops, params, tokens, targets


@pytest.mark.parametrize("B, T", [(2, 8), (1, 5)])
def test_forward_loss_and_gradients_match_the_numpy_gpt2(B, T):
    config = preset("micro")
    program, ops, params, tokens, targets = run_step(config, B, T)
    ops.run(program.forward + program.loss + program.backward)
    want = gpt2_forward(params, config, tokens, targets)
    np.testing.assert_allclose(ops.host["losses"], want["losses"].ravel(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ops.host["grads"], gpt2_backward(params, config, want["acts"]), rtol=1e-10, atol=1e-12)


def test_the_update_is_clipped_adamw_on_the_flat_buffers():
    config = preset("micro")
    program, ops, params, tokens, targets = run_step(config, 2, 8)
    ops.host["hp"][:] = (1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
    ops.run(program.forward + program.loss + program.backward)
    grads = ops.host["grads"].copy()
    ops.run(program.update)
    norm2 = float((grads ** 2).sum())
    assert ops.host["norm2"][0] == pytest.approx(norm2)
    want = adamw(params, grads, np.zeros_like(params), np.zeros_like(params), ops.host["hp"], np.array([norm2]), 1.0)
    np.testing.assert_allclose(ops.host["params"], want["params"], rtol=1e-12, atol=1e-15)
    assert not np.allclose(ops.host["params"], params)


def test_relu_attention_program_runs_and_differs():
    config = preset("micro")
    p1 = Program(config, 2, 8, "relu")
    assert {c.family for c in p1.calls} >= set(ATTENTION["relu"])
    ops = ReferenceOps(p1)
    ops.host["params"][:] = fresh_init(config, 0)
    ops.host["tokens"][:] = 1
    ops.host["targets"][:] = 2
    ops.run(p1.forward + p1.loss + p1.backward)
    assert np.isfinite(ops.host["losses"]).all() and np.abs(ops.host["grads"]).sum() > 0


def test_the_trainer_calls_each_family_at_the_shapes_promote_checks():
    sizes = Program(preset("d12"), 4, 1024).family_sizes()
    assert {"B": 4, "T": 1024, "C": 768, "OC": 50304} in sizes["matmul_forward"]  # the lm head
    assert sizes["attention_forward"] == [{"B": 4, "T": 1024, "NH": 12, "HS": 64}]
    assert sizes["adamw"] == [{"N": 124_475_904}]
