"""workbench/power.py: the GPU's power and SM clock a run reports (the medians, the share of
readings each reason held the clock down), the trainer's summary of them over its timed steps, and
a meter that cannot read staying out of the way. The readings from a real GPU: test_gpu_train.py."""

import ctypes
import io

from rich.console import Console

from train.trainer import StepRecord, timing
from train.ui import TrainUI
import time

from workbench.power import (HW_THERMAL, NVML_FI_DEV_POWER_INSTANT, SW_POWER_CAP, FieldValue, PowerMeter, Reading,
                             describe, field_number, mean_reading, summarize)


def test_summarize_gives_medians_and_the_share_each_reason_held_the_clock():
    rs = [Reading(690.0, 1635, SW_POWER_CAP), Reading(700.0, 1600, SW_POWER_CAP | HW_THERMAL),
          Reading(320.0, 1980, 0), Reading(695.0, 1650, SW_POWER_CAP)]
    s = summarize(rs, 700.0, 1980)
    assert s["readings"] == 4 and s["power_w"] == 692.5 and s["sm_mhz"] == 1642.5
    assert s["power_limit_w"] == 700.0 and s["sm_max_mhz"] == 1980
    assert s["clock_held_by"] == {"power cap": 0.75, "thermal (hardware)": 0.25}
    line = describe(s)
    assert "692 W of 700 W" in line and "1642" in line and "of 1980 MHz" in line and "power cap 75%" in line


def test_summarize_of_nothing_is_empty_and_a_free_clock_says_so():
    assert summarize([]) == {}
    s = summarize([Reading(300.0, 1980, 0)])
    assert s["clock_held_by"] == {} and describe(s).endswith("clock not held down")
    assert describe(s).startswith("300 W, SM clock 1980 MHz (medians of 1 readings)")  # no limit or maximum known


def test_a_meter_without_nvml_reads_nothing_and_says_why():
    m = PowerMeter("0000:00:06.0", lib="libno-such-nvml.so.1")
    assert m.read() is None and "could not be loaded" in m.why and m.limit_w is None
    m.close()
    m.close()  # twice is harmless


def test_a_steps_mean_averages_power_and_clock_and_keeps_reasons_that_held_half_the_samples():
    m = mean_reading([Reading(700.0, 1600, SW_POWER_CAP), Reading(650.0, 1700, SW_POWER_CAP | HW_THERMAL),
                      Reading(600.0, 1800, 0, samples=2)])
    assert (m.watts, m.sm_mhz, m.reasons, m.samples, m.instant) == (650.0, 1700, SW_POWER_CAP, 4, True)
    assert mean_reading([Reading(700.0, 1600, SW_POWER_CAP), Reading(600.0, 1800, 0)]).reasons == SW_POWER_CAP  # a tie
    assert not mean_reading([Reading(700.0, 1600, 0), Reading(600.0, 1800, 0, instant=False)]).instant


def test_the_summary_gives_joules_a_step_from_each_steps_own_power_and_time():
    rs = [Reading(700.0, 1600, 0, samples=6), Reading(600.0, 1700, 0, samples=6), Reading(650.0, 1650, 0, samples=6)]
    s = summarize(rs, 700.0, 1980, [50.0, 60.0, 54.0])
    assert s["joules_per_step"] == 35.1 and s["samples"] == 18  # median of 35.0, 36.0, 35.1
    line = describe(s)
    assert "650 W of 700 W (35.1 J a step)" in line and "medians over 3 steps, 6 readings a step" in line
    assert "joules_per_step" not in summarize(rs)


def test_the_trainer_summarizes_power_over_its_timed_steps_only():
    recs = [StepRecord(i, 1.0, 50.0, 1.0, 1.0, 1.0, 1e-4, Reading(100.0 if i < 10 else 690.0, 1980 if i < 10 else 1640,
                                                              0 if i < 10 else SW_POWER_CAP))
            for i in range(1, 31)]
    t = timing(recs, 700.0, 1980)
    assert t["window"] == "steps 10-30"
    assert t["power"]["readings"] == 21 and t["power"]["power_w"] == 690.0 and t["power"]["sm_mhz"] == 1640
    assert t["power"]["clock_held_by"] == {"power cap": 1.0}
    unread = [StepRecord(i, 1.0, 50.0, 1.0, 1.0, 1.0, 1e-4) for i in range(1, 31)]
    assert "power" not in timing(unread)


