"""The NumPy references against PyTorch on the CPU (float64), at odd sizes."""

import numpy as np
import pytest

from references.layernorm_forward import layernorm_forward

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 37), (1, 7, 1600)])
def test_layernorm_forward_matches_torch(shape):
    rng = np.random.default_rng(1)
    x = rng.normal(size=shape)
    w, b = rng.normal(1, 0.1, size=shape[-1]), rng.normal(0, 0.1, size=shape[-1])
    ref = layernorm_forward(x, w, b)
    t = F.layer_norm(torch.from_numpy(x), (shape[-1],), torch.from_numpy(w), torch.from_numpy(b), 1e-5)
    np.testing.assert_allclose(ref["out"], t.numpy(), atol=1e-12, rtol=1e-10)
    var = x.var(axis=-1)
    np.testing.assert_allclose(ref["rstd"], 1 / np.sqrt(var + 1e-5), rtol=1e-12)
