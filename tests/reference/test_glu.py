"""``reference.glu.interleave`` / ``deinterleave`` (TransformerEngine PR #3078)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reference.glu import deinterleave, interleave

Regroup = Callable[..., dict[str, np.ndarray]]
EXAMPLES = settings(max_examples=50, deadline=None, derandomize=True)
DTYPES = st.sampled_from([np.float32, np.float16, np.int8, np.uint8, np.int64, np.bool_, np.complex64])


@st.composite
def glu_weights(draw: st.DrawFn) -> tuple[np.ndarray, int]:
    """A weight whose dim 0 is a multiple of 2*block_size, with up to 2 trailing dims."""
    block_size = draw(st.integers(1, 5), label="block_size")
    blocks_per_half = draw(st.integers(0, 4), label="blocks_per_half")
    trailing = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4), label="trailing")
    shape = (2 * block_size * blocks_per_half, *trailing)
    w = draw(hnp.arrays(draw(DTYPES, label="dtype"), shape), label="w")
    return w, block_size


def reference_order(rows: int, block_size: int) -> np.ndarray:
    """Row indices of the interleaved weight, written out block by block."""
    half = rows // 2
    order = []
    for start in range(0, half, block_size):
        order += list(range(start, start + block_size))
        order += list(range(half + start, half + start + block_size))
    return np.array(order, dtype=np.int64)


@EXAMPLES
@given(case=glu_weights())
def test_deinterleave_inverts_interleave(case: tuple[np.ndarray, int]) -> None:
    w, block_size = case
    out = interleave(w, block_size=block_size)["out"]
    assert out.shape == w.shape
    assert out.dtype == w.dtype
    np.testing.assert_array_equal(deinterleave(out, block_size=block_size)["out"], w)


@EXAMPLES
@given(case=glu_weights())
def test_interleave_inverts_deinterleave(case: tuple[np.ndarray, int]) -> None:
    w, block_size = case
    np.testing.assert_array_equal(
        interleave(deinterleave(w, block_size=block_size)["out"], block_size=block_size)["out"], w
    )


@EXAMPLES
@given(case=glu_weights())
def test_interleave_is_a_row_gather(case: tuple[np.ndarray, int]) -> None:
    w, block_size = case
    np.testing.assert_array_equal(
        interleave(w, block_size=block_size)["out"], w[reference_order(w.shape[0], block_size)]
    )


def test_small_example() -> None:
    w = np.arange(8 * 3).reshape(8, 3)  # W = rows 0-3, V = rows 4-7
    out = interleave(w, block_size=2)["out"]
    np.testing.assert_array_equal(out[:, 0] // 3, [0, 1, 4, 5, 2, 3, 6, 7])
    np.testing.assert_array_equal(out, w[[0, 1, 4, 5, 2, 3, 6, 7]])
    np.testing.assert_array_equal(deinterleave(out, block_size=2)["out"], w)


def test_one_block_per_half_is_identity_but_a_copy() -> None:
    w = np.arange(6.0)
    out = interleave(w, block_size=3)["out"]
    np.testing.assert_array_equal(out, w)
    assert not np.shares_memory(out, w)


def test_empty_dim0() -> None:
    w = np.zeros((0, 7), dtype=np.float16)
    for function in (interleave, deinterleave):
        out = function(w, block_size=4)["out"]
        assert out.shape == (0, 7)
        assert out.dtype == np.float16


def test_non_contiguous_input() -> None:
    base = np.arange(12 * 5).reshape(12, 5)
    w = base[:, ::2]
    np.testing.assert_array_equal(interleave(w, block_size=3)["out"], w[reference_order(12, 3)])


@pytest.mark.parametrize("function", [interleave, deinterleave])
@pytest.mark.parametrize("block_size", [0, -1, True, False, 2.0, "2", None])
def test_rejects_bad_block_size(function: Regroup, block_size: object) -> None:
    with pytest.raises(ValueError, match=rf"block_size={block_size!r}.*positive"):
        function(np.zeros(8), block_size=block_size)


@pytest.mark.parametrize("function", [interleave, deinterleave])
def test_accepts_numpy_integer_block_size(function: Regroup) -> None:
    w = np.arange(8)
    np.testing.assert_array_equal(function(w, block_size=np.int64(2))["out"], function(w, block_size=2)["out"])


@pytest.mark.parametrize("function", [interleave, deinterleave])
def test_rejects_zero_dimensional(function: Regroup) -> None:
    with pytest.raises(ValueError, match=r"\bw\b.*at least 1 dimension"):
        function(np.array(1.0, dtype=np.float32), block_size=1)


@pytest.mark.parametrize("function", [interleave, deinterleave])
@pytest.mark.parametrize(("rows", "block_size"), [(10, 3), (6, 2), (3, 1), (1, 1)])
def test_rejects_indivisible_dim0(function: Regroup, rows: int, block_size: int) -> None:
    message = (
        rf"Got block_size={block_size} and w\.shape\[0\]={rows}, "
        rf"but w\.shape\[0\] must be divisible by 2\*block_size={2 * block_size}"
    )
    with pytest.raises(ValueError, match=message):
        function(np.zeros((rows, 2)), block_size=block_size)


@pytest.mark.parametrize("function", [interleave, deinterleave])
def test_rejects_non_arrays(function: Regroup) -> None:
    with pytest.raises(TypeError, match="w of type list"):
        function([1.0, 2.0], block_size=1)
