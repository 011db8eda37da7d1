"""Benchmarks of ``decode.fp8`` and ``glu.deinterleave`` beside the copy bandwidth (``conftest.py``).

``decode.fp8`` reads 1 byte and writes 4 per element (2^28 codes); ``glu.deinterleave`` reads and
writes the TransformerEngine-sized bfloat16 fc1 weight [2*14336, 4096] once each.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fast.decode import fp8 as decode_fp8
from fast.glu import deinterleave

pytestmark = [
    pytest.mark.bench,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
Measure = Callable[..., dict[str, Any]]


@pytest.mark.parametrize("format", ["float8_e4m3fn", "float8_e5m2"])
def test_gpu_decode_fp8(measure: Measure, format: str) -> None:
    codes = torch.randint(0, 256, (1 << 28,), dtype=torch.uint8, device="cuda")
    measure(
        lambda: functools.partial(decode_fp8, codes, format=format),
        bytes_moved=codes.numel() * 5,
        implementation="fast.decode.fp8 (table gather)",
        elements=codes.numel(),
        format=format,
    )


def test_gpu_deinterleave(measure: Measure) -> None:
    generator = torch.Generator("cuda").manual_seed(0)
    w = torch.randn((2 * 14336, 4096), device="cuda", generator=generator).to(torch.bfloat16)
    measure(
        lambda: functools.partial(deinterleave, w, block_size=32),
        bytes_moved=2 * w.numel() * w.element_size(),
        implementation="fast.glu.deinterleave (torch strided copy)",
        shape=list(w.shape),
        block_size=32,
    )
