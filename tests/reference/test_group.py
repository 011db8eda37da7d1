"""``reference.group`` (grouped tensors: layout, quantize, tp_partition) and ``reference.glu.interleave_grouped``.

Second oracles: the per-member recipe contracts called directly (their outputs' shapes give the scale
slots, their bytes the grouped bytes), ``np.split`` for tensor-parallel shards and TransformerEngine's
reshape formula for the grouped GLU interleave.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference.quant as rq
from reference.glu import interleave, interleave_grouped
from reference.group import layout, quantize, tp_partition

EXAMPLES = settings(max_examples=40, deadline=None, derandomize=True)
BLOCK_RECIPES = [("fp8_tensor", "none"), ("mxfp8", "1d"), ("mxfp8", "2d"), ("fp8_block", "1d"), ("fp8_block", "2d"),
                 ("nvfp4", "1d"), ("nvfp4", "2d")]  # fmt: skip
DIVISOR = {"mxfp8": 32, "nvfp4": 16}
SCALE_OUTPUTS = {
    "fp8_tensor": ("scale_inv", "scale_inv"),
    "mxfp8": ("scale_rowwise", "scale_columnwise"),
    "fp8_block": ("scale_inv", "columnwise_scale_inv"),
    "nvfp4": ("scales", "columnwise_scales"),
}
"""Each recipe contract's rowwise and columnwise scale outputs."""


