"""GELU, tanh approximation (GPT-2's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

import numpy as np

GELU_SCALE = np.sqrt(2.0 / np.pi)
GELU_CUBIC = 0.044715


def gelu_forward(inp):
    u = GELU_SCALE * (inp + GELU_CUBIC * inp**3)
    return {"out": 0.5 * inp * (1.0 + np.tanh(u))}
