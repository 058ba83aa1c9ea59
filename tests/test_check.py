import numpy as np
import pytest

from workbench.check import compare, draw, make_case, poison
from workbench.family import Arg, Project

from conftest import ROOT


def test_a_nan_is_a_mismatch_even_where_tolerance_is_loose():
    arg = Arg("out", "out", "B, T, C")
    expected = np.zeros((1, 2, 3))
    got = expected.copy()
    got[0, 1, 2] = np.nan
    r = compare(arg, expected, got, atol=1.0, rtol=1.0)
    assert not r.ok and r.bad == 1
    assert r.first[0].where == "(b=0, t=1, c=2)"


def test_mismatches_are_reported_in_the_ops_coordinates():
    arg = Arg("out", "out", "B, T, C")
    expected = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    got = expected.copy()
    got[1, 2, 3] += 0.5
    got[0, 0, 1] -= 0.25
    r = compare(arg, expected, got, atol=1e-5, rtol=1e-5)
    assert r.bad == 2 and r.max_abs == pytest.approx(0.5)
    assert [m.where for m in r.first] == ["(b=0, t=0, c=1)", "(b=1, t=2, c=3)"]
    assert r.first[1].expected == 23.0 and r.first[1].got == 23.5


def test_tolerance_is_absolute_plus_relative():
    arg = Arg("y", "out", "N")
    expected = np.array([0.0, 1000.0])
    assert compare(arg, expected, np.array([0.9e-5, 1000.0 + 0.9e-2]), 1e-5, 1e-5).ok
    assert not compare(arg, expected, np.array([2e-5, 1000.0]), 1e-5, 1e-5).ok


def test_non_finite_reference_entries_are_skipped():
    arg = Arg("y", "out", "N")
    assert compare(arg, np.array([np.inf, 1.0]), np.array([0.0, 1.0]), 0, 0).ok


def test_poison_is_nan_for_floats():
    assert np.isnan(poison(Arg("y", "out", "N"), (4,))).all()


def test_draw_follows_the_init_spec():
    rng = np.random.default_rng(0)
    ints = draw(Arg("t", "in", "N", "i32", "randint(0, V)"), (1000,), {"V": 7}, rng)
    assert ints.dtype == np.int32 and ints.min() >= 0 and ints.max() <= 6
    u = draw(Arg("x", "in", "N", init="uniform(2, 3)"), (1000,), {}, rng)
    assert u.dtype == np.float32 and 2 <= u.min() and u.max() <= 3


def test_cases_differ_by_seed_and_repeat_by_seed():
    fam = Project(ROOT).family("layernorm_forward")
    sizes = {"B": 2, "T": 3, "C": 37}
    a, b, a2 = make_case(fam, sizes, 0), make_case(fam, sizes, 1), make_case(fam, sizes, 0)
    assert not np.array_equal(a.inputs["inp"], b.inputs["inp"])
    assert np.array_equal(a.inputs["inp"], a2.inputs["inp"])
    assert a.expected["out"].shape == (2, 3, 37) and a.expected["mean"].shape == (2, 3)