@st.composite
def members(draw: st.DrawFn, recipe: str = "none", max_dim: int = 40) -> tuple[list[int], list[int]]:
    """1 to 4 member shapes, dims multiples of the recipe's block, either dim list all equal or not."""
    step = DIVISOR.get(recipe, 1)
    n = draw(st.integers(1, 4), label="num_members")
    dims = st.integers(0, max_dim // step).map(lambda d: d * step)
    lists = []
    for name in ("first_dims", "last_dims"):
        if draw(st.booleans(), label=f"{name} all equal"):
            lists.append([draw(dims, label=name)] * n)
        else:
            lists.append(draw(st.lists(dims, min_size=n, max_size=n), label=name))
    return lists[0], lists[1]


def grouped(first_dims: list[int], last_dims: list[int], seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    total = sum(m * k for m, k in zip(first_dims, last_dims, strict=True))
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(total) * np.exp2(rng.integers(-6, 6, total))).astype(dtype)


def call_layout(data: np.ndarray, first_dims: list[int], last_dims: list[int], **kw: Any) -> dict[str, np.ndarray]:
    return layout(data, num_members=len(first_dims), first_dims=first_dims, last_dims=last_dims, **kw)


# %% layout


@pytest.mark.parametrize(
    ("first_dims", "last_dims", "offsets", "logical"),
    [
        ([2, 2, 2], [3, 3, 3], [0, 6, 12, 18], [6, 3]),  # all equal: [n*M, N]
        ([2, 0, 5], [3, 3, 3], [0, 6, 6, 21], [7, 3]),  # first dims vary: [sum M, N]
        ([2, 2], [1, 4], [0, 2, 10], [2, 5]),  # last dims vary: [M, sum N]
        ([1, 2], [4, 1], [0, 4, 6], [1, 6]),  # both vary: [1, total]
        ([3], [5], [0, 15], [3, 5]),  # one member
        ([0, 0], [0, 0], [0, 0, 0], [0, 0]),  # all empty
    ],
)
def test_offsets_and_logical_shape(first_dims: list[int], last_dims: list[int], offsets: list[int], logical: list[int]):
    out = call_layout(grouped(first_dims, last_dims), first_dims, last_dims)
    assert out["offsets"].dtype == np.int64 and out["offsets"].tolist() == offsets
    assert out["logical_shape"].tolist() == logical
    assert "scale_offsets" not in out


@EXAMPLES
@given(shapes=members(), seed=st.integers(0, 2**16))
def test_split_and_stack_round_trip_and_offsets_are_cumulative(shapes: tuple[list[int], list[int]], seed: int):
    first_dims, last_dims = shapes
    data = grouped(first_dims, last_dims, seed).view(np.uint32)
    out = call_layout(data, first_dims, last_dims)
    assert np.array_equal(np.diff(out["offsets"]), np.multiply(first_dims, last_dims))
    assert out["data"].dtype == data.dtype and np.array_equal(out["data"], data)
    assert not np.shares_memory(out["data"], data)
    assert math.prod(out["logical_shape"].tolist()) == data.size


@pytest.mark.parametrize(("recipe", "block"), BLOCK_RECIPES)
@settings(max_examples=12, deadline=None, derandomize=True)
@given(data=st.data())
def test_scale_offsets_are_the_member_quantizers_scale_sizes(recipe: str, block: str, data: st.DataObject):
    """Scale slot of a member = the size of the scales its own quantizer returns (NVFP4: TE's padded shape)."""
    first_dims, last_dims = data.draw(members(recipe, max_dim=160 if recipe == "fp8_block" else 64), label="members")
    values = grouped(first_dims, last_dims)
    out = call_layout(values, first_dims, last_dims, recipe=recipe, block=block)
    names = SCALE_OUTPUTS[recipe]
    for key, name in zip(("scale_offsets", "columnwise_scale_offsets"), names, strict=True):
        sizes = np.diff(out[key]).tolist()
        for i, (m, k) in enumerate(zip(first_dims, last_dims, strict=True)):
            if m * k == 0:
                assert sizes[i] == (1 if recipe == "fp8_tensor" else 0)
                continue
            scales = member_quantize(recipe, block, values[:0], m, k)[name]
            if recipe == "nvfp4":  # compact [rows, cols / 16] inside TE's [round_up(rows, 128), round_up(., 4)]
                rows, cols = scales.shape
                assert sizes[i] == -(-rows // 128) * 128 * (-(-cols // 4) * 4)
            else:
                assert sizes[i] == scales.size


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"num_members": 2, "first_dims": [1, 2, 3], "last_dims": [1, 1]},
            ValueError,
            r"first_dims with 3 entries.*num_members=2",
        ),
        (
            {"num_members": 2, "first_dims": [1, 1], "last_dims": [2, -2]},
            ValueError,
            r"last_dims\[1\]=-2.*>= 0 \(member 1\)",
        ),
        ({"num_members": 1, "first_dims": [1.0], "last_dims": [2]}, ValueError, r"first_dims\[0\]=1\.0.*ints"),
        ({"num_members": 1, "first_dims": [True], "last_dims": [2]}, ValueError, r"first_dims\[0\]=True"),
        ({"num_members": 0, "first_dims": [], "last_dims": []}, ValueError, r"num_members=0"),
        ({"num_members": 1, "first_dims": "1", "last_dims": [1]}, ValueError, r"first_dims='1'.*sequence"),
        (
            {"num_members": 2, "first_dims": [2, 1], "last_dims": [2, 2]},
            ValueError,
            r"data with 5 elements.*add up to 6",
        ),
        (
            {"num_members": 2, "first_dims": [32, 40], "last_dims": [32, 32], "recipe": "mxfp8", "block": "1d"},
            ValueError,
            r"member 1 of shape \(40, 32\).*multiples of 32",
        ),
        (
            {"num_members": 1, "first_dims": [16], "last_dims": [8], "recipe": "nvfp4", "block": "1d"},
            ValueError,
            r"member 0 of shape \(16, 8\).*multiples of 16",
        ),
        (
            {"num_members": 1, "first_dims": [1], "last_dims": [5], "recipe": "fp8_block", "block": "none"},
            ValueError,
            r"recipe='fp8_block' and block='none'.*'1d' or '2d'",
        ),
        (
            {"num_members": 1, "first_dims": [1], "last_dims": [5], "recipe": "fp8_tensor", "block": "1d"},
            ValueError,
            r"recipe='fp8_tensor' and block='1d'.*'none'",
        ),
        ({"num_members": 1, "first_dims": [1], "last_dims": [5], "recipe": "mxfp4"}, ValueError, r"recipe='mxfp4'"),
    ],
)
def test_layout_rejects_bad_members_naming_member_and_constraint(kwargs: dict[str, Any], error: type, match: str):
    with pytest.raises(error, match=match):
        layout(np.zeros(5, dtype=np.float32), **kwargs)


