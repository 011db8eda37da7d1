"""Benchmarks of grouped quantization (``group.quantize``): 8 experts x [4096, 7168] bfloat16 on the GPU.

Each recipe (TE defaults, 1d blocks) and usage (rowwise, columnwise, both) quantizes the grouped buffer with
``fast.group.quantize`` (MXFP8 and FP8 blockwise: one grouped kernel over every expert's tiles; FP8 current scaling
and NVFP4: two grouped kernels, an amax per expert, then the cast or quantize of every expert's tiles), timed with
CUDA events beside the device-to-device copy bandwidth (``conftest.py``), and, in the same session, the same
quantizer on one [32768, 7168] tensor of the same total size (``single``).  ``ragged``: the same total in experts of
MoE-like uneven token counts (``RAGGED_ROWS``, multiples of 32 but not of 128, so scale matrices carry padding rows
and 128-row tiles end inside an expert).  Bytes moved are the fewest a quantizer must move (the input read once,
per-tensor current scaling twice: its amax pass reads it too; each data copy and each scale written once), the same
for both forms.  Targets (issue #6, H100): grouped at least 90% of the copy bandwidth and within 5% of single.

Run with ``pytest tests/bench/test_bench_group.py -m bench --benchmark-enable``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fast.group import quantize
from fast.quant import fp8_block, fp8_tensor, mx, nvfp4

pytestmark = [
    pytest.mark.bench,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

Measure = Callable[..., dict[str, Any]]
EXPERTS, ROWS, COLS = 8, 4096, 7168
RAGGED_ROWS = [1056, 8160, 2048, 4096, 6144, 3072, 5120, 3072]
"""Uneven experts adding up to ``EXPERTS * ROWS`` rows."""
ELEMENTS = EXPERTS * ROWS * COLS
E4M3 = "float8_e4m3fn"

RECIPES: dict[str, tuple[str, Callable[..., dict[str, torch.Tensor]], dict[str, Any]]] = {
    # recipe: (block, the single-tensor quantizer, its arguments)
    "fp8_tensor": ("none", fp8_tensor, {"format": E4M3}),
    "mxfp8": ("1d", mx, {"format": E4M3, "scale_rule": "rceil"}),
    "fp8_block": ("1d", fp8_block, {"format": E4M3, "block": "1x128"}),
    "nvfp4": ("1d", nvfp4, {}),
}


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QCONFORM_FAST_PATH", "triton")


def bytes_moved(recipe: str, usage: str) -> int:
    """Input reads plus every copy's data and scales written, for ``ELEMENTS`` bfloat16 elements."""
    copies = 2 if usage == "both" else 1
    per_element = {"fp8_tensor": 1.0, "mxfp8": 1 + 1 / 32, "fp8_block": 1 + 4 / 128, "nvfp4": 0.5 + 1 / 16}[recipe]
    reads = 2 if recipe == "fp8_tensor" else 1
    return int(ELEMENTS * (2 * reads + copies * per_element))


@pytest.mark.parametrize("form", ["grouped", "ragged", "single"])
@pytest.mark.parametrize("usage", ["rowwise", "columnwise", "both"])
@pytest.mark.parametrize("recipe", list(RECIPES))
def test_grouped_quantize(measure: Measure, recipe: str, usage: str, form: str) -> None:
    """``grouped``: fast.group.quantize of the 8 experts; ``ragged``: of 8 uneven experts of the same total;
    ``single``: the recipe's quantizer on one [32768, 7168]."""
    block, single_quantizer, arguments = RECIPES[recipe]
    generator = torch.Generator("cuda").manual_seed(0)
    data = (torch.randn(ELEMENTS, device="cuda", generator=generator) * 64).to(torch.bfloat16)
    if form == "single":
        call = functools.partial(single_quantizer, data.view(EXPERTS * ROWS, COLS), usage=usage, **arguments)
    else:
        call = functools.partial(
            quantize, data, num_members=EXPERTS, first_dims=RAGGED_ROWS if form == "ragged" else [ROWS] * EXPERTS,
            last_dims=[COLS] * EXPERTS, recipe=recipe, block=block, usage=usage, x_dtype="bfloat16",
        )  # fmt: skip
    measure(
        lambda: call,
        bytes_moved=bytes_moved(recipe, usage),
        implementation=f"{form} {recipe} {usage}: {EXPERTS} x [{ROWS}, {COLS}] bf16 ({form} = {call.func.__module__})",
        target_fraction_of_copy=0.9,
    )
