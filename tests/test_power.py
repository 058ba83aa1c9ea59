"""workbench/power.py: the GPU's power and SM clock a run reports (the medians, the share of
readings each reason held the clock down), the trainer's summary of them over its timed steps, and
a meter that cannot read staying out of the way. The readings from a real GPU: test_gpu_train.py."""

import io

from rich.console import Console

from train.trainer import StepRecord, timing
from train.ui import TrainUI
from workbench.power import HW_THERMAL, SW_POWER_CAP, PowerMeter, Reading, describe, summarize


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
    assert "GPU power over the same steps: 690 W of 700 W, SM clock 1640 of 1980 MHz" in printed(timing(recs, 700.0, 1980))
    assert "GPU power" not in printed(timing([StepRecord(i, 1.0, 50.0, 1.0, 1.0, 1.0, 1e-4) for i in range(1, 12)]))