def test_layout_rejects_a_buffer_that_is_not_1d_or_not_an_array():
    with pytest.raises(ValueError, match=r"data.shape=\(2, 2\).*1-D"):
        layout(np.zeros((2, 2)), num_members=1, first_dims=[2], last_dims=[2])
    with pytest.raises(TypeError, match="data of type list"):
        layout([0.0] * 4, num_members=1, first_dims=[2], last_dims=[2])


# %% quantize


def member_quantize(recipe: str, block: str, like: np.ndarray, m: int, k: int, x: np.ndarray | None = None) -> dict:
    """The recipe contract's reference on one member (zeros of ``like``'s dtype when ``x`` is not given)."""
    x = np.zeros((m, k), dtype=like.dtype) if x is None else x
    if recipe == "fp8_tensor":
        return rq.fp8_tensor(x, format="float8_e4m3fn")
    if recipe == "mxfp8":
        return rq.mx(x, format="float8_e4m3fn", scale_rule="rceil", usage="both", blocks=block)
    if recipe == "fp8_block":
        return rq.fp8_block(x, format="float8_e4m3fn", block={"1d": "1x128", "2d": "128x128"}[block])
    return rq.nvfp4(x, block={"1d": "1x16", "2d": "16x16"}[block])


MEMBER_OUTPUTS = {
    "fp8_tensor": {"data": "data", "columnwise_data": "columnwise_data"},
    "mxfp8": {"data": "data_rowwise", "columnwise_data": "data_columnwise", "scales": "scale_rowwise",
              "columnwise_scales": "scale_columnwise"},
    "fp8_block": {"data": "data", "columnwise_data": "columnwise_data", "scale_inv": "scale_inv",
                  "columnwise_scale_inv": "columnwise_scale_inv"},
    "nvfp4": {"fp4_data": "data", "columnwise_fp4_data": "columnwise_data", "scales": "scales",
              "columnwise_scales": "columnwise_scales"},
}  # fmt: skip
"""Grouped buffer -> the member output it holds (per-member scalars are checked on their own)."""


