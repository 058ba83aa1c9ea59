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
    assert u.dtype == np.float32 and 2 <= u.min() and u.max() < 3
    # float32 inputs are drawn in float32: still the distributions the spec names
    n = draw(Arg("x", "in", "N", init="normal(0.5, 0.02)"), (200_000,), {}, rng)
    assert n.dtype == np.float32 and abs(n.mean() - 0.5) < 1e-3 and abs(n.std() - 0.02) < 1e-3
    w = draw(Arg("x", "in", "N", init="uniform(0, 1e-4)"), (200_000,), {}, rng)
    assert 0 <= w.min() and w.max() < np.float32(1e-4) and abs(w.mean() - 5e-5) < 1e-6
    b = draw(Arg("x", "in", "N", "bf16", init="normal(0, 1)"), (1000,), {}, rng)
    assert b.dtype == np.float32  # widened values, rounded to bf16 later (make_inputs)


def test_cases_differ_by_seed_and_repeat_by_seed():
    fam = Project(ROOT).family("layernorm_forward")
    sizes = {"B": 2, "T": 3, "C": 37}
    a, b, a2 = make_case(fam, sizes, 0), make_case(fam, sizes, 1), make_case(fam, sizes, 0)
    assert not np.array_equal(a.inputs["inp"], b.inputs["inp"])
    assert np.array_equal(a.inputs["inp"], a2.inputs["inp"])
    assert a.expected["out"].shape == (2, 3, 37) and a.expected["mean"].shape == (2, 3)


def test_bf16_storage_rounds_to_nearest_even_and_widens_exactly():
    from workbench.check import from_storage, to_storage
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, 3.0e-3, np.inf, np.nan], dtype=np.float32)
    bits = to_storage(x, "bf16")
    assert bits.dtype == np.uint16
    back = from_storage(bits, "bf16")
    assert back[0] == 1.0 and back[1] == 1.0          # a tie rounds to the even mantissa
    assert back[2] == 1.0 + 4 * 2**-8                 # another tie, rounded up to even
    assert back[3] == -2.5 and back[5] == np.inf and np.isnan(back[6])
    assert abs(back[4] - 3.0e-3) <= 3.0e-3 * 2**-8
    assert np.array_equal(to_storage(back, "bf16"), bits)  # bf16 values are exact in float32


def test_a_bf16_case_holds_rounded_inputs_and_the_reference_on_them():
    from workbench.check import from_storage, run_reference
    fam = Project(ROOT).family("attention_forward")
    sizes = {"B": 1, "T": 5, "NH": 2, "HS": 4}
    fp32, bf16 = make_case(fam, sizes, 0), make_case(fam, sizes, 0, "bf16")
    assert bf16.inputs["qkv"].dtype == np.uint16 and bf16.precision == "bf16"
    wide = from_storage(bf16.inputs["qkv"], "bf16")
    assert np.abs(wide - fp32.inputs["qkv"]).max() <= np.abs(fp32.inputs["qkv"]).max() * 2**-8
    again = run_reference(fam, sizes, bf16.inputs, "bf16")
    assert np.array_equal(again["out"], bf16.expected["out"])
    assert not np.array_equal(bf16.expected["out"], fp32.expected["out"])  # the rounding is the input's


def test_bytes_at_bf16_count_each_argument_at_its_width():
    fam = Project(ROOT).family("attention_forward")
    s = fam.default_sizes
    B, T, NH, HS = s["B"], s["T"], s["NH"], s["HS"]
    C = NH * HS
    assert fam.bytes_moved(s, "bf16") == 2 * (3 * B * T * C + B * T * C) + 4 * B * NH * T
    assert [a.dtype for a in fam.args_for("bf16")] == ["bf16", "f32", "bf16"]
    assert fam.version(9).precision == "bf16" and fam.version(9).args[0].dtype == "bf16"


def test_a_lazy_case_array_is_made_on_first_use_only():
    from workbench.providers import _host_ramp, _Lazy
    made = []
    arrays = _Lazy(dst=lambda: made.append(1) or _host_ramp((1 << 24) + 3))
    assert "dst" in arrays and "src" not in arrays and not made
    first = arrays["dst"]
    assert arrays["dst"] is first and made == [1]
    # above 2^24 float32 holds even integers only: i rounds to nearest, ties to even (as the
    # device's (float)i does)
    assert first.dtype == np.float32 and list(first[-3:]) == [16777216.0, 16777216.0, 16777218.0]
