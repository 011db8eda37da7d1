"""A tiny, safe evaluator for the arithmetic in spec files.

Specs state constraints and shapes as Python-like expressions over dim names, parameter
names and input shapes (``K % (inner_k_tiles * 16) == 0``, ``x.shape``, ``[N, K // 2]``).
Only literals, names, ``name.shape``, subscripts, arithmetic, comparisons, boolean
operators, conditional expressions (``a if cond else b``), lists/tuples and
``min``/``max``/``ceil_div`` are allowed; anything else is a
``SpecError`` at load time, so a spec can never execute code.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from conformance.errors import SpecError

__all__ = ["check_expression", "evaluate", "names_in"]

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
    return _eval(_parse(str(source)).body, names, str(source))


def _eval(node: ast.AST, names: Mapping[str, Any], source: str) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise SpecError(f"expression {source!r}: name {node.id!r} has no value here")
        return names[node.id]
    if isinstance(node, ast.Attribute):
        return getattr(_eval(node.value, names, source), node.attr)
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
        return unary[type(node.op)](value)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, names, source), _eval(node.right, names, source)
        if isinstance(left, list) and isinstance(node.op, ast.Add):
            return left + list(right)
        return _BINARY[type(node.op)](left, right)
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
        return _FUNCTIONS[node.func.id](*(_eval(a, names, source) for a in node.args))
    raise SpecError(f"expression {source!r}: cannot evaluate {type(node).__name__}")