@pytest.mark.parametrize(("recipe", "block"), BLOCK_RECIPES)
@settings(max_examples=10, deadline=None, derandomize=True)
@given(data=st.data())
def test_grouped_bytes_are_each_members_own_bytes(recipe: str, block: str, data: st.DataObject):
    """Fuzzed member counts and shapes: every member's slice of every grouped buffer is its quantizer's output."""
    first_dims, last_dims = data.draw(members(recipe, max_dim=160 if recipe == "fp8_block" else 64), label="members")
    values = grouped(first_dims, last_dims, seed=data.draw(st.integers(0, 2**16), label="seed"))
    n = len(first_dims)
    kwargs = {"recipe": recipe, "block": block}
    got = quantize(values, num_members=n, first_dims=first_dims, last_dims=last_dims, **kwargs)
    lay = call_layout(values, first_dims, last_dims, **kwargs)
    offsets = lay["offsets"]
    for i, (m, k) in enumerate(zip(first_dims, last_dims, strict=True)):
        if m * k == 0:
            for name, empty in {"amax": 0.0, "scale": 1.0, "scale_inv": 1.0, "columnwise_amax": 0.0}.items():
                if name in got and got[name].shape == (n,):
                    assert got[name][i] == empty, (name, i)
            continue
        own = member_quantize(recipe, block, values, m, k, values[offsets[i] : offsets[i + 1]].reshape(m, k))
        for grouped_name, member_name in MEMBER_OUTPUTS[recipe].items():
            flat = own[member_name].reshape(-1)
            if grouped_name.endswith("data"):
                per_byte = 2 if recipe == "nvfp4" else 1
                piece = got[grouped_name][offsets[i] // per_byte : offsets[i + 1] // per_byte]
                assert np.array_equal(piece, flat), (grouped_name, i)
                continue
            key = "columnwise_scale_offsets" if grouped_name.startswith("columnwise") else "scale_offsets"
            where = slice(lay[key][i], lay[key][i + 1])
            slot, padding = got[grouped_name][where], got[f"{grouped_name}_padding"][where]
            scales = own[member_name]
            if recipe == "nvfp4":  # [rows, cols] in the top-left of [round_up(rows, 128), round_up(cols, 4)]
                width = -(-scales.shape[1] // 4) * 4
                slot = slot.reshape(-1, width)[: scales.shape[0], : scales.shape[1]]
                padding = padding.reshape(-1, width)[: scales.shape[0], : scales.shape[1]]
                assert not padding.any()
            keep = ~padding.reshape(scales.shape)
            assert np.array_equal(slot.reshape(scales.shape)[keep], scales[keep]), (grouped_name, i)
        for name in ("amax", "scale", "scale_inv", "columnwise_amax"):
            if name in own and name in got and got[name].shape == (n,):
                assert got[name][i].view(np.uint32) == own[name].reshape(()).view(np.uint32), (name, i)


def test_empty_member_in_the_middle_keeps_the_others_in_place():
    values = np.array([896.0, -1.0, 2.0, 0.5], dtype=np.float32)
    out = quantize(values, num_members=3, first_dims=[1, 0, 1], last_dims=[2, 2, 2], recipe="fp8_tensor", block="none")
    assert out["amax"].tolist() == [896.0, 0.0, 2.0]
    assert out["scale"].tolist() == [0.5, 1.0, 224.0]
    assert out["data"].tolist() == [0x7E, 0xB0, 0x7E, 0x6E]


@pytest.mark.parametrize("usage", ["rowwise", "columnwise"])
def test_usage_selects_the_copies(usage: str):
    first_dims, last_dims = [32, 16], [16, 32]
    values = grouped(first_dims, last_dims)
    out = quantize(values, num_members=2, first_dims=first_dims, last_dims=last_dims, recipe="nvfp4", block="1d",
                   usage=usage)  # fmt: skip
    other = "rowwise" if usage == "columnwise" else "columnwise"
    prefix = {"rowwise": "", "columnwise": "columnwise_"}
    assert f"{prefix[usage]}fp4_data" in out and f"{prefix[usage]}amax" in out
    assert f"{prefix[other]}fp4_data" not in out and f"{prefix[other]}amax" not in out


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"recipe": "none", "block": "none"}, ValueError, r"recipe='none'"),
        ({"recipe": "fp8_block", "block": "1d", "scale_layout": "swizzled"}, ValueError, r"only mxfp8"),
        ({"recipe": "fp8_tensor", "block": "none", "usage": "transpose"}, ValueError, r"usage='transpose'"),
        ({"recipe": "fp8_tensor", "block": "none", "x_dtype": "float16"}, ValueError, r"x_dtype='float16'.*same dtype"),
        ({"recipe": "fp8_tensor", "block": "none", "x_dtype": "float64"}, ValueError, r"x_dtype='float64'"),
    ],
)
def test_quantize_rejects_bad_arguments(kwargs: dict[str, Any], error: type, match: str):
    with pytest.raises(error, match=match):
        quantize(np.zeros(4, dtype=np.float32), num_members=2, first_dims=[1, 1], last_dims=[2, 2], **kwargs)


def test_quantize_rejects_integer_and_float64_buffers():
    for dtype in (np.int32, np.float64):
        with pytest.raises(TypeError, match=r"data.dtype"):
            quantize(np.zeros(2, dtype=dtype), num_members=1, first_dims=[1], last_dims=[2], recipe="fp8_tensor",
                     block="none")  # fmt: skip


# %% tp_partition


@EXAMPLES
@given(
    parallel=st.sampled_from(["column", "row"]),
    tp_size=st.integers(1, 4),
    data=st.data(),
)
def test_grouped_shard_is_np_split_and_equals_the_members_2d_shards(parallel: str, tp_size: int, data: st.DataObject):
    rank = data.draw(st.integers(0, tp_size - 1), label="rank")
    gemms = data.draw(st.integers(0, 3), label="num_gemms")
    out_dim = data.draw(st.integers(0, 5), label="out") * (tp_size if parallel == "column" else 1)
    in_dim = data.draw(st.integers(0, 5), label="in") * (tp_size if parallel == "row" else 1)
    w = np.arange(gemms * out_dim * in_dim, dtype=np.int32).reshape(gemms, out_dim, in_dim)
    got = tp_partition(w, parallel=parallel, tp_size=tp_size, rank=rank)
    axis = 1 if parallel == "column" else 2
    assert got["partition_dim"].tolist() == [axis]
    assert np.array_equal(got["shard"], np.split(w, tp_size, axis=axis)[rank])
    for g in range(gemms):
        member = tp_partition(w[g], parallel=parallel, tp_size=tp_size, rank=rank)
        assert member["partition_dim"].tolist() == [axis - 1]  # TE's 2-D attribute: 0 column, 1 row
        assert np.array_equal(got["shard"][g], member["shard"])


