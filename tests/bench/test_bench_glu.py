"""Benchmarks of ``glu.interleave`` on a TransformerEngine-sized fc1 weight: bfloat16 [2*14336, 4096].

On CUDA the time is set beside the device-to-device copy bandwidth (``conftest.py``): the
interleave is one strided copy, so it should come close to it.  On the CPU pytest-benchmark times it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fast.glu import interleave

pytestmark = pytest.mark.bench
SHAPE = (2 * 14336, 4096)
BLOCK_SIZE = 32
"""The interleave size TE's fused GLU commonly uses."""


def weight(device: str) -> torch.Tensor:
    generator = torch.Generator(device).manual_seed(0)
    return torch.randn(SHAPE, device=device, generator=generator).to(torch.bfloat16)


def test_cpu_interleave(benchmark: Any) -> None:
    w = weight("cpu")
    out = benchmark(interleave, w, block_size=BLOCK_SIZE)["out"]
    benchmark.extra_info.update(shape=list(SHAPE), block_size=BLOCK_SIZE, threads=torch.get_num_threads())
    assert out.shape == w.shape


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_interleave(measure: Callable[..., dict[str, Any]]) -> None:
    w = weight("cuda")
    measure(
        lambda: functools.partial(interleave, w, block_size=BLOCK_SIZE),
        bytes_moved=2 * w.numel() * w.element_size(),
        implementation="fast.glu.interleave (torch strided copy)",
        shape=list(SHAPE),
        block_size=BLOCK_SIZE,
    )
