"""Build conformance cases from a spec: boundary-first, then hypothesis.

``boundary_cases`` yields the deterministic cases (every value class's pool, for every
input dtype and every boundary value of range parameters, on boundary shapes: empty,
smallest, ragged); ``case_strategy`` is the hypothesis strategy for random cases, whose
shrinking reduces shapes towards the smallest valid dims and values towards simple ones.
Dims honour ``min``/``max``/``multiple_of`` (expressions over params and earlier dims) and
the spec's ``constraints``.  Member params (a list of one int per member of a grouped tensor)
are drawn all equal or each on its own; boundary cases give them the smallest members, all
members equal, ragged members (an empty one among them where the range allows) and the
mixtures of those across member params, so that every way the members' shapes can vary is run.
"""

from __future__ import annotations

import functools
import itertools
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import hypothesis.strategies as st
import numpy as np
from hypothesis import assume

from conformance.carriers import bits_to_carrier, get_dtype
from conformance.case import Case, TensorBits
from conformance.expr import evaluate
from conformance.registry import Spec
from conformance.values import (
    ARRAY_CLASSES,
    EXTREME_PLACES,
    apply_block_class,
    boundary_pool,
    bulk_sampler,
    element_strategy,
    resolve_class,
    values_to_bits,
)

__all__ = ["boundary_cases", "case_strategy", "input_dtypes", "literal_case", "shape_of"]

DEFAULT_MAX_DIM = 16
BOUNDARY_MAX_NUMEL = 1 << 17


def input_dtypes(decl: Mapping[str, Any], params: Mapping[str, Any]) -> list[str]:
    """An input's ``dtypes``, each ``$param`` replaced by the dtype that parameter names."""
    return [str(params[d[1:]]) if d.startswith("$") else d for d in decl["dtypes"]]


def _dim_bounds(spec: Spec, name: str, scope: Mapping[str, Any]) -> tuple[int, int, int]:
    d = spec.dims[name]
    lo = int(evaluate(spec.resolve(d.get("min", 0), scope), scope))
    hi = int(evaluate(spec.resolve(d.get("max", DEFAULT_MAX_DIM), scope), scope))
    step = int(evaluate(spec.resolve(d.get("multiple_of", 1), scope), scope))
    if step <= 0:
        raise ValueError(f"{spec.contract}: dims.{name}.multiple_of evaluated to {step}, expected > 0")
    return lo, hi, step


