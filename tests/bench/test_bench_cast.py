"""Benchmarks of ``cast.fp8``: the CPU torch path, the Triton kernel on CUDA, and its peers.

GPU cases (2^28 float32 elements, and a bfloat16 8192x8192 matrix) set each time beside the
device-to-device copy bandwidth (``conftest.py``).  The goal for the Triton kernel is at least 90%
of copy bandwidth on float32, counting 4 bytes read and 1 byte written per element.  Peers, timed
the same way on the same input: torch eager ``x.to(torch.float8_e4m3fn)`` (non-saturating up to
torch 2.12, saturating from 2.13), ``torch.compile`` of that cast (Triton; saturating), and
``torch.compile`` of a saturating clamp-then-cast.  Run with ``pytest tests/bench -m bench
--benchmark-enable``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fast.cast import FP8_FORMATS, OVERFLOW_POLICIES, PATH_ENV, fp8

pytestmark = pytest.mark.bench
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

Measure = Callable[..., dict[str, Any]]
SHAPES = {"f32_2^28": ((1 << 28,), torch.float32), "bf16_8192x8192": ((8192, 8192), torch.bfloat16)}


def random_input(name: str, device: str) -> torch.Tensor:
    """Values spread over the FP8 range and beyond (never zeros), in the case's shape and dtype."""
    shape, dtype = SHAPES[name]
    generator = torch.Generator(device).manual_seed(0)
    return (torch.randn(shape, device=device, generator=generator) * 100).to(dtype)


def test_cpu_torch_path(benchmark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch path on 2^22 float32 elements on the CPU (pytest-benchmark's own timing)."""
    monkeypatch.setenv(PATH_ENV, "torch")
    x = torch.randn(1 << 22, generator=torch.Generator().manual_seed(0)) * 100
    codes = benchmark(fp8, x, format="float8_e4m3fn", overflow="saturate")["codes"]
    benchmark.extra_info.update(elements=x.numel(), threads=torch.get_num_threads())
    assert codes.shape == x.shape


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("overflow", OVERFLOW_POLICIES)
@pytest.mark.parametrize("format", FP8_FORMATS)
@pytest.mark.parametrize("shape", SHAPES)
def test_gpu_triton_kernel(
    measure: Measure, monkeypatch: pytest.MonkeyPatch, shape: str, format: str, overflow: str
) -> None:
    monkeypatch.setenv(PATH_ENV, "triton")
    x = random_input(shape, "cuda")
    measure(
        lambda: functools.partial(fp8, x, format=format, overflow=overflow),
        bytes_moved=x.numel() * (x.element_size() + 1),
        implementation="fast.cast.fp8 (Triton)",
        shape=shape,
        format=format,
        overflow=overflow,
    )


def _eager_cast(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float8_e4m3fn)


def _clamp_then_cast(x: torch.Tensor) -> torch.Tensor:
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


PEERS: dict[str, Callable[[], Callable[[torch.Tensor], torch.Tensor]]] = {
    "torch eager x.to(float8_e4m3fn)": lambda: _eager_cast,
    "torch.compile x.to(float8_e4m3fn)": lambda: torch.compile(_eager_cast, dynamic=False),
    "torch.compile clamp(-448, 448).to(float8_e4m3fn)": lambda: torch.compile(_clamp_then_cast, dynamic=False),
}
"""Each peer is built per test, so that every shape gets its own static compilation."""


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("peer", PEERS)
@pytest.mark.parametrize("shape", SHAPES)
def test_gpu_peer(measure: Measure, shape: str, peer: str) -> None:
    x = random_input(shape, "cuda")
    measure(
        lambda: functools.partial(PEERS[peer](), x),
        bytes_moved=x.numel() * (x.element_size() + 1),
        implementation=peer,
        shape=shape,
        format="float8_e4m3fn",
    )