@pytest.mark.parametrize(
    ("shape", "kwargs", "match"),
    [
        ((2, 3, 4), {"parallel": "column", "tp_size": 2, "rank": 0}, r"w.shape\[1\]=3 \(the out axis\).*tp_size=2"),
        ((3, 4), {"parallel": "row", "tp_size": 3, "rank": 0}, r"w.shape\[1\]=4 \(the in axis\).*tp_size=3"),
        ((4, 4), {"parallel": "row", "tp_size": 2, "rank": 2}, r"rank=2 and tp_size=2"),
        ((4, 4), {"parallel": "row", "tp_size": 2, "rank": -1}, r"rank=-1"),
        ((4, 4), {"parallel": "row", "tp_size": 0, "rank": 0}, r"tp_size=0.*>= 1"),
        ((4,), {"parallel": "row", "tp_size": 1, "rank": 0}, r"w.shape=\(4,\)"),
        ((1, 1, 1, 1), {"parallel": "row", "tp_size": 1, "rank": 0}, r"w.shape=\(1, 1, 1, 1\)"),
        ((4, 4), {"parallel": "expert", "tp_size": 1, "rank": 0}, r"parallel='expert'"),
    ],
)
def test_tp_partition_rejects_bad_arguments(shape: tuple[int, ...], kwargs: dict[str, Any], match: str):
    with pytest.raises(ValueError, match=match):
        tp_partition(np.zeros(shape), **kwargs)


# %% glu.interleave_grouped


@EXAMPLES
@given(
    block_size=st.integers(1, 4),
    blocks=st.integers(0, 3),
    gemms=st.integers(0, 3),
    rest=st.lists(st.integers(1, 3), max_size=1),
    direction=st.sampled_from(["interleave", "deinterleave"]),
)
def test_grouped_interleave_is_tes_formula_per_member(
    block_size: int, blocks: int, gemms: int, rest: list[int], direction: str
):
    w = np.arange(gemms * 2 * block_size * blocks * math.prod(rest)).reshape(gemms, 2 * block_size * blocks, *rest)
    out = interleave_grouped(w, block_size=block_size, direction=direction)["out"]
    halves, pairs = (gemms, 2, blocks, block_size, *rest), (gemms, blocks, 2, block_size, *rest)
    source = halves if direction == "interleave" else pairs
    assert np.array_equal(out, w.reshape(source).swapaxes(1, 2).reshape(w.shape))  # TE's reshape, per member
    back = interleave_grouped(
        out, block_size=block_size, direction=["interleave", "deinterleave"][direction == "interleave"]
    )
    assert np.array_equal(back["out"], w)
    for g in range(gemms if direction == "interleave" else 0):
        assert np.array_equal(out[g], interleave(w[g], block_size=block_size)["out"])


@pytest.mark.parametrize(
    ("shape", "kwargs", "error", "match"),
    [
        ((1, 10), {"block_size": 3}, ValueError, r"block_size=3 and w.shape\[1\]=10"),
        ((4,), {"block_size": 1}, ValueError, r"at least 2 dimensions"),
        ((1, 4), {"block_size": 0}, ValueError, r"block_size=0.*positive"),
        ((1, 4), {"block_size": 1, "direction": "sideways"}, ValueError, r"direction='sideways'"),
    ],
)
def test_interleave_grouped_rejects_bad_arguments(
    shape: tuple[int, ...], kwargs: dict[str, Any], error: type, match: str
):
    with pytest.raises(error, match=match):
        interleave_grouped(np.zeros(shape), **kwargs)
