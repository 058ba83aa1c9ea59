"""The squared global gradient norm: norm2 = sum of grads**2 (the clipping in adamw takes its root)."""

import numpy as np


def global_norm(grads):
    g = grads.reshape(-1)
    return {"norm2": np.array([np.dot(g, g)])}
