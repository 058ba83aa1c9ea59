"""The GPU's power draw, SM clock and the reasons its clock is held down, read through NVML
(libnvidia-ml.so.1, which the NVIDIA driver installs beside libcuda), for a run to say whether
the power limit set its clock.

Why it matters: a step of compute-bound kernels can draw the board's whole power limit (the
H100's bf16 GPT-2 step at B=32 does: results/notes/trainer_step.md, session 24), and the driver
then lowers the SM clock until the draw fits. There a kernel that is faster alone, doing the same
arithmetic for the same energy, buys the step less than its time alone says, while memory-bound
kernels are not slowed. `workbench train` starts a `PowerMeter` sampling on a thread of its own
(`start`), takes the mean of each step's samples (`take`), and its summary gives the medians over
the timed steps, the joules a step and how often the power cap was the reason (`summarize`).

The power is NVML's reading of the moment (field NVML_FI_DEV_POWER_INSTANT).
nvmlDeviceGetPowerUsage is not: on Ampere and newer it is a trailing average over about a second,
so over a run's first timed second it mixes in the GPU idling before the steps, while the host
compiled and captured (results/h100-session26-2026-12-06: the same B=16 step read 664 W in one
run and 586 W in the next, at the same clock). Only where a driver lacks the field does the meter
fall back to it, and the summary says so. One reading a step would always
fall at the same point of the step, and a step's draw swings (570-760 W at B=16 in nvidia-smi's
instant samples, call 3 of that session): so the meter samples every few milliseconds, and each
step gets the mean of the samples taken while it ran.

Where NVML cannot be loaded or does not know the device, the meter reads nothing (`why` says
why) and the run goes on without the figures."""

from __future__ import annotations

import ctypes
import statistics
import threading
from dataclasses import dataclass

NVML_LIB = "libnvidia-ml.so.1"
NVML_CLOCK_SM = 1
NVML_FI_DEV_POWER_INSTANT = 186  # nvml.h's field id: the board's draw now, in mW
# nvmlClocksEventReasons (formerly ClocksThrottleReasons) bits
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
REASONS = {SW_POWER_CAP: "power cap", HW_SLOWDOWN: "hardware slowdown", SW_THERMAL: "thermal (driver)",
           HW_THERMAL: "thermal (hardware)", HW_POWER_BRAKE: "power brake"}


