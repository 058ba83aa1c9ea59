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


def emulator_cases(project, versions, extra=()):
    """pytest params (family, number, sizes): each (family, number) in `versions` at its family's
    test sizes and the `extra` ones (a list, or a dict of lists by family name), where its
    preconditions hold; ids say which."""
    out = []
    for name, number in versions:
        v = project.family(name).version(number)
        more = extra.get(name, []) if isinstance(extra, dict) else extra
        for sizes in [*v.family.test_sizes, *more]:
            if not v.unmet(sizes):
                out.append(pytest.param(name, number, sizes, id=f"{name}-{number}-{v.family.format_sizes(sizes)}"))
    return out
