"""The one comparator: backend outputs against reference outputs, by bits.

Kinds (a spec's ``outputs.<name>.compare.kind``):

- ``bitwise``: every bit equal (so -0 differs from +0 and NaN codes must match);
- ``nan_equal``: bitwise, except that any NaN equals any NaN (payload and sign are
  don't-care); NaN-ness comes from the output dtype, or from ``format`` for code outputs;
- ``ulp``: floats within ``max_ulp`` units in the last place (NaN equals NaN, Inf exact);
- ``close``: ``|got - ref| <= atol + rtol * |ref|`` in float64 (NaN equals NaN).
- ``bound``: ``|got - ref| <= atol + rtol * |ref| + mtol * magnitude`` in float64, where
  ``magnitude`` names a float64 output of the reference computed from the inputs (a matmul's
  ``sum_k |a_k| |b_k|`` per element: the scale of any summation order's rounding error), so the
  tolerance follows each element's own conditioning instead of one global ``rtol``.  NaN equals
  NaN, an infinity only itself.
- ``stochastic``: the output holds R independent draws along its first axis; the reference
  names the two admissible results per element (``lower``, ``upper``) and the probability of
  ``upper`` (``p_upper``).  Every draw must be one of the two, and the number of ``upper``
  draws must lie within ``z`` standard deviations of ``R * p_upper`` (binomial), so the
  rounding is unbiased within that bound.  The reference's own draws are not compared.

``dont_care`` names a boolean output of the reference that masks elements out (padding).
``nan_any`` (a bool, or an expression over the params) declares per variant that the source permits any NaN
encoding: where it holds, any NaN equals any NaN under ``bitwise`` too (``nan_equal`` is ``bitwise`` with
``nan_any: true``), NaN-ness again from the dtype or ``format``; where it does not, the NaN code is pinned.
The tolerances of ``close`` and ``bound`` (``atol``, ``rtol``, ``mtol``) are numbers or expressions
over the params (``"2**-7 if out_dtype == 'bfloat16' else 2**-22"``).
Equality is checked vectorised first; the per-element report is built only on failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conformance.carriers import bits_to_carrier, carrier_to_bits, get_dtype
from conformance.expr import evaluate
from conformance.formats import FORMATS
from conformance.values import INTEGER_CODE_BITS

__all__ = ["TOLERANCE_KINDS", "Mismatch", "compare_outputs", "format_bits", "nan_any", "tolerance_usage"]

MAX_REPORTED = 8


@dataclass
class Mismatch:
    """What differs in one output: a one-line message and the first offending elements."""

    output: str
    message: str
    count: int = 0
    total: int = 0
    elements: list[dict[str, Any]] = field(default_factory=list)


def format_bits(bits: Any, width: int) -> str:
    return f"0x{int(bits):0{max(1, width // 4)}x}"


def _decoded(bits: np.ndarray, dtype: str, fmt: str | None) -> np.ndarray:
    """float64 values of bit patterns (codes through their format's table)."""
    if fmt is not None:
        return FORMATS[fmt].decode_table[bits.astype(np.int64)]
    return bits_to_carrier(bits, dtype).astype(np.float64)


def _is_nan(bits: np.ndarray, dtype: str, fmt: str | None) -> np.ndarray:
    if fmt is not None:
        return FORMATS[fmt].is_nan(bits)
    if get_dtype(dtype).kind != "float":
        return np.zeros(bits.shape, dtype=bool)
    return np.isnan(bits_to_carrier(bits, dtype))


def _ulp_distance(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """Distance in representable steps between float bit patterns (sign-magnitude ordered)."""
    width = get_dtype(dtype).bits
    sign = np.uint64(1 << (width - 1))

    def ordered(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.uint64)
        mag = (x & (sign - np.uint64(1))).astype(np.int64)
        return np.where(x & sign, -mag, mag)

    return np.abs(ordered(a) - ordered(b))


def compare_outputs(
    outputs: Mapping[str, Mapping[str, Any]],
    dtypes: Mapping[str, str],
    params: Mapping[str, Any],
    reference: Mapping[str, np.ndarray],
    got: Mapping[str, Any],
) -> list[Mismatch]:
    """Compare backend outputs ``got`` (carriers) with ``reference`` (bit patterns).

    ``outputs`` is the spec's output section and ``dtypes`` each output's resolved dtype;
    returns one ``Mismatch`` per differing output.
    """
    problems: list[Mismatch] = []
    missing = [n for n in outputs if n not in got]
    if missing:
        return [Mismatch(n, f"{n}: missing from the backend's outputs (got {sorted(got)})") for n in missing]
    for name, decl in outputs.items():
        dtype = dtypes[name]
        fmt = decl.get("format")
        fmt = params.get(fmt[1:]) if isinstance(fmt, str) and fmt.startswith("$") else fmt
        int_code = fmt if fmt in INTEGER_CODE_BITS else None  # shown as integers of that width and sign
        fmt = fmt if fmt in FORMATS else None  # integer formats (quant.qdq int8) compare as plain bits
        ref_bits = reference[name]
        try:
            got_bits = carrier_to_bits(np.asarray(got[name]), dtype)
        except TypeError as exc:
            problems.append(Mismatch(name, f"{name}: {exc}"))
            continue
        if got_bits.shape != ref_bits.shape:
            problems.append(Mismatch(name, f"{name}: shape {got_bits.shape}, but reference gives {ref_bits.shape}"))
            continue
        rule = decl["compare"]
        if rule["kind"] == "stochastic":
            problems += _stochastic(name, rule, reference, got_bits, dtype, fmt)
            continue
        if rule["kind"] == "bound":
            problems += _bound(name, rule, params, reference, got_bits, dtype, fmt)
            continue
        equal = _equal(rule, params, ref_bits, got_bits, dtype, fmt)
        if "dont_care" in rule:
            equal |= np.asarray(reference[rule["dont_care"]], dtype=bool)
        if equal.all():
            continue
        problems.append(_describe(name, dtype, fmt, ref_bits, got_bits, equal, int_code))
    return problems


def _tolerance(rule: Mapping[str, Any], key: str, params: Mapping[str, Any]) -> float:
    """A tolerance of ``rule``: a number, or an expression over the params."""
    return float(evaluate(rule[key], params))


def _allowed(
    rule: Mapping[str, Any], params: Mapping[str, Any], ref: np.ndarray, reference: Mapping[str, np.ndarray]
) -> np.ndarray:
    """The largest ``|got - ref|`` per element: ``atol + rtol |ref|``, plus ``mtol * magnitude`` (``bound``)."""
    allowed = _tolerance(rule, "atol", params) + _tolerance(rule, "rtol", params) * np.abs(ref)
    if rule["kind"] == "bound":
        allowed = allowed + _tolerance(rule, "mtol", params) * np.asarray(reference[rule["magnitude"]], np.float64)
    return allowed


def nan_any(rule: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """Whether ``rule`` lets any NaN encoding match any other for these params (its ``nan_any``, default false)."""
    value = rule.get("nan_any", False)
    result = evaluate(value, params) if isinstance(value, str) else value
    if not isinstance(result, bool | np.bool_):
        raise ValueError(f"compare.nan_any={value!r} gives {result!r} for {dict(params)}, not a bool")
    return bool(result)


def _equal(
    rule: Mapping[str, Any], params: Mapping[str, Any], ref: np.ndarray, got: np.ndarray, dtype: str, fmt: str | None
) -> np.ndarray:
    kind = rule["kind"]
    same = ref == got
    if kind == "bitwise" and not nan_any(rule, params):
        return same
    both_nan = _is_nan(ref, dtype, fmt) & _is_nan(got, dtype, fmt)
    if kind in ("nan_equal", "bitwise"):
        return same | both_nan
    if kind == "ulp":
        return same | both_nan | (_ulp_distance(ref, got, dtype) <= int(rule["max_ulp"]))
    if kind == "close":
        r, g = _decoded(ref, dtype, fmt), _decoded(got, dtype, fmt)
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.abs(g - r) <= _allowed(rule, params, r, {})
        return same | both_nan | close
    raise ValueError(f"unknown compare kind {kind!r}")


def _bound(
    name: str,
    rule: Mapping[str, Any],
    params: Mapping[str, Any],
    reference: Mapping[str, np.ndarray],
    got: np.ndarray,
    dtype: str,
    fmt: str | None,
) -> list[Mismatch]:
    ref = reference[name]
    r, g = _decoded(ref, dtype, fmt), _decoded(got, dtype, fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        allowed = _allowed(rule, params, r, reference)
        within = np.abs(g - r) <= allowed
    ok = (ref == got) | (_is_nan(ref, dtype, fmt) & _is_nan(got, dtype, fmt)) | within
    if ok.all():
        return []
    bad = _describe(name, dtype, fmt, ref, got, ok)
    for element in bad.elements:
        i = tuple(element["index"])
        element["allowed"] = repr(float(allowed[i]))
    bad.message += f" (allowed |difference| <= {bad.elements[0]['allowed']} there)"
    return [bad]


def _stochastic(
    name: str,
    rule: Mapping[str, Any],
    reference: Mapping[str, np.ndarray],
    got: np.ndarray,
    dtype: str,
    fmt: str | None,
) -> list[Mismatch]:
    lower = np.asarray(reference[rule["lower"]]).astype(got.dtype)
    upper = np.asarray(reference[rule["upper"]]).astype(got.dtype)
    p = np.asarray(reference[rule["p_upper"]], dtype=np.float64)
    admissible = (got == lower) | (got == upper)
    if not admissible.all():
        bad = _describe(name, dtype, fmt, np.broadcast_to(lower, got.shape), got, admissible)
        bad.message = (
            f"{bad.message.split(', but reference')[0]}, which is neither neighbour; {bad.count} draws are not"
        )
        return [bad]
    draws = got.shape[0]
    ups = np.sum((got == upper) & (upper != lower), axis=0)
    p = np.where(upper != lower, p, 0.0)
    expected = draws * p
    z = float(rule["z"])
    biased = draws * _binomial_divergence(ups / max(draws, 1), p) > z * z / 2
    bound = z * np.sqrt(draws * p * (1 - p))  # what the reports show: the normal approximation's band
    if not biased.any():
        return []
    elements = []
    for where in np.argwhere(biased)[:MAX_REPORTED]:
        i = tuple(int(k) for k in where)
        elements.append(
            {
                "index": list(i),
                "reference": f"p_upper={float(p[i]):.6g}",
                "backend": f"{int(ups[i])}/{draws} up",
                "reference_value": f"{float(expected[i]):.1f} ± {float(bound[i]):.1f} up",
                "backend_value": str(int(ups[i])),
            }
        )
    first = elements[0]
    message = (
        f"{name}{first['index']}: {first['backend']} draws rounded up, but {first['reference']} expects "
        f"{first['reference_value']}; {int(biased.sum())} elements are biased"
    )
    return [Mismatch(name, message, int(biased.sum()), int(biased.size), elements)]


def _binomial_divergence(q: np.ndarray, p: np.ndarray) -> np.ndarray:
    """``KL(q || p)`` of two Bernoulli laws (the observed share ``q`` of up draws, the contract's ``p``).

    ``R * KL > z**2 / 2`` is the stochastic test: by Chernoff's bound a fair rounding gives so many (or so few)
    up draws with probability at most ``exp(-z**2 / 2)`` per element, and for many draws the rule is the
    normal approximation's ``|ups - R p| > z sqrt(R p (1 - p))``.  Unlike that approximation it stays right
    when ``R p`` is far below 1 (two up draws of 2000 at ``p = 7e-6`` are not a bias at ``z = 6``), and an up
    draw where ``p`` is 0 (or a down draw where it is 1) is always one.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(q > 0, q * np.log(q / p), 0.0)
        down = np.where(q < 1, (1 - q) * np.log((1 - q) / (1 - p)), 0.0)
    return np.nan_to_num(up + down, nan=np.inf, posinf=np.inf)


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else repr(float(value))


def _integer_text(bits: Any, code: str) -> str:
    """An integer code's value: ``-128`` for 0x80 of ``int8``, ``-8`` for 0x8 of ``int4``, ``8`` for ``uint4``."""
    width = INTEGER_CODE_BITS[code]
    value = int(bits) & ((1 << width) - 1)
    return str(value - (1 << width) if code.startswith("int") and value >> (width - 1) else value)


def _describe(
    name: str,
    dtype: str,
    fmt: str | None,
    ref: np.ndarray,
    got: np.ndarray,
    equal: np.ndarray,
    int_code: str | None = None,
) -> Mismatch:
    """The first differing elements with bits and values; ``int_code`` (an integer format such as ``int8`` or
    ``int4`` carried in ``uint8``) shows values as signed or unsigned integers of that width, and a signed integer
    dtype shows its values as integers."""
    bad = np.argwhere(~equal)
    width = get_dtype(dtype).bits if fmt is None else FORMATS[fmt].bits
    if int_code is not None:
        width = INTEGER_CODE_BITS[int_code]
        ref_values = np.array([_integer_text(b, int_code) for b in ref.reshape(-1)], dtype=object).reshape(ref.shape)
        got_values = np.array([_integer_text(b, int_code) for b in got.reshape(-1)], dtype=object).reshape(got.shape)
    elif fmt is None and get_dtype(dtype).kind == "int":
        ref_values = np.vectorize(lambda v: str(int(v)), otypes=[object])(_decoded(ref, dtype, fmt))
        got_values = np.vectorize(lambda v: str(int(v)), otypes=[object])(_decoded(got, dtype, fmt))
    else:
        ref_values, got_values = _decoded(ref, dtype, fmt), _decoded(got, dtype, fmt)
    elements = []
    for index in bad[:MAX_REPORTED]:
        i = tuple(int(k) for k in index)
        elements.append(
            {
                "index": list(i),
                "reference": format_bits(ref[i], width),
                "backend": format_bits(got[i], width),
                "reference_value": _value_text(ref_values[i]),
                "backend_value": _value_text(got_values[i]),
            }
        )
    first = elements[0]
    where = f"{name}[{', '.join(map(str, first['index']))}]" if first["index"] else name
    message = (
        f"{where}={first['backend']} ({first['backend_value']}), but reference gives "
        f"{first['reference']} ({first['reference_value']}); {len(bad)} of {ref.size} elements differ"
    )
    return Mismatch(name, message, len(bad), int(ref.size), elements)


TOLERANCE_KINDS = ("ulp", "close", "bound")


def tolerance_usage(
    outputs: Mapping[str, Mapping[str, Any]],
    dtypes: Mapping[str, str],
    params: Mapping[str, Any],
    reference: Mapping[str, np.ndarray],
    got: Mapping[str, Any],
) -> dict[str, np.ndarray]:
    """For each output with a tolerance (``ulp``, ``close``, ``bound``), the share of it each element uses.

    ``|got - ref| / allowed`` (``ulp``: the ulp distance over ``max_ulp``), flattened, over the elements
    that count (``dont_care`` masked out): 0 where the values are equal (or both NaN), at most 1 where the
    element is within the tolerance, above 1 (``inf`` where nothing was allowed) where it is not.  Outputs
    that are missing or of the wrong dtype or shape are left out: ``compare_outputs`` reports those.
    The report plots these shares (the error distribution of a contract with a tolerance).
    """
    usage: dict[str, np.ndarray] = {}
    for name, decl in outputs.items():
        rule = decl["compare"]
        if rule["kind"] not in TOLERANCE_KINDS or name not in got:
            continue
        dtype = dtypes[name]
        fmt = decl.get("format")
        fmt = params.get(fmt[1:]) if isinstance(fmt, str) and fmt.startswith("$") else fmt
        fmt = fmt if fmt in FORMATS else None  # integer formats (quant.qdq int8) compare as plain bits
        ref = reference[name]
        try:
            got_bits = carrier_to_bits(np.asarray(got[name]), dtype)
        except TypeError:
            continue
        if got_bits.shape != ref.shape:
            continue
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            if rule["kind"] == "ulp":
                diff = _ulp_distance(ref, got_bits, dtype).astype(np.float64)
                allowed: Any = float(rule["max_ulp"])
            else:
                r, g = _decoded(ref, dtype, fmt), _decoded(got_bits, dtype, fmt)
                diff = np.abs(g - r)
                allowed = _allowed(rule, params, r, reference)
            share = np.where(diff == 0, 0.0, diff / allowed)
            share = np.where(np.isnan(share), np.where(diff <= allowed, 1.0, np.inf), share)
        exact = (ref == got_bits) | (_is_nan(ref, dtype, fmt) & _is_nan(got_bits, dtype, fmt))
        share = np.where(exact, 0.0, share)
        if "dont_care" in rule:
            share = share[~np.asarray(reference[rule["dont_care"]], dtype=bool)]
        usage[name] = share.reshape(-1)
    return usage