class _Value(ctypes.Union):  # nvml.h's nvmlValue_t
    _fields_ = [("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort)]


class FieldValue(ctypes.Structure):  # nvml.h's nvmlFieldValue_t, filled by nvmlDeviceGetFieldValues
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", _Value)]


# nvmlValueType_t: which member of the union holds the value
_MEMBER_OF_TYPE = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_number(fv: FieldValue) -> float | None:
    """The value NVML put in `fv`, read through the union member its valueType names; None where
    the field failed or the type is unknown."""
    member = _MEMBER_OF_TYPE.get(fv.valueType)
    return None if fv.nvmlReturn != 0 or member is None else getattr(fv.value, member)


@dataclass(frozen=True)
class Reading:
    watts: float
    sm_mhz: int
    reasons: int  # the event-reason bits active when read (of a mean: active in at least half the samples)
    instant: bool = True  # False: NVML's trailing ~1 s average (a driver without the instant field)
    samples: int = 1  # how many readings this one is the mean of


def mean_reading(readings: list[Reading]) -> Reading:
    """One Reading for several: the mean power and clock, the reasons that held the clock in at
    least half of them."""
    n = len(readings)
    reasons = sum(bit for bit in REASONS if 2 * sum(1 for r in readings if r.reasons & bit) >= n)
    return Reading(sum(r.watts for r in readings) / n, round(sum(r.sm_mhz for r in readings) / n), reasons,
                   all(r.instant for r in readings), sum(r.samples for r in readings))


class PowerMeter:
    """NVML's view of one GPU, found by its PCI bus id as CUDA gives it (e.g. 0000:00:06.0).
    `read()` is a Reading, or None when the meter is off (`why`). After `start()` a thread reads
    every `every_s` seconds, and `take()` gives the mean of the readings since the last take."""

    EVERY_S = 0.005  # ~6 samples in a bf16 B=16 step of the H100; one read costs 35-45 us

    def __init__(self, pci_bus_id: str, lib: str = NVML_LIB):
        self.why: str | None = None
        self.limit_w: float | None = None
        self.max_mhz: int | None = None
        self._nvml = self._handle = self._thread = None
        self._pending: list[Reading] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.instant = False  # whether the power read is NVML's instant field (else its 1 s average)
        try:
            self._open(pci_bus_id, lib)
        except Exception as e:  # noqa: BLE001: a meter that cannot read must never stop a run
            self.why = f"NVML failed: {e}"
            self.close()

    def _open(self, pci_bus_id: str, lib: str) -> None:
        try:
            nvml = ctypes.CDLL(lib)
        except OSError as e:
            self.why = f"NVML could not be loaded ({e})"
            return
        if nvml.nvmlInit_v2() != 0:
            self.why = "NVML did not initialise"
            return
        self._nvml = nvml
        handle = ctypes.c_void_p()
        domain, _, rest = pci_bus_id.partition(":")
        for bus_id in (pci_bus_id, f"{int(domain, 16):08x}:{rest}" if rest else pci_bus_id):
            if nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), ctypes.byref(handle)) == 0:
                self._handle = handle
                break
        else:
            self.why = f"NVML knows no GPU at PCI bus id {pci_bus_id}"
            self.close()
            return
        # the event reasons' current name, or the older one (the same bits) on an older driver
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        mw, mhz = ctypes.c_uint(), ctypes.c_uint()
        if nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle, ctypes.byref(mw)) == 0:
            self.limit_w = mw.value / 1000
        if nvml.nvmlDeviceGetMaxClockInfo(self._handle, NVML_CLOCK_SM, ctypes.byref(mhz)) == 0:
            self.max_mhz = mhz.value
        try:
            self.instant = self._instant_mw() is not None
        except AttributeError:  # a driver older than nvmlDeviceGetFieldValues: the 1 s average only
            self.instant = False

    def _instant_mw(self) -> float | None:
        fv = FieldValue(fieldId=NVML_FI_DEV_POWER_INSTANT)
        if self._nvml.nvmlDeviceGetFieldValues(self._handle, 1, ctypes.byref(fv)) != 0:
            return None
        return field_number(fv)

    def read(self) -> Reading | None:
        if self._handle is None:
            return None
        nvml, h = self._nvml, self._handle
        mw, mhz, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        try:
            now_mw = self._instant_mw() if self.instant else None
            if ((now_mw is None and nvml.nvmlDeviceGetPowerUsage(h, ctypes.byref(mw)))
                    or nvml.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM, ctypes.byref(mhz))
                    or self._reasons(h, ctypes.byref(reasons))):
                return None
        except Exception:  # noqa: BLE001
            return None
        return Reading((mw.value if now_mw is None else now_mw) / 1000, mhz.value, reasons.value, now_mw is not None)

    def start(self, every_s: float = EVERY_S) -> None:
        """Read every `every_s` seconds on a daemon thread until close() (nothing when off)."""
        if self._handle is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._sample, args=(every_s,), name="power meter", daemon=True)
        self._thread.start()

    def _sample(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            r = self.read()  # ctypes lets go of the GIL during the NVML calls
            if r is not None:
                with self._lock:
                    self._pending.append(r)

    def skip(self) -> None:
        """Forget the readings since the last take (the GPU did something else meanwhile)."""
        with self._lock:
            self._pending = []

    def take(self) -> Reading | None:
        """The mean of the readings since the last take or skip; one read now where there are none
        (the meter not started, or a step shorter than its period)."""
        with self._lock:
            got, self._pending = self._pending, []
        return mean_reading(got) if got else self.read()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        nvml, self._nvml, self._handle = self._nvml, None, None
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


def summarize(readings: list[Reading], limit_w: float | None = None, max_mhz: int | None = None,
              step_ms: list[float] | None = None) -> dict:
    """The medians of `readings` (one a step: each the mean of that step's samples) and the share
    of them (0-1) held down by each reason seen; with each step's time (`step_ms`, in the same
    order) the median energy a step. {} for none."""
    if not readings:
        return {}
    shares = {name: sum(1 for r in readings if r.reasons & bit) / len(readings)
              for bit, name in REASONS.items() if any(r.reasons & bit for r in readings)}
    out = {"readings": len(readings), "samples": sum(r.samples for r in readings),
           "power_w": statistics.median(r.watts for r in readings),
           "power_read": "instant" if all(r.instant for r in readings) else "1 s average",
           "power_limit_w": limit_w, "sm_mhz": statistics.median(r.sm_mhz for r in readings),
           "sm_max_mhz": max_mhz, "clock_held_by": shares}
    if step_ms is not None:
        out["joules_per_step"] = statistics.median(r.watts * ms / 1e3 for r, ms in zip(readings, step_ms, strict=True))
    return out


def describe(s: dict) -> str:
    """One line for a summarize() result."""
    limit = f" of {s['power_limit_w']:.0f} W" if s.get("power_limit_w") else ""
    top = f" of {s['sm_max_mhz']}" if s.get("sm_max_mhz") else ""
    held = ", ".join(f"{name} {100 * share:.0f}%" for name, share in s["clock_held_by"].items())
    if s.get("power_read") == "1 s average":
        limit += " (NVML's trailing 1 s average: this driver has no instant reading)"
    energy = f" ({s['joules_per_step']:.1f} J a step)" if s.get("joules_per_step") is not None else ""
    n, samples = s["readings"], s.get("samples", s["readings"])
    over = f"medians over {n} steps, {samples / n:.0f} readings a step" if samples > n else f"medians of {n} readings"
    return (f"{s['power_w']:.0f} W{limit}{energy}, SM clock {s['sm_mhz']:.0f}{top} MHz ({over}); "
            + (f"clock held down by: {held}" if held else "clock not held down"))