def test_the_summary_prints_the_power_line_only_when_there_were_readings():
    def printed(summary):
        out = io.StringIO()
        TrainUI(Console(file=out, width=200)).summary(summary)
        return out.getvalue()
    recs = [StepRecord(i, 1.0, 50.0, 1.0, 1.0, 1.0, 1e-4, Reading(690.0, 1640, SW_POWER_CAP)) for i in range(1, 12)]
    assert "GPU power over the same steps: 690 W of 700 W (34.5 J a step), SM clock 1640 of 1980 MHz" in printed(
        timing(recs, 700.0, 1980))
    assert "GPU power" not in printed(timing([StepRecord(i, 1.0, 50.0, 1.0, 1.0, 1.0, 1e-4) for i in range(1, 12)]))


def test_the_field_value_struct_has_nvml_h_layout_and_is_read_by_its_value_type():
    # nvml.h: fieldId, scopeId (uint), timestamp, latencyUsec (long long), valueType, nvmlReturn (enums),
    # then the 8-byte nvmlValue_t union: 40 bytes, the value at 32
    assert ctypes.sizeof(FieldValue) == 40 and FieldValue.valueType.offset == 24 and FieldValue.value.offset == 32
    fv = FieldValue(fieldId=NVML_FI_DEV_POWER_INSTANT, valueType=1)
    fv.value.uiVal = 691_234
    assert field_number(fv) == 691_234
    fv.valueType = 0
    fv.value.dVal = 12.5
    assert field_number(fv) == 12.5
    fv.nvmlReturn = 3  # NVML_ERROR_NOT_SUPPORTED
    assert field_number(fv) is None
    fv.nvmlReturn, fv.valueType = 0, 99
    assert field_number(fv) is None


class FakeNvml:
    """The NVML calls PowerMeter.read makes, answering through their pointer arguments as the
    library does; `instant_mw` None makes the instant field unsupported."""

    def __init__(self, instant_mw, average_mw):
        self.instant_mw, self.average_mw = instant_mw, average_mw

    def nvmlDeviceGetFieldValues(self, handle, count, values):
        fv = values._obj
        assert count == 1 and fv.fieldId == NVML_FI_DEV_POWER_INSTANT
        fv.valueType, fv.nvmlReturn = 1, 0 if self.instant_mw is not None else 3
        fv.value.uiVal = self.instant_mw or 0
        return 0

    def nvmlDeviceGetPowerUsage(self, handle, mw):
        mw._obj.value = self.average_mw
        return 0

    def nvmlDeviceGetClockInfo(self, handle, clock, mhz):
        mhz._obj.value = 1650
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle, reasons):
        reasons._obj.value = SW_POWER_CAP
        return 0


def fake_meter(nvml):
    m = PowerMeter("0000:00:06.0", lib="libno-such-nvml.so.1")  # off, then given the fake library
    m._nvml, m._handle, m._reasons = nvml, object(), nvml.nvmlDeviceGetCurrentClocksEventReasons
    m.instant = m._instant_mw() is not None
    return m


def test_the_meter_reads_the_instant_power_and_falls_back_to_the_1_s_average_only_without_it():
    now = fake_meter(FakeNvml(instant_mw=697_500, average_mw=590_000)).read()
    assert now == Reading(697.5, 1650, SW_POWER_CAP, instant=True)
    old = fake_meter(FakeNvml(instant_mw=None, average_mw=590_000)).read()
    assert old == Reading(590.0, 1650, SW_POWER_CAP, instant=False)
    assert summarize([now])["power_read"] == "instant" and "average" not in describe(summarize([now]))
    s = summarize([now, old], 700.0)
    assert s["power_read"] == "1 s average" and "trailing 1 s average" in describe(s)


def test_the_started_meter_samples_on_its_own_thread_and_each_take_is_the_mean_since_the_last():
    nvml = FakeNvml(instant_mw=600_000, average_mw=1)
    m = fake_meter(nvml)
    m.start(every_s=0.001)
    time.sleep(0.1)
    first = m.take()
    nvml.instant_mw = 700_000
    m.skip()
    time.sleep(0.1)
    second = m.take()
    m._nvml = None  # close() without a library to shut down
    m.close()
    assert not m._thread.is_alive()
    assert first.samples > 5 and first.watts == 600.0
    # nothing from before the skip but, at most, one read that was under way when it came
    assert second.samples > 5 and second.watts >= 700.0 - 100.0 / second.samples
    assert m.take() is None  # closed: nothing pending, and nothing to read
