"""Benchmarks of the FP8 scaling recipes on a bfloat16 8192x8192 tensor, beside copy bandwidth and the peers.

Targets (issue #4, H100): every block-scaled quantizer at least 90% of the copy bandwidth for the bytes it must
move; FP8 1x128 blockwise at least as fast as ``torch.compile`` of the plain torch code.  Bytes moved: the input
read once (per-tensor current scaling: twice, the amax pass reads it too), one byte per element per copy written,
four bytes per scale written.  Peers, timed the same way on the same input (``conftest.py``):

- ``torch.compile`` of the straightforward torch code of each recipe (pow2 1x128 blocks with the GEMM-ready
  transposed scales; rowwise plus columnwise as one compiled function; per-tensor current scaling; the delayed
  cast with a given scale and its amax);
- torchao 0.18's Triton kernels where it has the recipe (``torchao.prototype.blockwise_fp8_training``: 1x128
  ``act_quant_lhs`` rowwise and ``act_quant_transposed_lhs`` columnwise, 128x128 ``weight_quant_rhs`` (its codes
  written column-major: the work of our 128x128 columnwise case), and two of them for both copies), and
  torchao's float8 per-tensor scaling (``tensor_to_scale``, ``to_fp8_saturated``) under ``torch.compile``.
  torchao's kernels autotune over up to 45 configs; the benchmark keeps those with ``num_stages=2``, 4 or 8 warps
  and 16 to 64 groups, to bound the compile time.

Run with ``pytest tests/bench -m bench --benchmark-enable``.
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
ELEMENTS = SHAPE[0] * SHAPE[1]
FP8_MAX = 448.0


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "triton")


def bf16_input() -> torch.Tensor:
    generator = torch.Generator("cuda").manual_seed(0)
    return (torch.randn(SHAPE, device="cuda", generator=generator) * 64).to(torch.bfloat16)


def moved(copies: int, scales: int, reads: int = 1) -> int:
    """Bytes a bfloat16 quantizer must move: ``reads`` reads of x, ``copies`` FP8 copies, ``scales`` float32 scales."""
    return ELEMENTS * (2 * reads + copies) + 4 * scales


# %% Ours

BLOCK_CASES: dict[str, tuple[str, str, int]] = {
    "1x128 rowwise": ("1x128", "rowwise", moved(1, ELEMENTS // 128)),
    "1x128 columnwise": ("1x128", "columnwise", moved(1, ELEMENTS // 128)),
    "1x128 both": ("1x128", "both", moved(2, 2 * ELEMENTS // 128)),
    "128x128 rowwise": ("128x128", "rowwise", moved(1, ELEMENTS // 128**2)),
    # the work of torchao's weight_quant_rhs, which writes its codes column-major (the transposed copy)
    "128x128 columnwise": ("128x128", "columnwise", moved(1, ELEMENTS // 128**2)),
    "128x128 both": ("128x128", "both", moved(2, 2 * ELEMENTS // 128**2)),
}


@pytest.mark.parametrize("case", BLOCK_CASES)
def test_fp8_block(measure: Measure, case: str) -> None:
    block, usage, bytes_moved = BLOCK_CASES[case]
    x = bf16_input()
    measure(
        lambda: functools.partial(fp8_block, x, format="float8_e4m3fn", block=block, usage=usage),
        bytes_moved=bytes_moved,
        implementation=f"fast.quant.fp8_block (Triton) {case}",
        target_fraction_of_copy=0.9,
    )


@pytest.mark.parametrize("usage", ["rowwise", "both"])
def test_fp8_tensor(measure: Measure, usage: str) -> None:
    x = bf16_input()
    measure(
        lambda: functools.partial(fp8_tensor, x, format="float8_e4m3fn", usage=usage),
        bytes_moved=moved(1 + (usage == "both"), 0, reads=2),
        implementation=f"fast.quant.fp8_tensor (Triton, amax pass + cast pass) {usage}",
    )


@pytest.mark.parametrize("usage", ["rowwise", "both"])
def test_fp8_delayed(measure: Measure, usage: str) -> None:
    x = bf16_input()
    history, scale = torch.zeros(1024, device="cuda"), torch.ones(1, device="cuda")
    measure(
        lambda: functools.partial(fp8_delayed, x, history, scale, format="float8_e4m3fn", usage=usage),
        bytes_moved=moved(1 + (usage == "both"), 0),
        implementation=f"fast.quant.fp8_delayed (Triton, one pass + update) {usage}",
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


def _blocks_1x128_columnwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _blocks_1x128(x.t())


def _blocks_1x128_both(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (*_blocks_1x128(x), *_blocks_1x128(x.t()))


def _blocks_128x128_both(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    m, k = x.shape
    tiles = x.float().reshape(m // 128, 128, k // 128, 128)
    amax = tiles.abs().amax(dim=(1, 3), keepdim=True)
    scale = torch.exp2(torch.floor(torch.log2(torch.where(amax > 0, FP8_MAX / amax, torch.ones_like(amax)))))
    codes = (tiles * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).reshape(m, k)
    return codes, codes.t().contiguous(), (1.0 / scale).reshape(m // 128, k // 128)


def _tensor_rowwise(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    amax = x.abs().amax().float()
    scale = torch.where(amax > 0, FP8_MAX / amax, torch.ones_like(amax))
    return (x.float() * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), 1.0 / scale


def _tensor_both(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    codes, scale_inv = _tensor_rowwise(x)
    return codes, codes.t().contiguous(), scale_inv


def _delayed_rowwise(x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
    codes = (x.float() * scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return codes, x.abs().amax().float(), 1.0 / scale


COMPILED_PEERS: dict[str, tuple[Callable[..., Any], int]] = {
    "1x128 rowwise": (_blocks_1x128, moved(1, ELEMENTS // 128)),
    "1x128 columnwise": (_blocks_1x128_columnwise, moved(1, ELEMENTS // 128)),
    "1x128 both": (_blocks_1x128_both, moved(2, 2 * ELEMENTS // 128)),
    "128x128 both": (_blocks_128x128_both, moved(2, 2 * ELEMENTS // 128**2)),
    "per-tensor rowwise": (_tensor_rowwise, moved(1, 0, reads=2)),
    "per-tensor both": (_tensor_both, moved(2, 0, reads=2)),
    "delayed rowwise": (_delayed_rowwise, moved(1, 0)),
}
"""Function and the bytes of the recipe it stands beside."""


@pytest.mark.parametrize("peer", COMPILED_PEERS)
def test_compiled_peer(measure: Measure, peer: str) -> None:
    fn, bytes_moved = COMPILED_PEERS[peer]
    x = bf16_input()
    args = (x, torch.ones((), device="cuda")) if peer.startswith("delayed") else (x,)
    measure(
        lambda: functools.partial(torch.compile(fn, dynamic=False), *args),
        bytes_moved=bytes_moved,
        implementation=f"torch.compile {peer}",
    )


# %% Peers: torchao 0.18


def _torchao_blockwise() -> Any:
    kernels = pytest.importorskip("torchao.prototype.blockwise_fp8_training.kernels")
    for name in dir(kernels):
        autotuner = getattr(kernels, name)
        if name.endswith("_quant_lhs_kernel") or name.endswith("_quant_rhs_kernel"):
            autotuner.configs = [
                c
                for c in autotuner.configs
                if c.num_stages == 2 and c.num_warps in (4, 8) and c.kwargs.get("NUM_GROUPS", 32) in (16, 32, 64)
            ]
    return kernels


def _torchao_peers() -> dict[str, tuple[Callable[[Any, torch.Tensor], Any], int]]:
    def both(first: str, second: str) -> Callable[[Any, torch.Tensor], Any]:
        return lambda k, x: (getattr(k, first)(x), getattr(k, second)(x))

    return {
        "1x128 rowwise (act_quant_lhs)": (
            lambda k, x: k.triton_fp8_blockwise_act_quant_lhs(x),
            moved(1, ELEMENTS // 128),
        ),
        "1x128 columnwise (act_quant_transposed_lhs)": (
            lambda k, x: k.triton_fp8_blockwise_act_quant_transposed_lhs(x),
            moved(1, ELEMENTS // 128),
        ),
        "1x128 both (two kernels)": (
            both("triton_fp8_blockwise_act_quant_lhs", "triton_fp8_blockwise_act_quant_transposed_lhs"),
            moved(2, 2 * ELEMENTS // 128),
        ),
        "128x128 (weight_quant_rhs)": (
            lambda k, x: k.triton_fp8_blockwise_weight_quant_rhs(x),
            moved(1, ELEMENTS // 128**2),
        ),
        "128x128 both (two kernels)": (
            both("triton_fp8_blockwise_weight_quant_rhs", "triton_fp8_blockwise_weight_quant_transposed_rhs"),
            moved(2, 2 * ELEMENTS // 128**2),
        ),
    }


@pytest.mark.parametrize("peer", list(_torchao_peers()))
def test_torchao_blockwise_peer(measure: Measure, peer: str) -> None:
    fn, bytes_moved = _torchao_peers()[peer]
    x = bf16_input()
    measure(  # torchao is imported inside, where the fixture records import warnings
        lambda: functools.partial(fn, _torchao_blockwise(), x),
        bytes_moved=bytes_moved,
        implementation=f"torchao 0.18 blockwise_fp8_training {peer}",
    )


def _torchao_tensorwise() -> Callable[[torch.Tensor], torch.Tensor]:
    utils = pytest.importorskip("torchao.float8.float8_utils")

    def quantize(x: torch.Tensor) -> torch.Tensor:
        scale = utils.tensor_to_scale(x, torch.float8_e4m3fn)
        return utils.to_fp8_saturated(x.float() * scale, torch.float8_e4m3fn)

    return torch.compile(quantize, dynamic=False)


def test_torchao_tensorwise_peer(measure: Measure) -> None:
    x = bf16_input()
    measure(
        lambda: functools.partial(_torchao_tensorwise(), x),
        bytes_moved=moved(1, 0, reads=2),
        implementation="torchao 0.18 float8 per-tensor (tensor_to_scale, to_fp8_saturated) under torch.compile rowwise",
    )
