"""The comparator: bits, not values."""

import numpy as np
import pytest

from conformance.compare import compare_outputs

CODES = {"codes": {"dtype": "uint8", "format": "$format", "shape": "x.shape", "compare": {"kind": "bitwise"}}}
PARAMS = {"format": "float8_e4m3fn"}


def _compare(outputs, ref, got, dtypes=None, params=PARAMS):
    dtypes = dtypes or {name: decl["dtype"] for name, decl in outputs.items()}
    return compare_outputs(outputs, dtypes, params, ref, got)


def test_identical_bits_pass():
    ref = {"codes": np.array([0x00, 0x80, 0x7F], dtype=np.uint8)}
    assert _compare(CODES, ref, {"codes": ref["codes"].copy()}) == []


def test_negative_zero_differs_from_positive_zero_and_index_is_reported():
    ref = {"codes": np.array([[1, 2], [3, 0x80]], dtype=np.uint8)}
    got = {"codes": np.array([[1, 2], [3, 0x00]], dtype=np.uint8)}
    (mismatch,) = _compare(CODES, ref, got)
    assert mismatch.count == 1
    assert mismatch.elements[0]["index"] == [1, 1]
    assert mismatch.message.startswith("codes[1, 1]=0x00 (0.0), but reference gives 0x80 (-0.0)")


def test_nan_codes_differ_under_bitwise_but_not_under_nan_equal():
    ref = {"codes": np.array([0x7F], dtype=np.uint8)}
    got = {"codes": np.array([0xFF], dtype=np.uint8)}
    assert len(_compare(CODES, ref, got)) == 1
    nan_equal = {"codes": {**CODES["codes"], "compare": {"kind": "nan_equal"}}}
    assert _compare(nan_equal, ref, got) == []


def test_nan_equal_on_float32_ignores_payload_but_not_values():
    outputs = {"values": {"dtype": "float32", "shape": "x.shape", "compare": {"kind": "nan_equal"}}}
    ref = {"values": np.array([0x7FC00000, 0x3F800000], dtype=np.uint32)}
    assert (
        _compare(outputs, ref, {"values": np.array([0x7FF00000, 0x3F800000], dtype=np.uint32).view(np.float32)}) == []
    )
    (m,) = _compare(outputs, ref, {"values": np.array([np.nan, 1.0000001], dtype=np.float32)})
    assert m.elements[0]["index"] == [1]


def test_nan_any_is_declared_per_variant():
    """``nan_any`` (an expression over the params) makes bitwise accept any NaN encoding of the output's
    ``format`` in the variants it names only; elsewhere the NaN code stays pinned, and non-NaN codes are
    always exact."""
    rule = {"kind": "bitwise", "nan_any": "format == 'float8_e5m2'"}
    outputs = {"codes": {**CODES["codes"], "compare": rule}}
    e5m2, e4m3 = {"format": "float8_e5m2"}, {"format": "float8_e4m3fn"}
    ref = {"codes": np.array([0x7F, 0x80, 0xFE], dtype=np.uint8)}  # E5M2: NaN, -0, NaN
    any_nan = {"codes": np.array([0xFD, 0x80, 0x7E], dtype=np.uint8)}  # other NaN encodings, same -0
    assert _compare(outputs, ref, any_nan, params=e5m2) == []
    (pinned,) = _compare(
        outputs,
        {"codes": np.array([0x7F, 0x80, 0xFF], np.uint8)},
        {"codes": np.array([0xFF, 0x80, 0xFF], np.uint8)},
        params=e4m3,
    )
    assert pinned.count == 1 and pinned.elements[0]["index"] == [0]
    (zero,) = _compare(outputs, ref, {"codes": np.array([0xFD, 0x00, 0x7E], np.uint8)}, params=e5m2)
    assert zero.count == 1 and zero.elements[0]["index"] == [1]  # -0 against +0 still differs
    assert (
        _compare(
            {"codes": {**CODES["codes"], "compare": {"kind": "bitwise", "nan_any": True}}}, ref, any_nan, params=e5m2
        )
        == []
    )
    with pytest.raises(ValueError, match="nan_any"):
        _compare(
            {"codes": {**CODES["codes"], "compare": {"kind": "bitwise", "nan_any": "1 + 1"}}}, ref, any_nan, params=e5m2
        )


