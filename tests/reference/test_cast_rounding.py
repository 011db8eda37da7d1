"""Rounding modes of ``cast.fp8`` / ``cast.fp6`` / ``cast.fp4``: ``rne``, ``rtz`` and ``stochastic``.

The second oracle here is an independent float64 model: it finds the two representable
magnitudes around ``|x|`` by searching the format's decode table (plus one virtual code past
the largest, where overflow starts), takes the exact fraction of the way from the lower to the
upper one (float64 holds it exactly) and picks one of them per rounding mode.  The reference
works on bit fields instead; both must give the same code for every input, and do.

Named difference (tested below): TransformerEngine evaluates its software stochastic rounding
``floor((|x| + u*step) / step)`` in float32, where the sum can round up to a full step for a
float32 ``|x|`` far below the smallest subnormal; the contract evaluates it exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reference import cast, decode
from reference.cast import FP4_FORMATS, FP6_FORMATS, FP8_FORMATS, OVERFLOW_POLICIES
from reference.formats import get_format

FORMATS = (*FP8_FORMATS, *FP6_FORMATS, *FP4_FORMATS)
ROUNDINGS = {"rne": None, "rtz": None, "stochastic8": np.uint8, "stochastic32": np.uint32}
"""Rounding variants under test: name -> dtype of the random bits."""
OVERFLOW_CODES = {
    ("float8_e4m3fn", "saturate"): 0x7E,
    ("float8_e4m3fn", "nonsaturating"): 0x7F,
    ("float8_e5m2", "saturate"): 0x7B,
    ("float8_e5m2", "nonsaturating"): 0x7C,
    ("float8_e4m3fnuz", "saturate"): 0x7F,
    ("float8_e4m3fnuz", "nonsaturating"): 0x80,
    ("float8_e5m2fnuz", "saturate"): 0x7F,
    ("float8_e5m2fnuz", "nonsaturating"): 0x80,
    ("float6_e2m3fn", "saturate"): 0x1F,
    ("float6_e3m2fn", "saturate"): 0x1F,
    ("float4_e2m1fn", "saturate"): 0x07,
}
"""Unsigned code of overflow and ±Inf, written out from the format definitions."""
EXAMPLES = settings(max_examples=40, deadline=None, derandomize=True)


def run_cast(
    x: np.ndarray, name: str, rounding: str, random_bits: np.ndarray | None = None, overflow: str = "saturate"
) -> np.ndarray:
    """The reference cast of ``name`` (fp6/fp4 are always saturating; their NaN is +max)."""
    if name in FP8_FORMATS:
        return cast.fp8(x, format=name, overflow=overflow, rounding=rounding, random_bits=random_bits)["codes"]
    function = cast.fp6 if name in FP6_FORMATS else cast.fp4
    return function(x, format=name, rounding=rounding, random_bits=random_bits)["codes"]


def random_bits_for(x: np.ndarray, dtype: type | None, seed: int = 0) -> np.ndarray | None:
    if dtype is None:
        return None
    high = 1 << (8 * np.dtype(dtype).itemsize)
    return np.random.default_rng(seed).integers(0, high, size=x.shape, dtype=np.uint64).astype(dtype)


def oracle(x: np.ndarray, name: str, rounding: str, random_bits: np.ndarray | None, overflow: str) -> np.ndarray:
    """Codes of non-NaN ``x`` by the float64 model of the module docstring."""
    fmt = get_format(name)
    magnitudes = fmt.finite_magnitudes  # ascending; the index of a magnitude is its unsigned code
    grid = np.append(magnitudes, 2 * magnitudes[-1] - magnitudes[-2])  # a virtual code where overflow starts
    top = len(magnitudes)
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises the invalid flag
        wide = np.abs(x.astype(np.float64))
    finite = np.isfinite(wide)
    a = np.where(finite, wide, 0.0)
    lower = np.minimum(np.searchsorted(grid, a, side="right") - 1, top)
    upper = np.minimum(lower + 1, top)
    spacing = np.where(upper > lower, grid[upper] - grid[lower], 1.0)
    fraction = (a - grid[lower]) / spacing  # exact: a power-of-two spacing, a difference of float32 values
    if rounding == "rne":
        up = (fraction > 0.5) | ((fraction == 0.5) & (lower % 2 == 1))
    elif rounding == "rtz":
        up = np.zeros(a.shape, dtype=bool)
    else:
        assert random_bits is not None
        k = 8 * random_bits.dtype.itemsize
        up = np.floor(fraction * 2.0**k) + random_bits.astype(np.float64) >= 2.0**k
    index = lower + up
    overflowed = (index >= top) | ~finite
    overflow_key = (name, overflow if name in FP8_FORMATS else "saturate")
    code = np.where(overflowed, OVERFLOW_CODES[overflow_key], index)
    signed = np.signbit(x) & ~(name.endswith("fnuz") & ((code == 0) | (code == 0x80)))
    return (code | np.where(signed, fmt.sign_mask, 0)).astype(np.uint8)


def _rounding_mode(variant: str) -> str:
    return "stochastic" if variant.startswith("stochastic") else variant


# -- the float64 model agrees everywhere -------------------------------------------------------------
@pytest.mark.parametrize("variant", sorted(ROUNDINGS))
@pytest.mark.parametrize("name", FORMATS)
def test_matches_float64_model_on_wide_inputs(
    name: str, variant: str, wide_x: np.ndarray, assert_codes_equal: Callable[..., None]
) -> None:
    check_against_model(wide_x, name, variant, assert_codes_equal)


@pytest.mark.parametrize("variant", sorted(ROUNDINGS))
@pytest.mark.parametrize("name", FORMATS)
def test_matches_float64_model_on_boundaries(
    name: str, variant: str, boundary_x: Callable[[str], np.ndarray], assert_codes_equal: Callable[..., None]
) -> None:
    x = np.tile(boundary_x(name), 8)  # each boundary value with 8 different random numbers
    check_against_model(x, name, variant, assert_codes_equal)


def check_against_model(x: np.ndarray, name: str, variant: str, assert_codes_equal: Callable[..., None]) -> None:
    rounding, bits = _rounding_mode(variant), random_bits_for(x, ROUNDINGS[variant])
    nan = np.isnan(x)
    for overflow in OVERFLOW_POLICIES if name in FP8_FORMATS else ("saturate",):
        ours = run_cast(x, name, rounding, bits, overflow)
        theirs = oracle(x, name, rounding, bits, overflow)
        assert_codes_equal(ours[~nan], theirs[~nan], x[~nan], f"the float64 model ({variant}, {overflow})")
        # NaN does not depend on the rounding: the same code as under rne.
        np.testing.assert_array_equal(ours[nan], run_cast(x[nan], name, "rne", None, overflow))


# -- exact checks with chosen random bits -------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32])
@pytest.mark.parametrize("name", FORMATS)
def test_zero_random_bits_truncate(name: str, dtype: type, wide_x: np.ndarray) -> None:
    zeros = np.zeros(wide_x.shape, dtype=dtype)
    np.testing.assert_array_equal(run_cast(wide_x, name, "stochastic", zeros), run_cast(wide_x, name, "rtz"))


@pytest.mark.parametrize("name", FORMATS)
def test_exact_values_never_move(name: str) -> None:
    fmt = get_format(name)
    codes = np.flatnonzero(np.isfinite(fmt.decode_table)).astype(np.uint8)
    values = np.repeat(fmt.decode_table[codes].astype(np.float32), 2)
    for dtype in (np.uint8, np.uint32):
        ones = np.full(values.shape, np.iinfo(dtype).max, dtype=dtype)  # the largest r: rounds up anything inexact
        ours = run_cast(values, name, "stochastic", ones)
        np.testing.assert_array_equal(ours, run_cast(values, name, "rne"))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32])
@pytest.mark.parametrize("name", FORMATS)
def test_largest_random_number_rounds_every_inexact_bfloat16_up(name: str, dtype: type) -> None:
    """r = 2**k - 1 moves every inexact value at least 2**-k of a step above its lower code up.

    bfloat16 values (8 significant bits) that are at least 2**-8 of the smallest subnormal are all
    such values, so none of them may come out below itself; r = 0 never comes out above.
    """
    fmt = get_format(name)
    x = (np.arange(1 << 15, dtype=np.uint32) << 16).view(np.float32)  # every positive bfloat16
    x = x[(x >= fmt.min_subnormal * 2**-8) & (x <= fmt.max_finite)]
    for r, direction in ((np.iinfo(dtype).max, 1), (0, -1)):
        codes = run_cast(x, name, "stochastic", np.full(x.shape, r, dtype=dtype))
        assert np.all(direction * (fmt.decode_table[codes] - x.astype(np.float64)) >= 0)
    up = run_cast(x, name, "stochastic", np.full(x.shape, np.iinfo(dtype).max, dtype=dtype))
    inexact = fmt.decode_table[run_cast(x, name, "rtz")] != x
    assert inexact.any() and np.all(fmt.decode_table[up][inexact] > x[inexact])


@pytest.mark.parametrize(("dtype", "rounds_up"), [(np.uint8, False), (np.uint32, True)])
def test_random_bits_align_to_the_top_of_the_dropped_field(dtype: type, rounds_up: bool) -> None:
    """1 + 2**-23 drops 20 bits to e4m3fn holding d = 1: floor(d * 2**k / 2**20) is 0 for k = 8, 4096 for k = 32.

    So even the largest 8-bit r cannot round it up, while r = 2**32 - 1 does (and r = 2**32 - 4096 too).
    """
    x = np.array([1.0 + 2**-23], dtype=np.float32)
    largest = np.array([np.iinfo(dtype).max], dtype=dtype)
    code = cast.fp8(x, format="float8_e4m3fn", overflow="saturate", rounding="stochastic", random_bits=largest)
    assert code["codes"][0] == (0x39 if rounds_up else 0x38)
    if rounds_up:
        threshold = np.array([2**32 - 4096, 2**32 - 4097], dtype=np.uint32)
        codes = cast.fp8(
            np.repeat(x, 2), format="float8_e4m3fn", overflow="saturate", rounding="stochastic", random_bits=threshold
        )["codes"]
        np.testing.assert_array_equal(codes, [0x39, 0x38])


@pytest.mark.parametrize("name", FORMATS)
def test_stochastic_is_monotone_in_the_random_number(name: str) -> None:
    x = np.repeat(np.random.default_rng(5).standard_normal(64).astype(np.float32) * 3, 256)
    r = np.tile(np.arange(256, dtype=np.uint8), 64)
    magnitudes = get_format(name).decode_table[run_cast(x, name, "stochastic", r) & get_format(name).magnitude_mask]
    assert np.all(np.diff(magnitudes.reshape(64, 256), axis=1) >= 0)


@pytest.mark.parametrize(
    ("name", "overflow", "expected"),
    [("float8_e4m3fn", "nonsaturating", 0x7F), ("float8_e4m3fn", "saturate", 0x7E), ("float4_e2m1fn", "-", 0x7)],
)
def test_stochastic_overflow_is_decided_after_rounding(name: str, overflow: str, expected: int) -> None:
    """449 (e4m3fn) and 6.5 (e2m1) lie between the largest code and where overflow starts."""
    x = np.array([449.0 if name == "float8_e4m3fn" else 6.5] * 2, dtype=np.float32)
    r = np.array([0, 255], dtype=np.uint8)
    codes = run_cast(x, name, "stochastic", r, overflow if overflow != "-" else "saturate")
    np.testing.assert_array_equal(codes, [get_format(name).max_finite_code, expected])


# -- statistics: unbiased, and always one of the two neighbours ---------------------------------------
STATISTICAL = [
    ("float8_e4m3fn", 1.03),
    ("float8_e4m3fn", -437.0),
    ("float8_e5m2", 3.3),
    ("float8_e4m3fnuz", 0.0012),  # subnormal target range
    ("float8_e5m2fnuz", -0.3),
    ("float6_e2m3fn", 0.3),  # subnormal target range
    ("float6_e3m2fn", 21.7),
    ("float4_e2m1fn", 2.7),
    ("float4_e2m1fn", -0.15),
]


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32])
@pytest.mark.parametrize(("name", "value"), STATISTICAL)
def test_stochastic_rounding_is_unbiased(name: str, value: float, dtype: type) -> None:
    """20,000 draws: every result is one of the two neighbours, and the mean is within 4 standard errors of x.

    (With 8 random bits the probability of rounding up is the fraction truncated to 8 bits, so the
    bias is below 2**-8 of a step: about one standard error here.)
    """
    fmt, draws = get_format(name), 20_000
    x = np.full(draws, value, dtype=np.float32)
    codes = run_cast(x, name, "stochastic", random_bits_for(x, dtype, seed=STATISTICAL.index((name, value))))
    lower = int(run_cast(x[:1], name, "rtz")[0])
    assert set(np.unique(codes).tolist()) == {lower, lower + 1}  # the next code up in magnitude
    values = fmt.decode_table[codes]
    assert abs(values.mean() - float(x[0])) < 4 * values.std() / np.sqrt(draws)


# -- TransformerEngine's software stochastic rounding (E2M1, 8 random bits) ----------------------------
def transformer_engine_sr_e2m1(x: np.ndarray, random_bytes: np.ndarray) -> np.ndarray:
    """TE's fallback of ``cvt.rs.satfinite.e2m1x4.f32`` as float32 arithmetic
    (NVIDIA/TransformerEngine@d0067d0:transformer_engine/common/util/ptx.cuh).

    ``u = byte / 256``; ``step`` is 0.5 below 2, 1 below 4, else 2; ``q = floor((|x| + u*step) / step) * step``,
    capped at 6, with the sign of ``x``; NaN gives +6.
    """
    magnitude = np.abs(x)
    u = random_bytes.astype(np.float32) / np.float32(256)
    step = np.where(magnitude < 2, np.float32(0.5), np.where(magnitude < 4, np.float32(1), np.float32(2)))
    with np.errstate(invalid="ignore"):
        q = np.minimum(np.floor((magnitude + u * step) / step) * step, np.float32(6)).astype(np.float32)
    return np.where(np.isnan(x), np.float32(6), np.copysign(q, x)).astype(np.float32)


def test_stochastic_uint8_is_transformer_engines_rule_on_bfloat16_inputs() -> None:
    """Exact agreement on every bfloat16 pattern with 4 random bytes each: there the float32 sum is exact."""
    x = np.tile((np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32), 4)
    random_bytes = random_bits_for(x, np.uint8, seed=11)
    assert random_bytes is not None
    codes = cast.fp4(x, format="float4_e2m1fn", rounding="stochastic", nan="max", random_bits=random_bytes)["codes"]
    ours = decode.fp4(codes, format="float4_e2m1fn")["values"]
    np.testing.assert_array_equal(ours.view(np.uint32), transformer_engine_sr_e2m1(x, random_bytes).view(np.uint32))


def test_known_difference_transformer_engine_float32_sum() -> None:
    """x = 2**-9 - 2**-33 is (1 - 2**-24) / 256 of the 0.5 step above 0: floor(256 * that) + 255 < 256, no round up.

    TE's float32 ``x + 255/256 * 0.5`` is 0.5 - 2**-33, which rounds to 0.5 in float32: TE rounds up to 0.5.
    """
    x = np.array([0x3AFF_FFFF], dtype=np.uint32).view(np.float32)
    assert float(x[0]) == 2.0**-9 - 2.0**-33
    r = np.array([255], dtype=np.uint8)
    assert cast.fp4(x, format="float4_e2m1fn", rounding="stochastic", random_bits=r)["codes"][0] == 0x0
    assert transformer_engine_sr_e2m1(x, r)[0] == 0.5


# -- arguments -------------------------------------------------------------------------------------------
CASTS: dict[str, Callable[..., dict[str, np.ndarray]]] = {
    "fp8": lambda x, **kw: cast.fp8(x, format="float8_e4m3fn", overflow="saturate", **kw),
    "fp6": lambda x, **kw: cast.fp6(x, format="float6_e3m2fn", **kw),
    "fp4": lambda x, **kw: cast.fp4(x, format="float4_e2m1fn", **kw),
}
X = np.array([1.0, 2.5], dtype=np.float32)


@pytest.mark.parametrize("which", sorted(CASTS))
@pytest.mark.parametrize("bad", ["up", "RNE", "nearest", ""])
def test_rejects_unknown_rounding(which: str, bad: str) -> None:
    with pytest.raises(
        ValueError, match=rf"rounding='{bad}', but rounding must be one of \['rne', 'rtz', 'stochastic'\]"
    ):
        CASTS[which](X, rounding=bad)


@pytest.mark.parametrize("which", sorted(CASTS))
def test_stochastic_needs_random_bits(which: str) -> None:
    with pytest.raises(ValueError, match=r"rounding='stochastic' and no random_bits.*uint8 or uint32 array"):
        CASTS[which](X, rounding="stochastic")


@pytest.mark.parametrize("rounding", ["rne", "rtz"])
@pytest.mark.parametrize("which", sorted(CASTS))
def test_random_bits_only_with_stochastic(which: str, rounding: str) -> None:
    with pytest.raises(ValueError, match=rf"random_bits with rounding='{rounding}'.*only for rounding='stochastic'"):
        CASTS[which](X, rounding=rounding, random_bits=np.zeros(2, dtype=np.uint8))


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint64, np.float32, np.bool_])
@pytest.mark.parametrize("which", sorted(CASTS))
def test_random_bits_dtype(which: str, dtype: type) -> None:
    with pytest.raises(
        TypeError, match=rf"random_bits\.dtype={np.dtype(dtype)}, but random_bits must be uint8 or uint32"
    ):
        CASTS[which](X, rounding="stochastic", random_bits=np.zeros(2, dtype=dtype))


@pytest.mark.parametrize("which", sorted(CASTS))
def test_random_bits_must_be_an_array_of_xs_shape(which: str) -> None:
    with pytest.raises(TypeError, match="random_bits of type list"):
        CASTS[which](X, rounding="stochastic", random_bits=[0, 0])
    for shape in [(1,), (3,), (2, 1), ()]:
        message = f"Got random_bits.shape={shape!r} and x.shape=(2,), but random_bits must have x's shape"
        with pytest.raises(ValueError, match=re.escape(message)):
            CASTS[which](X, rounding="stochastic", random_bits=np.zeros(shape, dtype=np.uint32))


@EXAMPLES
@given(
    x=hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=3, max_side=6), elements=st.floats(width=32)),
    which=st.sampled_from(sorted(CASTS)),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_bits_pair_with_x_elementwise_in_any_layout(x: np.ndarray, which: str, seed: int) -> None:
    bits = random_bits_for(x, np.uint32, seed)
    assert bits is not None
    x_view, bits_view = x[::-1, ::2].swapaxes(0, -1), bits[::-1, ::2].swapaxes(0, -1)
    ours = CASTS[which](x_view, rounding="stochastic", random_bits=bits_view)["codes"]
    contiguous = CASTS[which](
        np.ascontiguousarray(x_view), rounding="stochastic", random_bits=np.ascontiguousarray(bits_view)
    )
    np.testing.assert_array_equal(ours, contiguous["codes"])
    with np.errstate(over="ignore"):  # values beyond float16 become Inf
        x16 = x.astype(np.float16)
    from_16 = CASTS[which](x16, rounding="stochastic", random_bits=bits)["codes"]
    widened = x16.astype(np.float32)
    np.testing.assert_array_equal(from_16, CASTS[which](widened, rounding="stochastic", random_bits=bits)["codes"])


def test_random_bits_cross_chunk_boundaries() -> None:
    x = np.random.default_rng(3).standard_normal(200_003).astype(np.float32)
    bits = random_bits_for(x, np.uint8, seed=4)
    assert bits is not None
    whole = cast.fp4(x, format="float4_e2m1fn", rounding="stochastic", random_bits=bits)["codes"]
    cuts = [1, 65_537, 131_075]
    pieces = [
        cast.fp4(part, format="float4_e2m1fn", rounding="stochastic", random_bits=part_bits)["codes"]
        for part, part_bits in zip(np.split(x, cuts), np.split(bits, cuts), strict=True)
    ]
    np.testing.assert_array_equal(whole, np.concatenate(pieces))
