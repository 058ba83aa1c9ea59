"""Device buffers filled with random values, for the operands of a timed launch that has no data
of its own (matmul_peak's GEMM, gemm_lt's tuning candidates)."""

from __future__ import annotations

import numpy as np


def random_fill(ptr: int, nbytes: int, itemsize: int, seed: int = 0x5EED) -> None:
    """Random values of the element type (itemsize 2: bf16, 4: f32; normal(0, 0.5)) over nbytes
    at ptr: a 4 MiB block uploaded once, then copied over the rest, doubling. Timed operands are
    never constants: constant operands toggle fewer bits, draw less power and run faster."""
    import pycuda.driver as drv
    rng = np.random.default_rng(seed)
    block = min(nbytes, 4 << 20)
    vals = (rng.standard_normal(block // itemsize + 1) * 0.5).astype(np.float32)
    host = (vals.view(np.uint32) >> 16).astype(np.uint16) if itemsize == 2 else vals
    drv.memcpy_htod(ptr, host.view(np.uint8)[:block])
    done = block
    while done < nbytes:
        step = min(done, nbytes - done)
        drv.memcpy_dtod(ptr + done, ptr, step)
        done += step
