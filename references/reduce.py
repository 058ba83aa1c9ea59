"""Sum of all elements of a vector (the course's reduction)."""

import numpy as np


def reduce(inp):
    return {"out": np.array([inp.sum()])}
