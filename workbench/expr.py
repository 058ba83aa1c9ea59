"""Size expressions: the small arithmetic language of contracts and version headers.

Shapes, byte counts, grid sizes and preconditions are written as Python-like expressions of the
size parameters ("B * T", "cdiv(N * 32, block_size)", "C % 4 == 0"). They are evaluated here,
through the `ast` module, with only arithmetic, comparisons, boolean logic and a few whitelisted
functions allowed, so a contract is data and never arbitrary code.
"""

from __future__ import annotations

import ast
import math
import operator
from functools import lru_cache
from typing import Any, Mapping

from .errors import ContractError


def cdiv(a: int, b: int) -> int:
    """Ceiling division, the grid-size workhorse."""
    return -(-int(a) // int(b))


def round_up(a: int, b: int) -> int:
    return cdiv(a, b) * int(b)


def ilog2(a: int) -> int:
    return int(a).bit_length() - 1


def is_pow2(a: int) -> bool:
    a = int(a)
    return a > 0 and (a & (a - 1)) == 0


FUNCTIONS: dict[str, Any] = {
    "cdiv": cdiv,
    "round_up": round_up,
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "float": float,
    "sqrt": math.sqrt,
    "ilog2": ilog2,
    "is_pow2": is_pow2,
}

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.Expression:
    """Parse and validate an expression once; raise ContractError naming what is not allowed."""
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as e:
        raise ContractError(f"cannot parse expression {text!r}: {e.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.Load, ast.Name, ast.Constant, ast.Tuple,
                             ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp,
                             ast.And, ast.Or, *_BINARY, *_UNARY, *_COMPARE)):
            continue
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS) or node.keywords:
                raise ContractError(
                    f"expression {text!r}: only these functions may be called: "
                    + ", ".join(sorted(FUNCTIONS)))
            continue
        raise ContractError(f"expression {text!r}: {type(node).__name__} is not allowed")
    return tree


def names(text: str) -> set[str]:
    """The free names an expression uses (function names excluded)."""
    tree = parse(text)
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def evaluate(text: str | int | float, env: Mapping[str, Any]) -> Any:
    """Evaluate `text` with the names in `env`. Numbers pass through unchanged."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return text
    tree = parse(str(text))
    return _eval(tree.body, env, str(text))


def _eval(node: ast.AST, env: Mapping[str, Any], text: str) -> Any:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (int, float, bool)):
            return node.value
        raise ContractError(f"expression {text!r}: only numeric constants are allowed")
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise ContractError(f"expression {text!r}: unknown name {node.id!r} "
                            f"(known: {', '.join(sorted(env))})")
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env, text), _eval(node.right, env, text)
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ContractError(f"expression {text!r}: division by zero") from None
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, env, text))
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, env, text) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, text)
        for op, comp in zip(node.ops, node.comparators):
            right = _eval(comp, env, text)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        branch = node.body if _eval(node.test, env, text) else node.orelse
        return _eval(branch, env, text)
    if isinstance(node, ast.Tuple):
        return tuple(_eval(e, env, text) for e in node.elts)
    if isinstance(node, ast.Call):
        args = [_eval(a, env, text) for a in node.args]
        return FUNCTIONS[node.func.id](*args)
    raise ContractError(f"expression {text!r}: {type(node).__name__} is not allowed")


def evaluate_int(text: str | int, env: Mapping[str, Any], what: str = "value") -> int:
    value = evaluate(text, env)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ContractError(f"{what} {text!r} must be an integer, got {value!r}")
    return value


def evaluate_shape(text: str, env: Mapping[str, Any]) -> tuple[int, ...]:
    """A shape is a comma-separated list of integer expressions: "B, T, 3*C"."""
    value = evaluate(f"({text},)" if str(text).strip() else "()", env)
    dims = []
    for d in value:
        if isinstance(d, float) and d.is_integer():
            d = int(d)
        if not isinstance(d, int) or isinstance(d, bool) or d < 0:
            raise ContractError(f"shape {text!r} must be non-negative integers, got {value}")
        dims.append(d)
    return tuple(dims)
