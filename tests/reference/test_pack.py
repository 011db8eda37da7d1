"""``reference.pack.nibbles`` / ``reference.unpack.nibbles``: layouts, round trips, arguments.

The second oracle is the byte rule written out element by element (ONNX's ``_pack_4bitx2``:
element 0 in the low nibble, an odd count padded with a zero nibble), and torch's own nibble
arithmetic for the tinygemm (high-first) order.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from reference import pack, unpack
from reference.pack import NIBBLE_ORDERS

EXAMPLES = settings(max_examples=60, deadline=None, derandomize=True)


@st.composite
def nibble_arrays(draw: st.DrawFn) -> np.ndarray:
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=7), label="shape")
    return draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, 15)), label="codes")


def packed_by_loop(codes: np.ndarray, order: str) -> np.ndarray:
    """One byte at a time: ``first | second << 4`` (low_first) or ``first << 4 | second`` (high_first)."""
    rows = codes.reshape(int(np.prod(codes.shape[:-1])), codes.shape[-1])
    out = np.zeros((rows.shape[0], (codes.shape[-1] + 1) // 2), dtype=np.uint8)
    for r, row in enumerate(rows):
        for i in range(out.shape[1]):
            first = int(row[2 * i])
            second = int(row[2 * i + 1]) if 2 * i + 1 < len(row) else 0
            out[r, i] = first | second << 4 if order == "low_first" else first << 4 | second
    return out.reshape(*codes.shape[:-1], out.shape[1])


@EXAMPLES
@given(codes=nibble_arrays(), order=st.sampled_from(NIBBLE_ORDERS))
def test_pack_matches_the_byte_rule(codes: np.ndarray, order: str) -> None:
    packed = pack.nibbles(codes, order=order)["packed"]
    assert packed.dtype == np.uint8
    assert packed.shape == (*codes.shape[:-1], (codes.shape[-1] + 1) // 2)
    np.testing.assert_array_equal(packed, packed_by_loop(codes, order))


@EXAMPLES
@given(codes=nibble_arrays(), order=st.sampled_from(NIBBLE_ORDERS))
def test_unpack_inverts_pack(codes: np.ndarray, order: str) -> None:
    odd = codes.shape[-1] % 2 == 1
    packed = pack.nibbles(codes, order=order)["packed"]
    np.testing.assert_array_equal(unpack.nibbles(packed, order=order, odd=odd)["codes"], codes)


@EXAMPLES
@given(
    packed=hnp.arrays(np.uint8, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=7)),
    order=st.sampled_from(NIBBLE_ORDERS),
)
def test_pack_inverts_unpack(packed: np.ndarray, order: str) -> None:
    codes = unpack.nibbles(packed, order=order)["codes"]
    assert codes.shape == (*packed.shape[:-1], 2 * packed.shape[-1])
    assert codes.max(initial=0) <= 15
    np.testing.assert_array_equal(pack.nibbles(codes, order=order)["packed"], packed)


def test_orders_swap_nibbles() -> None:
    packed = np.arange(256, dtype=np.uint8)
    low, high = (unpack.nibbles(packed, order=order)["codes"].reshape(256, 2) for order in NIBBLE_ORDERS)
    np.testing.assert_array_equal(low, high[:, ::-1])
    np.testing.assert_array_equal(low[:, 0], packed & 0xF)


def test_onnx_rule_element_zero_in_the_low_nibble() -> None:
    """ONNX int4.md: [1, 2, 3] packs to [0x21, 0x03]; unpacking with the odd count drops the padding."""
    codes = np.array([1, 2, 3], dtype=np.uint8)
    np.testing.assert_array_equal(pack.nibbles(codes)["packed"], [0x21, 0x03])
    np.testing.assert_array_equal(unpack.nibbles(np.array([0x21, 0x03], np.uint8), odd=True)["codes"], codes)


def test_high_first_is_tinygemms_uint8_layout() -> None:
    """tinygemm's uint8 weight: ``byte = w[2i] << 4 | w[2i+1]`` (torch nibble arithmetic as the oracle)."""
    w = torch.randint(0, 16, (4, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    expected = (w[:, ::2] << 4 | w[:, 1::2]).numpy()
    np.testing.assert_array_equal(pack.nibbles(w.numpy(), order="high_first")["packed"], expected)


def test_odd_drops_the_padding_nibble_whatever_it_holds() -> None:
    codes = unpack.nibbles(np.array([[0x21, 0xF3], [0x54, 0x96]], np.uint8), odd=True)["codes"]
    np.testing.assert_array_equal(codes, [[1, 2, 3], [4, 5, 6]])
    assert codes.flags.c_contiguous


def test_empty_last_axis() -> None:
    assert pack.nibbles(np.zeros((3, 0), np.uint8))["packed"].shape == (3, 0)
    assert unpack.nibbles(np.zeros((3, 0), np.uint8))["codes"].shape == (3, 0)


def test_inputs_are_not_modified_and_views_work() -> None:
    base = np.arange(48, dtype=np.uint8).reshape(6, 8) % 16
    before = base.copy()
    view = base[::2, ::-1]
    np.testing.assert_array_equal(pack.nibbles(view)["packed"], pack.nibbles(np.ascontiguousarray(view))["packed"])
    np.testing.assert_array_equal(base, before)


@pytest.mark.parametrize(("values", "where", "bad"), [([1, 16], "1", 16), ([0, 15, 255, 16], "2", 255)])
def test_pack_rejects_codes_above_15(values: list[int], where: str, bad: int) -> None:
    with pytest.raises(ValueError, match=rf"Got codes\[{where}\]={bad}, but codes must hold 4-bit codes 0\.\.15"):
        pack.nibbles(np.array(values, dtype=np.uint8))


def test_pack_names_the_first_bad_code_by_its_full_index() -> None:
    codes = np.zeros((2, 3, 4), dtype=np.uint8)
    codes[1, 2, 1] = 17
    codes[1, 2, 3] = 99
    with pytest.raises(ValueError, match=r"codes\[1, 2, 1\]=17"):
        pack.nibbles(codes)


@pytest.mark.parametrize("function", [pack.nibbles, unpack.nibbles])
@pytest.mark.parametrize("bad", ["lsb_first", "low", "", "LOW_FIRST"])
def test_rejects_unknown_order(function: object, bad: str) -> None:
    with pytest.raises(ValueError, match=rf"order='{bad}', but order must be one of \['low_first', 'high_first'\]"):
        function(np.zeros(2, np.uint8), order=bad)  # type: ignore[operator]


@pytest.mark.parametrize("bad", [1, 0, "True", None])
def test_unpack_rejects_odd_that_is_not_a_bool(bad: object) -> None:
    with pytest.raises(ValueError, match=rf"odd={bad!r}, but odd must be one of \[False, True\]"):
        unpack.nibbles(np.zeros(2, np.uint8), odd=bad)  # type: ignore[arg-type]


def test_unpack_odd_needs_a_byte() -> None:
    with pytest.raises(ValueError, match=r"odd=True and packed\.shape=\(2, 0\)"):
        unpack.nibbles(np.zeros((2, 0), np.uint8), odd=True)


@pytest.mark.parametrize(("function", "name"), [(pack.nibbles, "codes"), (unpack.nibbles, "packed")])
def test_rejects_zero_dimensional_inputs_and_other_dtypes(function: object, name: str) -> None:
    with pytest.raises(ValueError, match=rf"{name}\.shape=\(\), but {name} must have at least 1 dimension"):
        function(np.array(3, np.uint8))  # type: ignore[operator]
    for dtype in (np.int8, np.uint16, np.float32):
        with pytest.raises(TypeError, match=rf"{name}\.dtype={np.dtype(dtype)}, but {name} must be uint8"):
            function(np.zeros(2, dtype=dtype))  # type: ignore[operator]
    with pytest.raises(TypeError, match=rf"{name} of type list"):
        function([1, 2])  # type: ignore[operator]
