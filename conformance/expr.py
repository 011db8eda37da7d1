"""A tiny, safe evaluator for the arithmetic in spec files.

Specs state constraints and shapes as Python-like expressions over dim names, parameter
names and input shapes (``K % (inner_k_tiles * 16) == 0``, ``x.shape``, ``[N, K // 2]``).
Only literals, names, ``name.shape``, subscripts, arithmetic, comparisons, boolean
operators, conditional expressions (``a if cond else b``), lists/tuples and
``min``/``max``/``ceil_div`` are allowed; anything else is a
``SpecError`` at load time, so a spec can never execute code.

Evaluation is bounded, so no expression (a spec's, or a ``--where`` typed at the command line) can
hang or exhaust memory: an integer result beyond ``MAX_INT`` (2^64: the sizes, codes and counts
specs compute fit in 64 bits), an exponent beyond ``MAX_EXPONENT`` in magnitude (the float64 range:
``2**-1074`` is its least subnormal) and a list longer than ``MAX_LENGTH`` are ``SpecError`` naming
the expression, checked before the operation is carried out.  So is any other failure to evaluate
(``block_size.shape`` of an int, a division by zero): a ``SpecError``, never a Python traceback.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from conformance.errors import SpecError

__all__ = ["MAX_EXPONENT", "MAX_INT", "MAX_LENGTH", "check_expression", "evaluate", "names_in"]

MAX_INT = 2**64
"""The largest integer magnitude an expression may compute (module docstring)."""
MAX_EXPONENT = 1100
"""The largest exponent magnitude of ``**`` (float64 reaches ``2**-1074``)."""
MAX_LENGTH = 4096
"""The longest list an expression may build (shapes and member lists are far shorter)."""

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "ceil_div": lambda a, b: -(-a // b),
    "round_up": lambda a, b: -(-a // b) * b,
    "prod": math.prod,
}


class _Shape:
    """Stands in for an input inside an expression: only ``.shape`` and ``.ndim`` exist."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = tuple(shape)
        self.ndim = len(shape)


@functools.lru_cache(maxsize=4096)
def _parse(source: str) -> ast.Expression:
    """The checked syntax tree of an expression (parsed once per process: rows evaluate the same few)."""
    try:
        tree = ast.parse(str(source), mode="eval")
    except SyntaxError as exc:
        raise SpecError(f"cannot parse expression {source!r}: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SpecError(f"cannot parse expression {_short(source)!r}: {type(exc).__name__}: {exc}") from None
    for node in ast.walk(tree):
        allowed = (
            ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Name, ast.Load,
            ast.Constant, ast.Attribute, ast.Subscript, ast.Slice, ast.List, ast.Tuple, ast.Call,
            ast.And, ast.Or, ast.Not, ast.USub, ast.UAdd, ast.IfExp, *_BINARY, *_COMPARE,
        )  # fmt: skip
        if not isinstance(node, allowed):
            raise SpecError(f"expression {source!r} uses {type(node).__name__}, which specs may not use")
        if isinstance(node, ast.Attribute) and node.attr not in ("shape", "ndim"):
            raise SpecError(f"expression {source!r}: only .shape and .ndim may be read, not .{node.attr}")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS):
            raise SpecError(f"expression {source!r}: the only functions are {sorted(_FUNCTIONS)}")
    return tree


def names_in(source: str) -> set[str]:
    """The free names an expression reads (function names excluded)."""
    tree = _parse(source)
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - called


def check_expression(source: str, known: Iterable[str]) -> None:
    """Raise ``SpecError`` unless the expression parses and reads only ``known`` names."""
    unknown = names_in(source) - set(known)
    if unknown:
        raise SpecError(f"expression {source!r} reads unknown names {sorted(unknown)}; known: {sorted(known)}")


def evaluate(
    source: str | int | float, scope: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]] | None = None
) -> Any:
    """Evaluate an expression with ``scope`` (dims and params) and input ``shapes``."""
    if isinstance(source, (int, float)) and not isinstance(source, bool):
        return source
    names: dict[str, Any] = {**scope, **{k: _Shape(v) for k, v in (shapes or {}).items()}}
    tree = _parse(str(source))
    try:
        return _eval(tree.body, names, str(source))
    except SpecError:
        raise
    except (ArithmeticError, TypeError, ValueError, LookupError, AttributeError, RecursionError, MemoryError) as exc:
        raise SpecError(f"expression {_short(source)!r}: cannot evaluate: {type(exc).__name__}: {exc}") from None


