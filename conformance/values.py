"""Value classes: the kinds of numbers a spec asks its inputs to be drawn from.

Each class gives two things for an input dtype:

- a *boundary pool*: a deterministic array of bit patterns that boundary-first cases run
  whole (TestFloat style: every code, every rounding midpoint and one input-dtype ulp
  either side, max and max+half-ulp, subnormals, +-0, NaN payloads, +-Inf);
- an *element strategy*: a hypothesis strategy of single bit patterns for random cases,
  built so that shrinking moves towards simple values (0, 1.0, the first pool entries).

For 16-bit float inputs the ``wide`` pool is every one of the 65,536 patterns.
Classes ``zero_blocks`` and ``outlier_blocks`` act on whole arrays (``apply_block_class``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import hypothesis.strategies as st
import numpy as np

from conformance.carriers import bits_to_carrier, get_dtype, round_to_bfloat16
from conformance.formats import FORMATS, FormatTraits

__all__ = [
    "apply_block_class",
    "boundary_pool",
    "bulk_sampler",
    "class_name",
    "element_strategy",
    "resolve_class",
    "values_to_bits",
]

_FLOAT_LAYOUT = {"float32": (8, 23), "float16": (5, 10), "bfloat16": (8, 7), "float64": (11, 52)}
ARRAY_CLASSES = ("zero_blocks", "outlier_blocks", "lone_extreme", "scale_decision_points", "zeros")
"""Classes that act on a whole array after its elements are drawn (``apply_block_class``); their elements are
``normal`` ones."""
EXTREME_PLACES = ("last", "middle", "second_chunk")
"""Where ``lone_extreme`` puts its value: the last element, the middle one, or element 4096 (the first of a
second chunk of 4,096, the fast kernels' reduction tile) where the array has one."""
INTEGER_CODE_BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int4": 4, "uint4": 4}
"""Integer formats a ``codes``/``all_codes`` class may name: for integer inputs, codes 0 .. 2**bits - 1; for
float inputs, ``codes`` are the format's integers and ``midpoints`` the ties k + 0.5 between them."""


def _code_bits(fmt: str) -> int:
    """Width of the codes of ``fmt``: a float format of ``specs/formats.json`` or an integer format."""
    return INTEGER_CODE_BITS[fmt] if fmt in INTEGER_CODE_BITS else FORMATS[fmt].bits


def class_name(value_class: str | Mapping[str, Any]) -> str:
    return value_class if isinstance(value_class, str) else str(value_class["class"])


def resolve_class(value_class: str | Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The class as a dict, with ``$param`` references replaced by the parameter's value."""
    vc = {"class": value_class} if isinstance(value_class, str) else dict(value_class)
    for key, value in vc.items():
        if isinstance(value, str) and value.startswith("$"):
            vc[key] = params[value[1:]]
    return vc


# -- conversions -----------------------------------------------------------------------------
def _float_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values to bit patterns of a float dtype (values are chosen exactly representable)."""
    if dtype == "float32":
        return values.astype(np.float32).view(np.uint32)
    if dtype == "float16":
        with np.errstate(over="ignore"):  # values beyond float16's range become +-Inf, as intended
            return values.astype(np.float16).view(np.uint16)
    if dtype == "bfloat16":
        return (round_to_bfloat16(values.astype(np.float32)).view(np.uint32) >> 16).astype(np.uint16)
    if dtype == "float64":
        return values.astype(np.float64).view(np.uint64)
    raise ValueError(f"{dtype} is not a float dtype")


def _with_neighbours(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Each finite pattern and the patterns one ulp (of ``dtype``) below and above it."""
    exp_bits, man_bits = _FLOAT_LAYOUT[dtype]
    width = 1 + exp_bits + man_bits
    sign = bits.astype(np.uint64) & np.uint64(1 << (width - 1))
    magnitude = bits.astype(np.int64) & ((1 << (width - 1)) - 1)
    inf = ((1 << exp_bits) - 1) << man_bits
    out = [bits.astype(np.uint64)]
    for step in (-1, 1):
        m = magnitude + step
        ok = (m >= 0) & (m <= inf) & (magnitude < inf)
        out.append((m[ok].astype(np.uint64)) | sign[ok])
    return np.concatenate(out).astype(get_dtype(dtype).bit_dtype)


def _special_values(dtype: str, fmt: FormatTraits | None) -> np.ndarray:
    exp_bits, man_bits = _FLOAT_LAYOUT[dtype]
    width = 1 + exp_bits + man_bits
    sign = 1 << (width - 1)
    inf = ((1 << exp_bits) - 1) << man_bits
    quiet = 1 << (man_bits - 1)
    patterns = [
        0, sign,  # +0, -0
        inf, sign | inf,  # +-Inf
        inf | quiet, sign | inf | quiet, inf | 1, sign | inf | 1, inf | ((1 << man_bits) - 1),  # NaNs
        1, sign | 1, (1 << man_bits) - 1, 1 << man_bits,  # min/max subnormal, min normal
        inf - 1, sign | (inf - 1),  # +-max finite
    ]  # fmt: skip
    bits = np.array(patterns, dtype=np.uint64).astype(get_dtype(dtype).bit_dtype)
    if fmt is None:
        return bits
    landmarks = [fmt.max_finite, fmt.min_normal, fmt.min_subnormal, fmt.min_subnormal / 2]
    magnitudes = fmt.finite_magnitudes
    if len(magnitudes) > 1:
        landmarks.append(fmt.max_finite + (magnitudes[-1] - magnitudes[-2]) / 2)  # max + half-ulp
    values = np.array(landmarks + [-v for v in landmarks], dtype=np.float64)
    return np.concatenate([bits, _with_neighbours(_float_bits(values, dtype), dtype)])


def _format_of(vc: Mapping[str, Any], name: str) -> FormatTraits:
    if "format" not in vc:
        raise ValueError(f"value class {name!r} needs a format")
    return FORMATS[vc["format"]]


def _integer_values(fmt: str, midpoints: bool) -> np.ndarray:
    """Float values for an integer format: every integer of its range, or every k + 0.5 from one below the
    minimum to one above the maximum (the rounding ties, and the saturation boundaries)."""
    bits = INTEGER_CODE_BITS[fmt]
    low, high = (0, (1 << bits) - 1) if fmt.startswith("u") else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if midpoints:
        return np.arange(low - 1, high + 1, dtype=np.float64) + 0.5
    return np.arange(low, high + 1, dtype=np.float64)


def _codes_values(fmt: FormatTraits) -> np.ndarray:
    mags = fmt.finite_magnitudes
    return np.concatenate([mags, -mags]) if fmt.signed else mags


def _midpoint_values(fmt: FormatTraits) -> np.ndarray:
    mags = fmt.finite_magnitudes
    mids = (mags[:-1] + mags[1:]) / 2
    extra = [mags[-1] + (mags[-1] - mags[-2]) / 2] if len(mags) > 1 else []  # the overflow boundary
    mids = np.concatenate([mids, extra])
    return np.concatenate([mids, -mids])


# -- public ----------------------------------------------------------------------------------
def values_to_bits(values: Any, dtype: str) -> np.ndarray:
    """Bit patterns of ``values`` (nested lists or an array) in ``dtype``, rounded to nearest."""
    d = get_dtype(dtype)
    if d.kind == "float":
        return _float_bits(np.asarray(values, dtype=np.float64), dtype)
    return np.asarray(values).astype(d.carrier).view(d.bit_dtype)


def _class_key(value_class: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A hashable key of a class; the pools do not depend on the keys that only boundary cases read."""
    return tuple(sorted((str(k), v) for k, v in value_class.items() if k not in _BOUNDARY_ONLY_KEYS))


_BOUNDARY_ONLY_KEYS = ("dims", "at", "amax_inputs", "first", "when")
"""Value-class keys that shape boundary cases (sizes, places, companions, rows), not element pools."""


def boundary_pool(value_class: Mapping[str, Any], dtype: str) -> np.ndarray:
    """Deterministic bit patterns of ``dtype`` for one (resolved) value class (read-only: built once per
    process and shared; copy it to change it)."""
    return _pool(_class_key(value_class), dtype)


@functools.lru_cache(maxsize=1024)
def _pool(key: tuple[tuple[str, Any], ...], dtype: str) -> np.ndarray:
    pool = _build_pool(dict(key), dtype)
    pool.setflags(write=False)
    return pool


def _build_pool(value_class: Mapping[str, Any], dtype: str) -> np.ndarray:
    name = value_class["class"]
    d = get_dtype(dtype)
    if d.kind != "float":
        if name in ("all_codes", "codes") and "format" in value_class:
            return np.arange(1 << _code_bits(value_class["format"]), dtype=np.uint64).astype(d.bit_dtype)
        if name in ("all_codes", "wide"):
            return np.arange(min(1 << d.bits, 1 << 16), dtype=np.uint64).astype(d.bit_dtype)
        if name == "special":
            return np.array([0, 1, (1 << d.bits) - 1, 1 << (d.bits - 1), (1 << (d.bits - 1)) - 1], dtype=d.bit_dtype)
        return np.array([0, 1, 2, 3, 7], dtype=d.bit_dtype)
    fmt = FORMATS.get(value_class.get("format", ""))
    if name in ("normal", *ARRAY_CLASSES):
        scale = float(value_class.get("scale", 1.0))
        values = np.array([0.0, 1.0, -1.0, 0.5, 1.5, -2.75, 3.0, 0.1, -0.3, 10.0, 100.0, -1000.0], dtype=np.float64)
        return _float_bits(values * scale, dtype)
    if name == "wide" or (name == "all_codes" and d.bits <= 16):
        if d.bits <= 16:
            return np.arange(1 << d.bits, dtype=np.uint32).astype(d.bit_dtype)
        exp_bits, man_bits = _FLOAT_LAYOUT[dtype]
        exponents = np.arange((1 << exp_bits) - 1, dtype=np.uint64) << np.uint64(man_bits)
        patterns = np.concatenate([exponents, exponents | np.uint64(1 << (d.bits - 1)), exponents | np.uint64(1)])
        return patterns.astype(d.bit_dtype)
    if name == "special":
        return _special_values(dtype, fmt)
    if name in ("codes", "midpoints") and value_class.get("format") in INTEGER_CODE_BITS:
        values = _integer_values(str(value_class["format"]), midpoints=name == "midpoints")
        bits = _float_bits(values, dtype)
        return _with_neighbours(bits, dtype) if name == "midpoints" else bits
    if name == "codes":
        return _float_bits(_codes_values(_format_of(value_class, name)), dtype)
    if name == "midpoints":
        return _with_neighbours(_float_bits(_midpoint_values(_format_of(value_class, name)), dtype), dtype)
    raise ValueError(f"unknown value class {name!r}")


def element_strategy(value_class: Mapping[str, Any], dtype: str) -> st.SearchStrategy[int]:
    """Hypothesis strategy of single bit patterns (Python ints) for random cases (built once per class and dtype)."""
    return _element_strategy(_class_key(value_class), dtype)


def _pooled_bits(value_class: Mapping[str, Any], dtype: str) -> np.ndarray:
    """The distinct patterns of a class's pool that random cases pick from (at most 4,096, smallest first)."""
    return np.unique(boundary_pool(value_class, dtype))[:4096]


@functools.lru_cache(maxsize=1024)
def _element_strategy(key: tuple[tuple[str, Any], ...], dtype: str) -> st.SearchStrategy[int]:
    value_class = dict(key)
    name = value_class["class"]
    d = get_dtype(dtype)
    if d.kind != "float" and "format" in value_class:
        return st.integers(0, (1 << _code_bits(value_class["format"])) - 1)
    if name == "wide" or d.kind != "float":
        return st.integers(0, (1 << d.bits) - 1) if d.kind != "bool" else st.integers(0, 1)
    if name in ("normal", *ARRAY_CLASSES):
        scale = float(value_class.get("scale", 1.0))
        floats = st.floats(-1e4 * scale, 1e4 * scale, width=32, allow_subnormal=False)
        return floats.map(lambda v: int(_float_bits(np.array([v]), dtype)[0]))
    return st.sampled_from([int(b) for b in _pooled_bits(value_class, dtype)])


Sampler = Callable[[np.random.Generator, int], np.ndarray]


def bulk_sampler(value_class: Mapping[str, Any], dtype: str) -> Sampler:
    """``sample(rng, n)``: ``n`` bit patterns (uint64) of one class, drawn by NumPy in one call.

    The bulk of a large random array comes from here, driven by one hypothesis-drawn seed; it follows
    the class as ``element_strategy`` does: the same integer ranges, the pool's patterns, and for
    ``normal`` classes finite values within +-1e4 * scale spread over the magnitudes (log-uniform
    from 2^-14, some uniform, small integers and zeros) rather than one flat distribution.
    """
    return _bulk_sampler(_class_key(value_class), dtype)


@functools.lru_cache(maxsize=1024)
def _bulk_sampler(key: tuple[tuple[str, Any], ...], dtype: str) -> Sampler:
    value_class = dict(key)
    name = value_class["class"]
    d = get_dtype(dtype)
    if d.kind != "float":
        top = (1 << _code_bits(value_class["format"])) if "format" in value_class else (1 << d.bits)
        top = 2 if d.kind == "bool" else top
        return lambda rng, n: rng.integers(0, top, size=n, dtype=np.uint64)
    if name == "wide":
        return lambda rng, n: rng.integers(0, 1 << d.bits, size=n, dtype=np.uint64)
    if name in ("normal", *ARRAY_CLASSES):
        scale = float(value_class.get("scale", 1.0))

        def normal(rng: np.random.Generator, n: int) -> np.ndarray:
            kind = rng.integers(0, 8, size=n)
            magnitude = np.exp2(rng.uniform(-14.0, np.log2(1e4), size=n))
            magnitude = np.where(kind == 4, rng.uniform(0.0, 1e4, size=n), magnitude)
            magnitude = np.where(kind == 5, rng.integers(0, 17, size=n).astype(np.float64), magnitude)
            magnitude = np.where(kind == 6, 0.0, magnitude)
            values = np.where(rng.integers(0, 2, size=n) == 1, -magnitude, magnitude) * scale
            return _float_bits(values.astype(np.float32).astype(np.float64), dtype).astype(np.uint64)

        return normal
    pooled = _pooled_bits(value_class, dtype).astype(np.uint64)
    return lambda rng, n: pooled[rng.integers(0, len(pooled), size=n)]


def apply_block_class(
    bits: np.ndarray, dtype: str, value_class: Mapping[str, Any], rng: np.random.Generator
) -> np.ndarray:
    """Zero whole blocks, or put one large outlier in each block, along the last axis; or (``zeros``) make every
    element +-0; or (``scale_decision_points``) build NVFP4 block amaxes on E4M3 midpoints; or (``lone_extreme``)
    plant one value of larger magnitude than every other finite element of the array at ``at`` (one of
    ``EXTREME_PLACES``, drawn when the class names none).

    ``lone_extreme`` is for reductions (a per-tensor amax): a tensor filled from a small palette repeats its
    largest value all over, so a reduction that reads only its first chunk still sees it; a value that
    exists once, late in the tensor, is seen only by a reduction that reads everything.
    """
    name = value_class["class"]
    if name not in ARRAY_CLASSES or bits.ndim == 0 or bits.size == 0:
        return bits
    if name == "lone_extreme":
        return _lone_extreme(bits, dtype, str(value_class.get("at") or rng.choice(EXTREME_PLACES)), rng)
    if name == "scale_decision_points":
        return _scale_decision_points(bits, dtype, value_class, rng)
    if name == "zeros":  # every element +-0 (drawn signs): a degenerate all-zero input, amax 0
        if get_dtype(dtype).kind != "float":
            return np.zeros_like(bits)
        sign = bits.dtype.type(1 << (get_dtype(dtype).bits - 1))
        return np.where(rng.integers(0, 2, size=bits.shape) == 1, sign, bits.dtype.type(0)).astype(bits.dtype)
    block = int(value_class.get("block", 32))
    out = bits.copy()
    width = out.shape[-1]
    for start in range(0, width, block):
        stop = min(start + block, width)
        view = out[..., start:stop]
        if name == "zero_blocks":
            chosen = rng.random(view.shape[:-1]) < 0.5
            view[chosen] = 0
        else:
            where = rng.integers(0, stop - start, size=view.shape[:-1])
            outlier = _float_bits(np.array([1e4 * float(value_class.get("scale", 1.0))]), dtype)[0]
            np.put_along_axis(view, where[..., None], outlier, axis=-1)
    return out


def _lone_extreme(bits: np.ndarray, dtype: str, at: str, rng: np.random.Generator) -> np.ndarray:
    if get_dtype(dtype).kind != "float":
        return bits
    flat = bits.reshape(-1).copy()
    index = {"last": flat.size - 1, "middle": flat.size // 2, "second_chunk": min(4096, flat.size - 1)}[at]
    with np.errstate(invalid="ignore"):  # NaN elements are data; they are left out below
        values = np.abs(bits_to_carrier(flat, dtype).astype(np.float64))
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 0.0
    exp_bits, man_bits = _FLOAT_LAYOUT[dtype]
    largest = (2.0 - 2.0**-man_bits) * 2.0 ** ((1 << (exp_bits - 1)) - 1)
    magnitude = min(max(2.0 * top, 1.0), largest)
    extreme = _float_bits(np.array([magnitude if rng.integers(0, 2) else -magnitude]), dtype)[0]
    flat[index] = extreme
    return flat.reshape(bits.shape)


# -- NVFP4 block scales on their E4M3 rounding decision points ------------------------------------------------
NVFP4_RULES = ("te", "torchao", "torchao_cuda")
"""The ``rule`` a ``scale_decision_points`` class aims at: quant.nvfp4's ``scale_rule`` values."""
DECISION_POINT_TENSOR_AMAX = 1000.37
"""The float32 tensor amax of ``scale_decision_points``: a full mantissa, so ``S_enc = fl32(2688 / A)`` is not a
power of two and the rules' float32 associations round differently on some blocks."""
DECISION_POINT_OFFSETS = (-3, -2, -1, 0, 1, 2, 3)
"""Input-dtype ulps either side of ``fl32(mu / c)`` that ``scale_decision_points`` puts the block amaxes at."""


def _e4m3_midpoints() -> np.ndarray:
    """The 126 midpoints between consecutive positive finite E4M3 values (0 .. 448), ascending."""
    subnormal = np.arange(8) * 2.0**-9
    normal = np.array([(1 + m / 8) * 2.0**e for e in range(-6, 9) for m in range(8)])
    values = np.concatenate([subnormal, normal[normal <= 448.0]])
    return (values[:-1] + values[1:]) / 2


def _nvfp4_block_multiplier(rule: str, amax: np.float32) -> float:
    """``c`` with block target ``~ b * c`` under ``rule`` (quant.nvfp4's ``scale_rule``) for tensor amax ``amax``:
    te ``fl32(fl32(2688 / A) * fl32(1/6))``; torchao and torchao_cuda ``1 / (6 * pts)`` with ``pts`` their
    float32 per-tensor scale (``fl32(A / 2688)``, ``fl32(A * fl32(1/2688))``)."""
    f32 = np.float32
    if rule == "te":
        return float(f32(f32(2688) / amax) * f32(1 / 6))
    if rule == "torchao":
        return 1.0 / (6.0 * float(amax / f32(2688)))
    if rule == "torchao_cuda":
        return 1.0 / (6.0 * float(amax * f32(1 / 2688)))
    raise ValueError(f"scale_decision_points: rule={rule!r} is not one of {NVFP4_RULES}")


def _scale_decision_points(
    bits: np.ndarray, dtype: str, value_class: Mapping[str, Any], rng: np.random.Generator
) -> np.ndarray:
    """An NVFP4 ``[M, K]`` input (``axis: 1``, the default: 1x16 blocks along rows; ``axis: 0``: along columns,
    the columnwise operand's blocks) whose block amaxes put the block-scale target ``b * c`` within a few ulps
    of each E4M3 rounding midpoint ``mu``, so that every float32 association of the scale formula is tested
    where it matters (random search essentially never gets there).

    float32: the tensor amax is ``DECISION_POINT_TENSOR_AMAX`` (once, in the last block), ``c`` the
    ``rule``'s multiplier (``_nvfp4_block_multiplier``) and the block amaxes ``fl32(mu / c)`` +-
    ``DECISION_POINT_OFFSETS`` float32 ulps.  16-bit inputs cannot reach a float32 ulp of ``mu / c`` for a
    full-mantissa ``c``: there the tensor amax is 448 (``S_enc = 6`` exactly, ``c = 1`` under te) and the
    block amaxes are ``mu`` +- the offsets in the input dtype's ulps (exact ties at 0).  Blocks cycle
    through (midpoint, offset) from a drawn start; each block's other 15 elements are ``b * i / 16`` with
    drawn signs, and its amax sits at a drawn place.
    """
    if get_dtype(dtype).kind != "float" or bits.ndim != 2 or bits.shape[-1 if value_class.get("axis", 1) else 0] % 16:
        return bits
    rule = str(value_class.get("rule", "te"))
    axis = int(value_class.get("axis", 1))
    shape = bits.shape if axis == 1 else bits.shape[::-1]
    blocks = shape[0] * shape[1] // 16
    midpoints = _e4m3_midpoints()
    if dtype == "float32":
        amax = np.float32(DECISION_POINT_TENSOR_AMAX)
        centres = (midpoints / _nvfp4_block_multiplier(rule, amax)).astype(np.float32)
    else:
        amax = np.float32(448.0)
        centres = midpoints.astype(np.float32)
    combos = [(c, k) for c in centres for k in DECISION_POINT_OFFSETS]
    start = int(rng.integers(0, len(combos)))
    amaxes = np.empty(blocks, np.float64)
    for i in range(blocks):
        centre, k = combos[(start + i) % len(combos)]
        amaxes[i] = _step_ulps(float(centre), k, dtype)
    fractions = np.arange(16) / 16.0
    values = np.empty((blocks, 16), np.float64)
    for i in range(blocks):
        order = rng.permutation(16)
        values[i] = amaxes[i] * np.where(order == 15, 1.0, fractions[order])
    values *= np.where(rng.integers(0, 2, size=values.shape) == 1, -1.0, 1.0)
    values[-1, int(rng.integers(0, 16))] = float(amax) * (1 if rng.integers(0, 2) else -1)
    out = _float_bits(values.reshape(shape), dtype).astype(bits.dtype)
    return out if axis == 1 else np.ascontiguousarray(out.T)


def _step_ulps(value: float, k: int, dtype: str) -> float:
    """``value`` rounded to ``dtype`` (positive), moved ``k`` ulps of ``dtype`` (up for k > 0)."""
    code = int(_float_bits(np.array([value]), dtype)[0]) + k
    return float(bits_to_carrier(np.array([code], get_dtype(dtype).bit_dtype), dtype).astype(np.float64)[0])
