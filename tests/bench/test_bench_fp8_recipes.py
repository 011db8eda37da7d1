"""Benchmarks of the FP8 scaling recipes on a bfloat16 8192x8192 tensor, beside copy bandwidth and the peers.

Targets (issue #4, H100): every block-scaled quantizer at least 90% of the copy bandwidth for the bytes it must
move; FP8 1x128 blockwise at least as fast as ``torch.compile`` of the plain torch code.  Bytes moved: the input
read once, one byte per element per copy written, four bytes per scale written.  Peers, timed the same way on
the same input (``conftest.py``): ``torch.compile`` of the straightforward torch code of each recipe (pow2 1x128
blocks with the GEMM-ready transposed scales; rowwise plus columnwise as one compiled function; per-tensor
current scaling).  Run with ``pytest tests/bench -m bench --benchmark-enable``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fast.quant import fp8_block, fp8_delayed, fp8_tensor
from fast.quant.fp8 import PATH_ENV

pytestmark = [
    pytest.mark.bench,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
Measure = Callable[..., dict[str, Any]]
SHAPE = (8192, 8192)
FP8_MAX = 448.0


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "triton")


def bf16_input() -> torch.Tensor:
    generator = torch.Generator("cuda").manual_seed(0)
    return (torch.randn(SHAPE, device="cuda", generator=generator) * 64).to(torch.bfloat16)


def moved(x: torch.Tensor, copies: int, scales: int) -> int:
    return x.numel() * (x.element_size() + copies) + 4 * scales


BLOCK_CASES = {
    "1x128 rowwise": ("1x128", "rowwise", 1, SHAPE[0] * SHAPE[1] // 128),
    "1x128 columnwise": ("1x128", "columnwise", 1, SHAPE[0] * SHAPE[1] // 128),
    "1x128 both": ("1x128", "both", 2, 2 * SHAPE[0] * SHAPE[1] // 128),
    "128x128 both": ("128x128", "both", 2, 2 * SHAPE[0] * SHAPE[1] // 128**2),
}


@pytest.mark.parametrize("case", BLOCK_CASES)
def test_fp8_block(measure: Measure, case: str) -> None:
    block, usage, copies, scales = BLOCK_CASES[case]
    x = bf16_input()
    measure(
        lambda: functools.partial(fp8_block, x, format="float8_e4m3fn", block=block, usage=usage),
        bytes_moved=moved(x, copies, scales),
        implementation=f"fast.quant.fp8_block (Triton) {case}",
        target_fraction_of_copy=0.9,
    )


@pytest.mark.parametrize("usage", ["rowwise", "both"])
def test_fp8_tensor(measure: Measure, usage: str) -> None:
    x = bf16_input()
    copies = 1 + (usage == "both")
    measure(
        lambda: functools.partial(fp8_tensor, x, format="float8_e4m3fn", usage=usage),
        bytes_moved=moved(x, copies, 0) + x.numel() * x.element_size(),  # two passes: the amax reads x too
        implementation=f"fast.quant.fp8_tensor (Triton, amax pass + cast pass) {usage}",
    )


def test_fp8_delayed(measure: Measure) -> None:
    x = bf16_input()
    history, scale = torch.zeros(1024, device="cuda"), torch.ones(1, device="cuda")
    measure(
        lambda: functools.partial(fp8_delayed, x, history, scale, format="float8_e4m3fn", usage="rowwise"),
        bytes_moved=moved(x, 1, 0),
        implementation="fast.quant.fp8_delayed (Triton, one pass + update) rowwise",
    )


# %% Peers: torch.compile of the plain torch code


def _blocks_1x128(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """1x128 pow2 blockwise quantization along the last dim; scale_inv stored transposed [K/128, M]."""
    m, k = x.shape
    blocks = x.float().reshape(m, k // 128, 128)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, FP8_MAX / amax, torch.ones_like(amax))
    scale = torch.exp2(torch.floor(torch.log2(scale)))
    codes = (blocks * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).reshape(m, k)
    return codes, (1.0 / scale).reshape(m, k // 128).t().contiguous()


def _blocks_1x128_both(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (*_blocks_1x128(x), *_blocks_1x128(x.t()))


def _blocks_128x128_both(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    m, k = x.shape
    tiles = x.float().reshape(m // 128, 128, k // 128, 128)
    amax = tiles.abs().amax(dim=(1, 3), keepdim=True)
    scale = torch.exp2(torch.floor(torch.log2(torch.where(amax > 0, FP8_MAX / amax, torch.ones_like(amax)))))
    codes = (tiles * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).reshape(m, k)
    return codes, codes.t().contiguous(), (1.0 / scale).reshape(m // 128, k // 128)


def _tensor_both(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    amax = x.abs().amax().float()
    scale = torch.where(amax > 0, FP8_MAX / amax, torch.ones_like(amax))
    codes = (x.float() * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return codes, codes.t().contiguous(), 1.0 / scale


PEERS: dict[str, tuple[Callable[..., Any], int, int, int]] = {
    "torch.compile 1x128 rowwise": (_blocks_1x128, 1, SHAPE[0] * SHAPE[1] // 128, 0),
    "torch.compile 1x128 both": (_blocks_1x128_both, 2, 2 * SHAPE[0] * SHAPE[1] // 128, 0),
    "torch.compile 128x128 both": (_blocks_128x128_both, 2, 2 * SHAPE[0] * SHAPE[1] // 128**2, 0),
    "torch.compile per-tensor both": (_tensor_both, 2, 0, 1),
}
"""Function, copies written, scales written, extra reads of the input (per-tensor: the amax pass)."""


@pytest.mark.parametrize("peer", PEERS)
def test_peer(measure: Measure, peer: str) -> None:
    fn, copies, scales, extra_reads = PEERS[peer]
    x = bf16_input()
    measure(
        lambda: functools.partial(torch.compile(fn, dynamic=False), x),
        bytes_moved=moved(x, copies, scales) + extra_reads * x.numel() * x.element_size(),
        implementation=peer,
    )
