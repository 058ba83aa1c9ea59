import pytest

from workbench import expr
from workbench.errors import ContractError


def test_arithmetic_and_helpers():
    env = {"B": 8, "T": 1024, "C": 768, "block_size": 128}
    assert expr.evaluate("cdiv(B * T * 32, block_size)", env) == 2048
    assert expr.evaluate("C % 4 == 0 and C <= 2048", env) is True
    assert expr.evaluate("max(1, C // 3)", env) == 256
    assert expr.evaluate("1.0 / sqrt(64)", {}) == 0.125


def test_shapes_are_tuples_of_ints():
    assert expr.evaluate_shape("B, T, 3 * C", {"B": 2, "T": 3, "C": 4}) == (2, 3, 12)
    assert expr.evaluate_shape("C", {"C": 5}) == (5,)


def test_unknown_name_is_named():
    with pytest.raises(ContractError, match="unknown name 'Q'"):
        expr.evaluate("Q + 1", {"B": 1})


@pytest.mark.parametrize("text", ["__import__('os')", "B.real", "[B]", "lambda: 1", "open('x')"])
def test_only_arithmetic_is_allowed(text):
    with pytest.raises(ContractError):
        expr.evaluate(text, {"B": 1})


def test_names_excludes_function_names():
    assert expr.names("cdiv(N, block_size) + C") == {"N", "block_size", "C"}
