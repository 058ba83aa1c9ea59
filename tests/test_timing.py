"""The timing stop rule's statistics (CPU): the median's confidence interval says when to stop."""
import json

import numpy as np

from workbench.results import Timing
from workbench.timing import median_ci, summarize


def test_the_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    true_median = 30.0  # lognormal with this median and ~6% spread, like a 30 us launch on an H100
    covered = 0
    trials = 2000
    for _ in range(trials):
        a = np.sort(true_median * np.exp(rng.normal(0.0, 0.045, size=80)))
        half = median_ci(a) * np.median(a)
        covered += abs(np.median(a) - true_median) <= half
    assert 0.93 <= covered / trials <= 0.985


def test_the_interval_narrows_with_more_samples_while_the_spread_does_not():
    rng = np.random.default_rng(3)
    draw = lambda n: list(30.0 * np.exp(rng.normal(0.0, 0.045, size=n)))
    few, many = summarize(draw(20)), summarize(draw(500))
    assert many.ci < few.ci / 3          # ~1/sqrt(n): sqrt(25) = 5
    assert 0.5 < many.noise / few.noise < 2.0
    assert many.ci < 0.01 < few.ci        # 500 samples pin the median to +-1%, 20 do not


def test_a_constant_launch_is_pinned_at_once_and_one_sample_says_nothing():
    assert summarize([5.0] * 15).ci == 0.0
    assert summarize([5.0]).ci is None


def test_the_interval_travels_through_json_and_old_files_read_without_it():
    t = summarize([1.0, 1.1, 0.9, 1.05, 0.95] * 4)
    back = Timing.from_json(json.loads(json.dumps(t.to_json())))
    assert back.ci == t.ci and back.median_us == t.median_us
    old = {"median_us": 1.0, "p20_us": 0.9, "p80_us": 1.1, "reps": 20, "noise": 0.2}
    assert Timing.from_json(old).ci is None


class _Stream:
    def synchronize(self):
        pass


def test_a_slow_launch_gets_one_warm_up_after_the_first_and_a_fast_one_all_of_them():
    import time
    from workbench.timing import SLOW_S, _warm_up
    for seconds, launches in ((SLOW_S * 1.5, 2), (0.0, 3)):
        ran = []
        per_launch = _warm_up(lambda s: (ran.append(1), time.sleep(seconds)), lambda s: None, _Stream(), warmup=3)
        assert len(ran) == launches
        assert (per_launch >= SLOW_S) == (seconds > 0)