def _valid_values(lo: int, hi: int, step: int) -> list[int]:
    first = -(-lo // step) * step
    return list(range(first, hi + 1, step))


def shape_of(spec: Spec, input_name: str, dims: Mapping[str, Any]) -> tuple[int, ...]:
    shape: list[int] = []
    for entry in spec.inputs[input_name]["shape"]:
        if isinstance(entry, int):
            shape.append(entry)
        elif entry.startswith("*"):
            shape.extend(dims[entry[1:]])
        else:
            shape.append(int(dims[entry]))
    return tuple(shape)


def _scalar_scope(params: Mapping[str, Any], dims: Mapping[str, Any]) -> dict[str, Any]:
    return {**params, **{k: v for k, v in dims.items() if not isinstance(v, tuple)}}


def _constraints_hold(spec: Spec, params: Mapping[str, Any], dims: Mapping[str, Any]) -> bool:
    scope = _scalar_scope(params, dims)
    shapes = {name: shape_of(spec, name, dims) for name in spec.active_inputs(params)}
    return all(bool(evaluate(spec.resolve(c, scope), scope, shapes)) for c in spec.constraints)


def _member_choices(spec: Spec, name: str, params: Mapping[str, Any]) -> tuple[int, list[int]]:
    """A member param's count and its valid values (``range`` and ``multiple_of``) under ``params``."""
    p = spec.params[name]
    assert p.members is not None and p.range is not None
    count = int(evaluate(p.members, params))
    step = int(evaluate(p.multiple_of, params))
    if count < 0 or step <= 0:
        problem = f"members={count} and multiple_of={step}, expected >= 0 and > 0"
        raise ValueError(f"{spec.contract}: params.{name}: {problem}")
    return count, _valid_values(p.range[0], p.range[1], step)


def _seeded_rng(*parts: Any) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


# Strategies are built once per set of arguments: hypothesis validates a strategy on its first draw, and a
# new one per draw made that validation a third of the cost of a case.
_SEEDS = st.integers(0, 2**32 - 1)


@functools.lru_cache(maxsize=4096)
def _integers(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


@functools.lru_cache(maxsize=4096)
def _sampled(values: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from(values)


@functools.lru_cache(maxsize=4096)
def _fixed_lists(elements: st.SearchStrategy[Any], size: int) -> st.SearchStrategy[list[Any]]:
    return st.lists(elements, min_size=size, max_size=size)


@functools.lru_cache(maxsize=4096)
def _overrides(elements: st.SearchStrategy[int], size: int) -> st.SearchStrategy[list[tuple[int, int]]]:
    return st.lists(st.tuples(_integers(0, size - 1), elements), max_size=BULK_OVERRIDES)


# -- random cases -------------------------------------------------------------------------------
@st.composite
def _dims(draw: st.DrawFn, spec: Spec, params: Mapping[str, Any]) -> dict[str, Any]:
    dims: dict[str, Any] = {}
    for name, d in spec.dims.items():
        lo, hi, step = _dim_bounds(spec, name, _scalar_scope(params, dims))
        choices = _valid_values(lo, hi, step)
        assume(choices)
        sizes = _sampled(tuple(choices))
        if "rank" in d:
            rank = draw(_integers(*d["rank"]), label=f"rank of {name}")
            dims[name] = tuple(draw(_fixed_lists(sizes, rank), label=name))
        else:
            dims[name] = draw(sizes, label=name)
    return dims


ELEMENT_DRAW_MAX = 8
"""Arrays up to this many elements are drawn element by element; larger ones in bulk (``_bulk_array``)."""
BULK_OVERRIDES = 3
"""The most elements of a bulk-drawn array that hypothesis draws one by one (and shrinks) on top of the bulk."""


def case_strategy(spec: Spec, fixed: Mapping[str, Any]) -> st.SearchStrategy[Case]:
    """Random cases with the finite params ``fixed``; range params, dims and values drawn.

    The strategy is built once per row; what a draw needs per input and dtype (its value classes, their
    element strategies and bulk samplers) is built on first use and kept.  Arrays of up to
    ``ELEMENT_DRAW_MAX`` elements are drawn element by element, so hypothesis shrinks every value;
    larger ones are drawn in bulk (``_bulk_array``): a seed drives NumPy over the value classes, and up
    to ``BULK_OVERRIDES`` elements at drawn positions come from hypothesis on top.

    An input declaring ``palette: P`` draws arrays of more than ``P`` elements as ``P`` values (in bulk,
    as above) and a seed, filling the array with seeded picks of those values.
    """
    prepared: dict[tuple[str, str, str], _InputDraw] = {}

    def input_draw(name: str, decl: Mapping[str, Any], dtype: str, params: Mapping[str, Any]) -> _InputDraw:
        classes = [resolve_class(vc, params) for vc in decl["values"]]
        key = (name, dtype, repr(classes))
        if key not in prepared:
            prepared[key] = _InputDraw(classes, dtype)
        return prepared[key]

    @st.composite
    def build(draw: st.DrawFn) -> Case:
        params = dict(fixed)
        for p in spec.params.values():
            if p.members is not None:
                count, choices = _member_choices(spec, p.name, params)
                assume(choices)
                if draw(st.booleans(), label=f"{p.name} all equal"):
                    params[p.name] = (draw(_sampled(tuple(choices)), label=p.name),) * count
                else:
                    each = _fixed_lists(_sampled(tuple(choices)), count)
                    params[p.name] = tuple(draw(each, label=p.name))
            elif not p.finite:
                assert p.range is not None
                params[p.name] = draw(_integers(*p.range), label=p.name)
        dims = draw(_dims(spec, params))
        assume(_constraints_hold(spec, params, dims))
        inputs = {}
        for name, decl in spec.active_inputs(params).items():
            dtype = draw(_sampled(tuple(input_dtypes(decl, params))), label=f"{name}.dtype")
            how = input_draw(name, decl, dtype, params)
            shape = shape_of(spec, name, dims)
            size, palette = int(np.prod(shape)), int(decl.get("palette", 0))
            flat: Any
            if palette and size > palette:  # draw `palette` values, then fill the array with seeded picks of them
                values = _bulk_array(draw, how, palette, f"{name} palette")
                picks = np.random.default_rng(draw(_SEEDS, label=f"{name} seed")).integers(0, palette, size)
                flat = np.array(values, dtype=np.uint64)[picks]
            elif size > ELEMENT_DRAW_MAX:
                flat = _bulk_array(draw, how, size, name)
            else:
                flat = draw(_fixed_lists(how.elements, size), label=name)
            array = np.array(flat, dtype=np.uint64).astype(get_dtype(dtype).bit_dtype).reshape(shape)
            block_class = draw(how.block_class)
            if block_class is not None:
                array = apply_block_class(array, dtype, block_class, _seeded_rng(array.tobytes()))
            inputs[name] = TensorBits(dtype, array)
        return Case(spec.contract, params, inputs)

    return build()


class _InputDraw:
    """What random cases draw one input of one dtype from: its classes' element strategies, bulk samplers
    and block classes, built once."""

    def __init__(self, classes: list[dict[str, Any]], dtype: str):
        self.elements = st.one_of([element_strategy(vc, dtype) for vc in classes])
        self.samplers = [bulk_sampler(vc, dtype) for vc in classes]
        self.block_class = st.sampled_from([None, *[vc for vc in classes if vc["class"] in ARRAY_CLASSES]])


def _bulk_array(draw: st.DrawFn, how: _InputDraw, size: int, name: str) -> np.ndarray:
    """``size`` bit patterns: each element's class and value from a NumPy generator seeded by one draw, then
    up to ``BULK_OVERRIDES`` hypothesis-drawn elements at drawn positions (shrinking takes the seed to 0 and
    the overrides to none or to simple values)."""
    rng = np.random.default_rng(draw(_SEEDS, label=f"{name} seed"))
    which = rng.integers(0, len(how.samplers), size=size)
    flat = np.zeros(size, dtype=np.uint64)
    for i, sample in enumerate(how.samplers):
        chosen = np.flatnonzero(which == i)
        if chosen.size:
            flat[chosen] = sample(rng, chosen.size)
    overrides = _overrides(how.elements, size)
    for index, bits in draw(overrides, label=f"{name} overrides"):
        flat[index] = bits
    return flat


# -- boundary cases -------------------------------------------------------------------------------
def _boundary_dims(spec: Spec, params: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Empty, smallest non-empty and ragged (largest valid below the max) dim assignments."""
    picks: list[dict[str, Any]] = []
    for mode in ("min", "min_positive", "ragged"):
        dims: dict[str, Any] = {}
        for name, d in spec.dims.items():
            lo, hi, step = _dim_bounds(spec, name, _scalar_scope(params, dims))
            choices = _valid_values(lo, hi, step) or [lo]
            positive = [c for c in choices if c > 0] or choices
            size = {"min": choices[0], "min_positive": positive[0], "ragged": positive[min(len(positive) - 1, 2)]}[mode]
            if "rank" in d:
                rank = d["rank"][1] if mode == "ragged" else d["rank"][0]
                dims[name] = tuple([size] * rank)
            else:
                dims[name] = size
        if dims not in picks and _constraints_hold(spec, params, dims):
            picks.append(dims)
    return picks


def _companion(
    spec: Spec, name: str, params: Mapping[str, Any], dtype: str, shape: tuple[int, ...], label: str
) -> TensorBits:
    """A non-leading input of a boundary case: its first value class, seeded, of ``shape``."""
    vc = resolve_class(spec.inputs[name]["values"][0], params)
    rng = _seeded_rng(spec.contract, label, name, shape)
    pool = boundary_pool(vc, dtype)
    if vc["class"] == "wide" and get_dtype(dtype).kind in ("int", "uint"):
        bits = get_dtype(dtype).bits
        array = rng.integers(0, 1 << bits, size=shape, dtype=np.uint64).astype(get_dtype(dtype).bit_dtype)
    else:
        array = rng.permutation(np.resize(pool, int(np.prod(shape)))).reshape(shape)
    return TensorBits(dtype, array)


def _amax_companion(x: TensorBits, companion: TensorBits) -> TensorBits:
    """A float32 companion filled with max |x| over the non-NaN elements of ``x``: a value class's
    ``amax_inputs`` (a given amax that agrees with the data, so the class's construction holds there too)."""
    if companion.dtype != "float32" or get_dtype(x.dtype).kind != "float":
        return companion
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(bits_to_carrier(x.bits, x.dtype).astype(np.float32))
    finite = magnitude[~np.isnan(magnitude)]
    amax = np.float32(finite.max()) if finite.size else np.float32(0)
    return TensorBits("float32", np.full(companion.bits.shape, amax, np.float32).view(np.uint32))


def _first_values(vc: Mapping[str, Any]) -> list[tuple[dict[str, float], str]]:
    """A class's ``first`` (``{input: [v, ...]}``): one boundary case per listed value of each input, that
    input's first element set to it (degenerate state: a history whose newest entry is 0, -0, negative)."""
    firsts = [
        ({name: value}, f"[{name}[0]={value!r}]") for name, values in vc.get("first", {}).items() for value in values
    ]
    return firsts or [({}, "")]


def _with_first(companion: TensorBits, value: float) -> TensorBits:
    """``companion`` with its first element set to ``value`` (a float input; its sign kept for -0.0)."""
    bits = companion.bits.copy()
    if bits.size:
        bits.reshape(-1)[0] = values_to_bits([value], companion.dtype)[0]
    return TensorBits(companion.dtype, bits)


def _boundary_members(spec: Spec, params: Mapping[str, Any]) -> list[dict[str, tuple[int, ...]]]:
    """Member-param assignments of boundary cases: all smallest, and each param all equal or ragged.

    *All equal* repeats the smallest positive value; *ragged* cycles through that value, the
    smallest one (an empty member when the range starts at 0) and the third positive one.  With
    two member params (first and last dims) the mixtures give all four ways a grouped tensor's
    shapes vary: none, first only, last only, both.
    """
    names = spec.member_params
    if not names:
        return [{}]
    shapes: dict[str, dict[str, tuple[int, ...]]] = {}
    for name in names:
        count, choices = _member_choices(spec, name, params)
        positive = [c for c in choices if c > 0] or choices or [0]
        pattern = [positive[0], (choices or [0])[0], positive[min(len(positive) - 1, 2)]]
        shapes[name] = {
            "smallest": ((choices or [0])[0],) * count,
            "equal": (positive[0],) * count,
            "ragged": tuple(pattern[i % len(pattern)] for i in range(count)),
        }
    assignments = [{name: shapes[name]["smallest"] for name in names}]
    for modes in itertools.product(("equal", "ragged"), repeat=len(names)):
        assignments.append({name: shapes[name][mode] for name, mode in zip(names, modes, strict=True)})
    return [a for i, a in enumerate(assignments) if a not in assignments[:i]]


def boundary_cases(spec: Spec, fixed: Mapping[str, Any]) -> Iterator[Case]:
    """Deterministic cases, run before any random one.

    The leading input runs through every value class of every dtype (a class's ``when``, an expression
    over the params, limits its boundary cases to the rows where it holds); other inputs get
    deterministic companions (their first value class, seeded from the case label).
    """
    range_params = [p for p in spec.params.values() if not p.finite and p.members is None]
    assignments = (
        {**ranged, **members}
        for combo in itertools.product(*(p.boundary_values() for p in range_params))
        for ranged in [{**fixed, **dict(zip((p.name for p in range_params), combo, strict=True))}]
        for members in _boundary_members(spec, ranged)
    )
    for params in assignments:
        active = spec.active_inputs(params)
        first_input = next(iter(active))
        for dtype in input_dtypes(active[first_input], params):
            for vc in [resolve_class(v, params) for v in active[first_input]["values"]]:
                if "when" in vc and not evaluate(vc["when"], params):
                    continue  # a class whose construction means something in some rows only
                label = f"boundary:{vc['class']}/{dtype}"
                if spec.elementwise:
                    pool = boundary_pool(vc, dtype)
                    inputs = {first_input: TensorBits(dtype, pool)}
                    for name, decl in list(active.items())[1:]:
                        inputs[name] = _companion(spec, name, params, input_dtypes(decl, params)[0], pool.shape, label)
                    yield Case(spec.contract, params, inputs, label)
                    continue
                for (dims, place), (first, first_label) in itertools.product(
                    _class_shapes(spec, params, vc), _first_values(vc)
                ):
                    shape = shape_of(spec, first_input, dims)
                    if int(np.prod(shape)) > BOUNDARY_MAX_NUMEL:
                        continue
                    pool = boundary_pool(vc, dtype)
                    array = np.resize(pool, int(np.prod(shape))).reshape(shape)
                    placed = {**vc, "at": place} if place else vc
                    array = apply_block_class(array, dtype, placed, _seeded_rng(spec.contract, label, dims))
                    inputs = {first_input: TensorBits(dtype, array)}
                    for name, decl in list(active.items())[1:]:
                        dtypes = input_dtypes(decl, params)
                        dt = dtype if dtype in dtypes else dtypes[0]
                        inputs[name] = _companion(spec, name, params, dt, shape_of(spec, name, dims), label)
                        if name in vc.get("amax_inputs", ()):
                            inputs[name] = _amax_companion(inputs[first_input], inputs[name])
                        if name in first:
                            inputs[name] = _with_first(inputs[name], first[name])
                    where = f"@{place}" if place else ""
                    yield Case(spec.contract, params, inputs, f"{label}{where}{first_label}/{_dims_label(dims)}")


def _class_shapes(
    spec: Spec, params: Mapping[str, Any], vc: Mapping[str, Any]
) -> list[tuple[dict[str, Any], str | None]]:
    """The dims a value class's boundary cases take, each with where ``lone_extreme`` plants its value.

    A class with ``dims`` (a size class) takes those, the other dims at their smallest positive size: one
    case per place of ``EXTREME_PLACES`` (or its own ``at``).  Its dims may exceed the ``max`` that random
    cases draw up to: they are sized to span several chunks of a kernel's reduction.  Other classes take the
    empty, smallest and ragged dims of ``_boundary_dims``.
    """
    if "dims" not in vc:
        return [(dims, None) for dims in _boundary_dims(spec, params)]
    base = _boundary_dims(spec, params)
    positive = next((d for d in base if all(v != 0 for v in d.values() if not isinstance(v, tuple))), base[-1])
    dims = {**positive, **{k: int(v) for k, v in vc["dims"].items()}}
    if not _constraints_hold(spec, params, dims):
        return []
    places = [vc["at"]] if "at" in vc else list(EXTREME_PLACES) if vc["class"] == "lone_extreme" else [None]
    return [(dims, place) for place in places]


def _dims_label(dims: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in dims.items())


def literal_case(spec: Spec, params: Mapping[str, Any], inputs: Mapping[str, Mapping[str, Any]], label: str) -> Case:
    """A case from a spec's ``examples``/``invalid`` entry (``values`` or exact ``bits``).

    A literal with a ``shape`` and a single value fills the whole shape with it (large buffers).
    """
    tensors = {}
    for name, lit in inputs.items():
        d = get_dtype(lit["dtype"])
        if "bits" in lit:
            bits = np.array(lit["bits"], dtype=np.uint64).astype(d.bit_dtype)
        else:
            bits = values_to_bits(lit["values"], lit["dtype"])
        if "shape" in lit:
            bits = np.full(lit["shape"], bits[0], dtype=bits.dtype) if bits.size == 1 else bits.reshape(lit["shape"])
        tensors[name] = TensorBits(lit["dtype"], bits)
    return Case(spec.contract, dict(params), tensors, label)
