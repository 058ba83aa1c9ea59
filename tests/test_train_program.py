"""The trainer's program (train/model.py) run call by call through the family references
(train/backends.py's ReferenceBackend) equals the NumPy GPT-2: the wiring the GPU trainer uses is right."""

import numpy as np
import pytest

from references.adamw import adamw
from train.gpt2_numpy import gpt2_backward, gpt2_forward
from train.config import preset
from train.model import ATTENTION, Program
from train.backends import ReferenceBackend
from train.params import fresh_init


def run_step(config, B, T, seed=0):
    rng = np.random.default_rng(seed)
    params = fresh_init(config, seed)
    tokens = rng.integers(0, config.vocab_size, size=(B, T))
    targets = rng.integers(0, config.vocab_size, size=(B, T))
    program = Program(config, B, T)
    backend = ReferenceBackend(program)
    backend.host["params"][:] = params
    backend.host["tokens"][:] = tokens.ravel()
    backend.host["targets"][:] = targets.ravel()
    return program, backend, params, tokens, targets


@pytest.mark.parametrize("B, T", [(2, 8), (1, 5)])
def test_forward_loss_and_gradients_match_the_numpy_gpt2(B, T):
    config = preset("micro")
    program, backend, params, tokens, targets = run_step(config, B, T)
    backend.run(program.forward + program.loss + program.backward)
    want = gpt2_forward(params, config, tokens, targets)
    np.testing.assert_allclose(backend.host["losses"], want["losses"].ravel(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(backend.host["grads"], gpt2_backward(params, config, want["acts"]), rtol=1e-10, atol=1e-12)


def test_the_update_is_clipped_adamw_on_the_flat_buffers():
    config = preset("micro")
    program, backend, params, tokens, targets = run_step(config, 2, 8)
    backend.host["optimizer_scalars"][:] = (1e-3, 0.9, 0.999, 1e-8, 0.0, 1)
    backend.run(program.forward + program.loss + program.backward)
    grads = backend.host["grads"].copy()
    backend.run(program.update)
    norm2 = float((grads ** 2).sum())
    assert backend.host["norm2"][0] == pytest.approx(norm2)
    want = adamw(params, grads, np.zeros_like(params), np.zeros_like(params), backend.host["optimizer_scalars"], np.array([norm2]), 1.0)
    np.testing.assert_allclose(backend.host["params"], want["params"], rtol=1e-12, atol=1e-15)
    assert not np.allclose(backend.host["params"], params)


def test_relu_attention_program_runs_and_differs():
    config = preset("micro")
    p1 = Program(config, 2, 8, "relu")
    assert {c.family for c in p1.calls} >= set(ATTENTION["relu"])
    backend = ReferenceBackend(p1)
    backend.host["params"][:] = fresh_init(config, 0)
    backend.host["tokens"][:] = 1
    backend.host["targets"][:] = 2
    backend.run(p1.forward + p1.loss + p1.backward)
    assert np.isfinite(backend.host["losses"]).all() and np.abs(backend.host["grads"]).sum() > 0


def test_the_trainer_calls_each_family_at_the_shapes_promote_checks():
    sizes = Program(preset("d12"), 4, 1024).family_sizes()
    assert {"B": 4, "T": 1024, "C": 768, "OC": 50304} in sizes["matmul_forward"]  # the lm head
    assert sizes["attention_forward"] == [{"B": 4, "T": 1024, "NH": 12, "HS": 64}]
    assert sizes["adamw"] == [{"N": 124_475_904}]
