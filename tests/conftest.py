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


def pytest_configure(config):
    """With -n and no --dist of its own, the run's cases are shared out by `worksteal` rather than
    pytest-xdist's `load`, which hands each worker a chunk: the other worker, done, then waits
    for the last chunk's emulator builds and nvcc calls, seconds each (a minute or more of a run
    of four). `worksteal` (pytest-xdist 3.2) lets an idle worker take the other's queued cases."""
    if hasattr(config, "workerinput") or getattr(config.option, "dist", None) != "load":
        return
    args = [*config.invocation_params.args, *config.getini("addopts"), *os.environ.get("PYTEST_ADDOPTS", "").split()]
    if any(a in ("-d", "--dist") or a.startswith("--dist=") for a in args):
        return  # asked for
    try:
        from xdist.scheduler import WorkStealingScheduling  # noqa: F401
    except ImportError:
        return
    config.option.dist = "worksteal"


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


# Cases that repeat another in the default run are `slow` as well (CI still runs them all):
# * a version's emulator cases repeat a few kinds of run (the scheduler, when copies land, shuffled
#   block orders or not, the multiprocessor count) over seeds, block sizes and sizes: the first
#   case of each kind (in its header's order: the test sizes first) stays;
# * the sm_90a compile of a version that the default run builds and runs on the emulator, or that
#   another check builds for Hopper itself (HOPPER_BUILDS); every other version's compile stays;
# * a build for sm_80 where the same check builds for sm_90 (the sm_90a build of every version
#   being the default's, as above);
# * the cases after the first of a check that repeats itself over its parameters (REPEATED: a
#   version's bf16 twin after it, the other scheduler);
# * checks that take seconds by themselves where a cheaper one in the default run checks the same
#   thing (SLOW_CHECKS, each with the one that stays).
EMULATOR_CASE, COMPILE_CASE = "test_on_the_emulator", "test_every_version_compiles"
REPEATS = re.compile(r"(?:bs|seed)\d+$")  # which block size and seed: not a kind of run
VALUE = re.compile(r"^(order|sched_seed)\d+$")  # a shuffle's seed: any one is the kind
# A check -> the versions it builds with nvcc itself: for sm_90a (wgmma, ptxas) or sm_90 (spills).
HOPPER_BUILDS = {
    "tests/test_compile.py::test_the_wgmma_attention_is_hopper_code_and_a_trap_elsewhere":
        [f"attention_forward-{n}" for n in (12, 13, 14)],
    "tests/test_compile.py::test_attention_forward_15_is_one_warpgroup_with_three_blocks_an_sm":
        ["attention_forward-15"],
    "tests/test_compile.py::test_ptxas_keeps_the_wgmma_backward_asynchronous":
        [f"attention_backward-{n}" for n in (12, 13, 14, 15)],
    "tests/test_fused_classifier.py::test_version_6_does_not_spill": ["fused_classifier-6"],
    "tests/test_softmax_forward.py::test_version_10_does_not_spill": ["softmax_forward-10"],
}
REPEATED = {
    "tests/test_encoder_backward.py::test_positions_that_do_not_fit_give_the_same_bits",  # 5, then 6: 5 at bf16
    "tests/test_encoder_backward.py::test_the_same_bits_at_every_block_size_and_schedule",  # 5, 6
    "tests/test_layernorm_backward.py::test_the_bits_do_not_depend_on_which_block_finishes_last",  # 8, then 9
    "tests/test_emulator.py::test_the_emulated_block_votes",  # PRIORITY, then SHUFFLE
}
# A check -> the cheaper one in the default run that checks the same (while that one is there).
SLOW_CHECKS = {
    # at the default sizes, each seed; the other at the test sizes
    "tests/test_fused_gelu_matmul.py::test_dpre_bias_at_bf16_admits_the_sum_of_dpre_as_written_and_rejects_a_lost_row":
        "tests/test_fused_gelu_matmul.py::test_dpre_bias_atol_grows_as_the_walk_of_n_roundings",
    # versions 5 and 6; the other: the same skewed batch on versions 7-11
    "tests/test_encoder_backward.py::test_a_skewed_batch_on_the_emulator":
        "tests/test_encoder_backward.py::test_skewed_batches_on_the_emulator",
    # a fp32 twin of version 8's header; the other: version 8 itself (and the partition's bits)
    "tests/test_encoder_backward.py::test_the_header_at_fp32_bits_are_the_formulas":
        "tests/test_encoder_backward.py::test_the_one_pass_bits_are_the_formulas_at_every_block_size",
    # seeds 0-99 of the rounding model; the other: attention_backward's, at its seeds
    "tests/test_relu_attention_backward.py::test_the_tolerance_covers_the_rounding_model_with_room":
        "tests/test_attention_backward.py::test_the_tolerances_cover_the_rounding_model_with_room",
    # a PNG for each of 26 families; the other: plot_results on a family of its own
    "tests/test_plot.py::test_plot_results_writes_a_png_per_family_and_the_roofline":
        "tests/test_plot.py::test_failed_versions_a_run_file_and_a_bf16_family_plot",
}


def emulator_run_kind(nodeid: str) -> tuple[str, tuple[str, ...]]:
    """('layernorm_backward-12', ('LATE', 'SHUFFLE', 'order')) for
    test_on_the_emulator[layernorm_backward-12-B=4,T=33,C=768-bs128-seed2-LATE-SHUFFLE-order1]."""
    family, number, _sizes, *run = nodeid.partition("[")[2].rstrip("]").split("-")
    return f"{family}-{number}", tuple(VALUE.sub(r"\1", p) for p in run if not REPEATS.match(p))


def is_slow(item) -> bool:
    return item.get_closest_marker("slow") is not None


def mark_repeats_slow(items) -> None:
    """Marks `slow` the cases that repeat another in the default run (the list above)."""
    check = lambda item: item.nodeid.partition("[")[0]  # noqa: E731
    param = lambda item: item.nodeid.partition("[")[2].rstrip("]")  # noqa: E731
    default = [item for item in items if not is_slow(item)]
    checks, ids = {check(item) for item in default}, {item.nodeid for item in default}
    seen, emulated = set(), set()
    for item in default:
        if getattr(item, "originalname", None) == EMULATOR_CASE:
            version, kind = emulator_run_kind(item.nodeid)
            if (version, kind) in seen:
                item.add_marker(pytest.mark.slow)
            seen.add((version, kind))
            emulated.add(version)
        elif SLOW_CHECKS.get(check(item)) in checks:  # while the cheaper one is in the default run
            item.add_marker(pytest.mark.slow)
        elif check(item) in REPEATED:
            if check(item) in seen:
                item.add_marker(pytest.mark.slow)
            seen.add(check(item))
    built = {v for item in default if not is_slow(item) for v in HOPPER_BUILDS.get(check(item), [])}
    if shutil.which("g++"):  # without it the emulator's cases skip
        built |= emulated
    for item in default:
        if getattr(item, "originalname", None) == COMPILE_CASE and param(item).rsplit("-", 1)[0] in built:
            item.add_marker(pytest.mark.slow)
        elif "sm_80" in param(item) and {item.nodeid.replace("sm_80", a) for a in ("sm_90", "sm_90a")} & ids:
            item.add_marker(pytest.mark.slow)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if slow_case(item.nodeid, emulated="emulator" in item.name):
            item.add_marker(pytest.mark.slow)
    mark_repeats_slow(items)
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
