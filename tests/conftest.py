import functools
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@functools.lru_cache(maxsize=None)
def gpu_available() -> str | None:
    """None when a CUDA GPU is usable through PyCUDA, else why not."""
    try:
        import pycuda.driver as drv
    except ImportError:
        return "PyCUDA is not installed"
    try:
        drv.init()
        if drv.Device.count() == 0:
            return "no CUDA device"
    except Exception as e:  # no driver
        return f"CUDA unavailable: {e}"
    return None


def pytest_collection_modifyitems(config, items):
    why = gpu_available()
    if why is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def nvcc():
    path = shutil.which("nvcc")
    if path is None:
        pytest.skip("nvcc is not on PATH")
    return path