def _short(source: object) -> str:
    text = str(source)
    return text if len(text) <= 200 else text[:200] + "..."


def _bounded(value: Any, source: str) -> Any:
    """``value``, unless it is an int beyond ``MAX_INT`` or a list beyond ``MAX_LENGTH``."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise SpecError(f"expression {_short(source)!r}: an integer beyond 2^64 (the most an expression may compute)")
    if isinstance(value, (list, tuple, str)) and len(value) > MAX_LENGTH:
        raise SpecError(f"expression {_short(source)!r}: a sequence longer than {MAX_LENGTH} elements")
    return value


def _checked_binary(op: ast.operator, left: Any, right: Any, source: str) -> Any:
    """``left op right`` after the checks that keep it small (module docstring)."""
    if isinstance(op, ast.Pow) and isinstance(right, (int, float)) and not isinstance(right, bool):
        if abs(right) > MAX_EXPONENT:
            raise SpecError(f"expression {_short(source)!r}: exponent {right!r} is beyond {MAX_EXPONENT} in magnitude")
        integers = isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1
        if integers and (abs(left).bit_length() - 1) * right > 64:
            raise SpecError(f"expression {_short(source)!r}: {left}**{right} is beyond 2^64 (the most it may compute)")
    sequences = (list, tuple, str)
    if isinstance(left, sequences) or isinstance(right, sequences):
        count = right if isinstance(left, sequences) else left
        seq = left if isinstance(left, sequences) else right
        if isinstance(op, ast.Mult) and isinstance(count, int):
            if len(seq) * max(count, 0) > MAX_LENGTH:
                raise SpecError(f"expression {_short(source)!r}: a sequence longer than {MAX_LENGTH} elements")
        elif not isinstance(op, ast.Add):
            kind = type(seq).__name__
            raise SpecError(f"expression {_short(source)!r}: {type(op).__name__} does not apply to a {kind}")
    return _bounded(_BINARY[type(op)](left, right), source)


def _eval(node: ast.AST, names: Mapping[str, Any], source: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise SpecError(f"expression {source!r}: name {node.id!r} has no value here")
        return names[node.id]
    if isinstance(node, ast.Attribute):
        value = _eval(node.value, names, source)
        if not isinstance(value, _Shape):
            what = ast.unparse(node.value)
            raise SpecError(
                f"expression {_short(source)!r}: .{node.attr} reads an input's shape, but {what} is {value!r}, "
                "not an input"
            )
        return getattr(value, node.attr)
    if isinstance(node, ast.Subscript):
        return _eval(node.value, names, source)[_eval(node.slice, names, source)]
    if isinstance(node, ast.Slice):
        parts = (node.lower, node.upper, node.step)
        return slice(*(None if p is None else _eval(p, names, source) for p in parts))
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, names, source) for e in node.elts]
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, names, source)
        unary: dict[type, Callable[[Any], Any]] = {
            ast.USub: operator.neg,
            ast.UAdd: operator.pos,
            ast.Not: operator.not_,
        }
        return _bounded(unary[type(node.op)](value), source)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, names, source), _eval(node.right, names, source)
        if isinstance(left, list) and isinstance(node.op, ast.Add):
            return _bounded(left + list(right), source)
        return _checked_binary(node.op, left, right, source)
    if isinstance(node, ast.IfExp):  # only the branch taken is evaluated
        taken = node.body if _eval(node.test, names, source) else node.orelse
        return _eval(taken, names, source)
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, names, source) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names, source)
        for op, comparator in zip(node.ops, node.comparators, strict=False):
            right = _eval(comparator, names, source)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)  # guaranteed by _parse
        return _bounded(_FUNCTIONS[node.func.id](*(_eval(a, names, source) for a in node.args)), source)
    raise SpecError(f"expression {source!r}: cannot evaluate {type(node).__name__}")
