"""Tensor maps: the 128-byte descriptors Hopper's TMA copies a tile of a matrix with.

A kernel argument written `tma:BUFFER, ROWS, COLS, BOX_ROWS, BOX_COLS` in a version's header
(family.py's tensor_map_arg parses it) becomes, when its plan is built, the tensor map of BUFFER viewed
as a row-major ROWS x COLS matrix of its element type, copied a BOX_ROWS x BOX_COLS box at a time
with the 128-byte swizzle (the layout kernels/common/wgmma.cuh describes) and zeros past the
edges. The map holds BUFFER's address, so a plan's maps are made once, with the plan, and copied
to device memory (on_device); the kernel takes a pointer to it (`const TmaMap*`,
common/gemm_wgmma.cuh). A map passed by value as a __grid_constant__ parameter is
the other way CUDA allows, but PyCUDA's packed argument buffer did not reach such a kernel intact
(its integers after two 128-byte maps read as 0 on an H200, session 15), so the maps go through
memory.

The map is encoded by the driver's cuTensorMapEncodeTiled (libcuda, through ctypes: PyCUDA does
not wrap it), which needs no context and checks the shape itself.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

from .errors import ContractError

# CUtensorMapDataType, and the element types a map may describe.
DATA_TYPES = {"f32": 7, "bf16": 9}  # CU_TENSOR_MAP_DATA_TYPE_FLOAT32, _BFLOAT16
ITEMSIZE = {"f32": 4, "bf16": 2}
SWIZZLE_128B = 3       # CU_TENSOR_MAP_SWIZZLE_128B
INTERLEAVE_NONE = 0
L2_PROMOTION_256B = 3  # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
OOB_FILL_ZEROS = 0     # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: zeros past the edges
MAP_BYTES = 128


@lru_cache(maxsize=1)
def _encode_tiled():
    lib = ctypes.CDLL("libcuda.so.1")
    fn = lib.cuTensorMapEncodeTiled
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p, ctypes.POINTER(u64), ctypes.POINTER(u64),
                   ctypes.POINTER(u32), ctypes.POINTER(u32), ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def check_shape(rows: int, cols: int, box_rows: int, box_cols: int, dtype: str) -> None:
    """The limits the TMA puts on a 2-D map with the 128-byte swizzle, as one-line errors."""
    if dtype not in DATA_TYPES:
        raise ContractError(f"a tensor map describes bf16 or f32 elements, not {dtype}")
    size = ITEMSIZE[dtype]
    if rows < 1 or cols < 1:
        raise ContractError(f"a tensor map of a {rows} x {cols} matrix: both must be at least 1")
    if cols * size % 16:
        raise ContractError(f"a tensor map's rows must be a multiple of 16 bytes apart: {cols} {dtype} elements "
                            f"are {cols * size}")
    if not (1 <= box_rows <= 256 and 1 <= box_cols <= 256):
        raise ContractError(f"a tensor map's box is at most 256 x 256, not {box_rows} x {box_cols}")
    if box_cols * size > 128 or box_cols * size % 16:
        raise ContractError(f"with the 128-byte swizzle a box row is a multiple of 16 bytes, at most 128: "
                            f"{box_cols} {dtype} elements are {box_cols * size}")


def encode(ptr: int, rows: int, cols: int, box_rows: int, box_cols: int, dtype: str) -> bytes:
    """The tensor map of the row-major rows x cols matrix at device address ptr (16-byte aligned)."""
    check_shape(rows, cols, box_rows, box_cols, dtype)
    if ptr % 16:
        raise ContractError(f"a tensor map's matrix starts on a 16-byte boundary; {ptr:#x} does not")
    size = ITEMSIZE[dtype]
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    out = (ctypes.c_uint8 * (MAP_BYTES + 64))()
    at = (ctypes.addressof(out) + 63) & ~63  # the map itself is 64-byte aligned
    dims, strides = (u64 * 2)(cols, rows), (u64 * 1)(cols * size)
    box, step = (u32 * 2)(box_cols, box_rows), (u32 * 2)(1, 1)
    status = _encode_tiled()(at, DATA_TYPES[dtype], 2, ptr, dims, strides, box, step, INTERLEAVE_NONE,
                             SWIZZLE_128B, L2_PROMOTION_256B, OOB_FILL_ZEROS)
    if status != 0:
        raise ContractError(f"cuTensorMapEncodeTiled refused a {rows} x {cols} {dtype} map with a "
                            f"{box_rows} x {box_cols} box (CUresult {status})")
    return ctypes.string_at(at, MAP_BYTES)


_ON_DEVICE: dict[bytes, object] = {}


def on_device(blob: bytes) -> int:
    """The address of a device copy of the map `blob` (one 256-byte-aligned allocation per distinct
    map, kept for the process: a plan's kernels read it at every launch)."""
    if blob not in _ON_DEVICE:
        import numpy as np
        import pycuda.driver as drv
        _ON_DEVICE[blob] = drv.to_device(np.frombuffer(blob, dtype=np.uint8))
    return int(_ON_DEVICE[blob])
