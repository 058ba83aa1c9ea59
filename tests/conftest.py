import functools
import math
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def project_with(root: Path, family: str, versions: bool = True) -> Path:
    """A project of one family at `root`: its folder (family.toml, its own headers and, with
    `versions`, its versions), kernels/common and references/, for a test to change a copy of.
    Returns the family's folder."""
    src, fam_dir = ROOT / "kernels" / family, root / "kernels" / family
    fam_dir.mkdir(parents=True)
    for f in src.iterdir():
        if f.name == "family.toml" or f.suffix == ".cuh" or (versions and f.suffix == ".cu"):
            shutil.copy(f, fam_dir)
    shutil.copytree(ROOT / "kernels" / "common", root / "kernels" / "common")
    shutil.copytree(ROOT / "references", root / "references")
    return fam_dir


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


# Cases this large take seconds each on the CPU: they are `slow`, left out of the default run and
# run by `pytest -m slow` (CI runs both). Read from the sizes in a test's id (B=1,T=7,C=1600 or
# B1-T7-C1600): on the emulator, the product of all sizes but V (attention's, with T and HS, once
# more T: its work grows with T squared; from B*NH*T*T*HS = 500k, about a second each); anywhere,
# the embedding table C*V.
SLOW_ELEMS, SLOW_ATTENTION, SLOW_TABLE = 200_000, 500_000, 10_000_000
SIZE_IN_ID = re.compile(r"\b([A-Z][A-Za-z]*)=?(\d+)\b")


def slow_case(nodeid: str, emulated: bool) -> bool:
    sizes = {k: int(v) for k, v in SIZE_IN_ID.findall(nodeid.partition("[")[2])}
    if not sizes:
        return False
    work = math.prod(v for k, v in sizes.items() if k != "V")
    if "T" in sizes and "HS" in sizes:  # attention: every query against every key before it
        return emulated and work * sizes["T"] >= SLOW_ATTENTION
    return (emulated and work >= SLOW_ELEMS) or sizes.get("C", 0) * sizes.get("V", 0) >= SLOW_TABLE


def pytest_collection_modifyitems(config, items):
    for item in items:
        if slow_case(item.nodeid, emulated="emulator" in item.name):
            item.add_marker(pytest.mark.slow)
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


# -- processes a test starts: each with a deadline, killed with everything it started --------------------
TAG = "WORKBENCH_TEST_TAG"


def tagged_pids(tag: str) -> list[int]:
    """The processes whose environment carries TAG=tag (mpirun, its daemons and every rank)."""
    found, needle = [], f"{TAG}={tag}".encode()
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(pid))
            except OSError:
                continue
    return found


def kill_tagged(tag: str) -> None:
    for pid in tagged_pids(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Bounded:
    """A child process (and all it starts) with a tag in its environment, so that whatever it
    spawned can be found and killed: a hang becomes a failure with the output so far."""

    def __init__(self, cmd, env=None, **kw):
        self.tag = uuid.uuid4().hex
        env = {**(os.environ if env is None else env), TAG: self.tag}
        self.proc = subprocess.Popen([str(c) for c in cmd], env=env, start_new_session=True, text=True, **kw)

    def wait(self, timeout: float) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate(timeout=30)
            raise AssertionError(f"timed out after {timeout:g} s (killed): {self.proc.args}\n"
                                 f"--- stdout (end) ---\n{(out or '')[-3000:]}\n--- stderr (end) ---\n{(err or '')[-3000:]}")
        finally:
            kill_tagged(self.tag)  # nothing it started outlives it
        return self.proc.returncode, out or "", err or ""

    def kill(self) -> None:
        kill_tagged(self.tag)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass


def bounded(cmd, timeout: float, env=None, **kw) -> subprocess.CompletedProcess:
    """subprocess.run with a deadline that kills the whole tree on expiry (AssertionError with the
    output), and the time it took as .seconds."""
    t0 = time.monotonic()
    p = Bounded(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    code, out, err = p.wait(timeout)
    result = subprocess.CompletedProcess(p.proc.args, code, out, err)
    result.seconds = time.monotonic() - t0
    return result
