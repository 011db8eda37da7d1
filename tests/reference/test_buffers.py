"""``reference.buffers`` (``buffers.describe``) against the recipe references' own outputs.

Second oracle: the buffers ``reference.quant`` actually returns (their masks left out) for fuzzed shapes,
recipes and usages must be the described ones, name for name, in shape and dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference.quant as rq
from reference.buffers import describe, layout

RECIPES = [("fp8_tensor", "none"), ("mxfp8", "1d"), ("mxfp8", "2d"), ("fp8_block", "1d"), ("fp8_block", "2d"),
           ("nvfp4", "1d"), ("nvfp4", "2d")]  # fmt: skip
MASKS = ("_dont_care", "_padding")


def quantized(x: np.ndarray, recipe: str, block: str, usage: str) -> dict[str, np.ndarray]:
    """The recipe reference with TE's defaults (as ``group.quantize`` runs it), masks left out."""
    if recipe == "fp8_tensor":
        out = rq.fp8_tensor(x, format="float8_e4m3fn", usage=usage)
    elif recipe == "mxfp8":
        out = rq.mx(x, format="float8_e4m3fn", scale_rule="rceil", usage=usage, blocks=block, edges="te")
    elif recipe == "fp8_block":
        out = rq.fp8_block(x, format="float8_e4m3fn", block={"1d": "1x128", "2d": "128x128"}[block], usage=usage)
    else:
        out = rq.nvfp4(x, usage=usage, block={"1d": "1x16", "2d": "16x16"}[block])
    return {name: value for name, value in out.items() if not name.endswith(MASKS)}


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
@settings(max_examples=15, deadline=None, derandomize=True)
@given(data=st.data())
def test_description_is_what_the_recipe_reference_returns(recipe: str, block: str, data: Any):
    step = {"mxfp8": 32, "nvfp4": 16}.get(recipe, 1)
    lead = [] if recipe in ("mxfp8", "nvfp4") else data.draw(st.lists(st.integers(1, 3), max_size=1), label="lead")
    low = 1 if recipe in ("mxfp8", "nvfp4") else 0
    m, k = (data.draw(st.integers(low, 160 // step), label=d) * step for d in "MK")
    usage = data.draw(st.sampled_from(["both", "rowwise", "columnwise"]), label="usage")
    x = np.zeros((*lead, m, k), dtype=np.float32)
    described = layout(x.shape, recipe=recipe, block=block, usage=usage)
    got = {name: (value.shape, value.dtype.name) for name, value in quantized(x, recipe, block, usage).items()}
    assert sorted(got) == sorted(described)
    assert got == described
    zeros = describe(x, recipe=recipe, block=block, usage=usage)
    assert {n: (v.shape, v.dtype.name) for n, v in zeros.items()} == described and not any(
        v.any() for v in zeros.values()
    )


@pytest.mark.parametrize(
    ("shape", "kwargs", "match"),
    [
        ((16, 32), {"recipe": "mxfp8", "block": "1d", "usage": "both"}, r"flattened rows \(16\) a multiple of 32"),
        ((32, 16), {"recipe": "mxfp8", "block": "1d", "usage": "rowwise"}, r"K \(16\) a multiple of 32"),
        ((0, 32), {"recipe": "mxfp8", "block": "1d", "usage": "rowwise"}, r"at least one row"),
        ((32,), {"recipe": "mxfp8", "block": "1d"}, r"at least 2 dims"),
        ((1, 16, 16), {"recipe": "nvfp4", "block": "1d"}, r"2-D \[M, K\]"),
        ((16, 8), {"recipe": "nvfp4", "block": "1d"}, r"multiples of 16"),
        ((), {"recipe": "fp8_tensor"}, r"at least 1 dim"),
        ((4, 4), {"recipe": "fp8_block", "block": "none"}, r"recipe='fp8_block' and block='none'"),
        ((4, 4), {"recipe": "mxfp4", "block": "1d"}, r"recipe='mxfp4'"),
        ((4, 4), {"recipe": "fp8_tensor", "usage": "transpose"}, r"usage='transpose'"),
        ((4, -1), {"recipe": "fp8_tensor"}, r"shape\[1\]=-1"),
    ],
)
def test_layout_rejects_what_the_recipe_refuses(shape: tuple[int, ...], kwargs: dict[str, Any], match: str):
    with pytest.raises(ValueError, match=match):
        layout(shape, **kwargs)


def test_describe_needs_an_array():
    with pytest.raises(TypeError, match="x of type list"):
        describe([[0.0]], recipe="fp8_tensor")
