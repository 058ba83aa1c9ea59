"""Learning-rate schedules (train/schedule.py): pure functions of the step."""

import math

import pytest

from train.schedule import SCHEDULES, Schedule


def rates(s: Schedule) -> list[float]:
    return [s(i) for i in range(s.total)]


def test_constant_without_warmup_is_the_c_trainers_rate():
    assert rates(Schedule("constant", 3e-4, 50)) == [3e-4] * 50


@pytest.mark.parametrize("kind", SCHEDULES)
def test_every_schedule_warms_up_linearly(kind):
    s = Schedule(kind, 1e-3, 100, warmup=10, final_frac=0.1)
    assert [s(i) for i in range(10)] == pytest.approx([1e-3 * (i + 1) / 10 for i in range(10)])
    assert s(10) == pytest.approx(1e-3)


@pytest.mark.parametrize("kind", ["cosine", "linear", "wsd"])
def test_decaying_schedules_reach_the_final_fraction_at_the_last_step(kind):
    s = Schedule(kind, 1e-3, 100, warmup=5, final_frac=0.1)
    r = rates(s)
    assert r[-1] == pytest.approx(1e-4) and r[s.decay_start] == pytest.approx(1e-3)
    after = r[s.decay_start:]
    assert all(a >= b for a, b in zip(after, after[1:]))  # never rises once decaying


def test_cosine_is_half_way_at_the_middle_of_its_decay():
    s = Schedule("cosine", 1.0, 101, final_frac=0.0)
    assert s(50) == pytest.approx(0.5) and s(25) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


def test_linear_falls_by_equal_steps():
    s = Schedule("linear", 1.0, 11, final_frac=0.0)
    assert rates(s) == pytest.approx([1 - i / 10 for i in range(11)])


def test_wsd_holds_then_decays_over_the_last_fraction():
    s = Schedule("wsd", 1.0, 100, warmup=10, final_frac=0.0, decay_frac=0.2)
    r = rates(s)
    assert s.decay_start == 80 and r[10:81] == [1.0] * 71
    assert r[80:] == pytest.approx([1 - i / 19 for i in range(20)])


def test_a_schedule_rebuilds_from_its_recorded_state():
    s = Schedule("wsd", 2e-4, 1000, warmup=50, final_frac=0.05, decay_frac=0.3)
    assert rates(Schedule(**s.state())) == rates(s)


def test_an_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="unknown learning-rate schedule"):
        Schedule("step", 1e-3, 10)