def test_ulp_and_close_tolerances():
    one = np.float32(1.0)
    ref = {"y": np.array([one, one], dtype=np.float32).view(np.uint32)}
    near = np.array([one, np.nextafter(np.nextafter(one, np.float32(2)), np.float32(2))], dtype=np.float32)
    ulp1 = {"y": {"dtype": "float32", "shape": "x.shape", "compare": {"kind": "ulp", "max_ulp": 1, "why": "t"}}}
    ulp2 = {"y": {"dtype": "float32", "shape": "x.shape", "compare": {"kind": "ulp", "max_ulp": 2, "why": "t"}}}
    assert len(_compare(ulp1, ref, {"y": near})) == 1
    assert _compare(ulp2, ref, {"y": near}) == []
    close = {
        "y": {"dtype": "float32", "shape": "x.shape", "compare": {"kind": "close", "atol": 0, "rtol": 1e-6, "why": "t"}}
    }
    assert _compare(close, ref, {"y": near}) == []
    assert len(_compare(close, ref, {"y": np.array([1.0, 1.001], dtype=np.float32)})) == 1


def test_dont_care_mask_excludes_padding():
    outputs = {"s": {"dtype": "uint8", "shape": "x.shape", "compare": {"kind": "bitwise", "dont_care": "s_padding"}}}
    ref = {"s": np.array([1, 2, 0], dtype=np.uint8), "s_padding": np.array([False, False, True])}
    assert _compare(outputs, ref, {"s": np.array([1, 2, 99], dtype=np.uint8)}) == []
    assert len(_compare(outputs, ref, {"s": np.array([1, 3, 99], dtype=np.uint8)})) == 1


@pytest.mark.parametrize(
    ("got", "expected"),
    [
        ({"codes": np.zeros(3, dtype=np.int32)}, "codes: got dtype int32, expected uint8"),
        ({"codes": np.zeros(2, dtype=np.uint8)}, "codes: shape (2,), but reference gives (3,)"),
        ({"other": np.zeros(3, dtype=np.uint8)}, "codes: missing from the backend's outputs"),
    ],
)
def test_wrong_containers_are_reported_plainly(got, expected):
    ref = {"codes": np.zeros(3, dtype=np.uint8)}
    (mismatch,) = _compare(CODES, ref, got)
    assert mismatch.message.startswith(expected)


def test_bfloat16_output_accepts_exact_float32_or_bits_and_rejects_inexact():
    outputs = {"y": {"dtype": "bfloat16", "shape": "x.shape", "compare": {"kind": "bitwise"}}}
    ref = {"y": np.array([0x3F80], dtype=np.uint16)}
    assert _compare(outputs, ref, {"y": np.array([1.0], dtype=np.float32)}) == []
    assert _compare(outputs, ref, {"y": np.array([0x3F80], dtype=np.uint16)}) == []
    (m,) = _compare(outputs, ref, {"y": np.array([1.0000001], dtype=np.float32)})
    assert "not bfloat16 values" in m.message


STOCHASTIC = {
    "codes": {
        "dtype": "uint8",
        "shape": "x.shape",
        "compare": {"kind": "stochastic", "lower": "lo", "upper": "hi", "p_upper": "p", "z": 5, "why": "t"},
    }
}


def _stochastic_reference(p_up: float, n: int = 3) -> dict:
    return {
        "codes": np.zeros((1000, n), dtype=np.uint8),
        "lo": np.full(n, 10, dtype=np.uint8),
        "hi": np.full(n, 11, dtype=np.uint8),
        "p": np.full(n, p_up),
    }


def test_stochastic_accepts_unbiased_draws_and_rejects_bias_and_strangers():
    rng = np.random.default_rng(0)
    ref = _stochastic_reference(0.25)
    fair = np.where(rng.random((1000, 3)) < 0.25, 11, 10).astype(np.uint8)
    assert _compare(STOCHASTIC, ref, {"codes": fair}) == []
    biased = np.where(rng.random((1000, 3)) < 0.35, 11, 10).astype(np.uint8)
    (m,) = _compare(STOCHASTIC, ref, {"codes": biased})
    assert "draws rounded up, but p_upper=0.25" in m.message and m.elements[0]["index"] == [0]
    stranger = fair.copy()
    stranger[5, 1] = 12
    (m,) = _compare(STOCHASTIC, ref, {"codes": stranger})
    assert "codes[5, 1]=0x0c" in m.message and "neither neighbour" in m.message
