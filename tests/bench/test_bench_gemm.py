"""Benchmarks of the grouped GEMM (``group.gemm``, form ``2d_3d``) beside its peers, in one run.

The mixture-of-experts forward of issue #6: 8 groups, 16384 rows in total, N = K = 4096, bfloat16
in and out, float32 accumulation; equal groups (2048 rows each) and ragged ones (an empty group among
them).  Each is timed for

- the Triton grouped GEMM (``fast.gemm.grouped_mm``, one launch, ``check_offsets=False`` so that no host
  read of the offsets is timed);
- ``torch._grouped_mm`` (CUTLASS on sm90);
- a loop of ``torch.mm`` per group into slices of one output (cuBLAS, one launch per group).

TFLOP/s (``2 * rows * N * K / time``) is recorded in ``extra_info["tflops"]`` beside the copy-bandwidth
fraction of the bytes each must move (``2 * (rows * K + G * K * N + rows * N)``, far from the limit: a
GEMM this size is compute-bound) and printed with ``-s``.  One command::

    python -m pytest tests/bench/test_bench_gemm.py -m bench --benchmark-enable -q -s \\
        --benchmark-json "$OUT/bench-gemm.json"
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from fast._triton import PATH_ENV
from fast.gemm import grouped_mm

pytestmark = [pytest.mark.bench, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

GROUPS, ROWS, N, K = 8, 16384, 4096, 4096
SIZES = {
    "equal": [ROWS // GROUPS] * GROUPS,
    "ragged": [3000, 0, 1500, 2500, 2048, 1000, 4000, 2336],
}


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def problem(sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    assert sum(sizes) == ROWS and len(sizes) == GROUPS
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((ROWS, K), device="cuda", generator=generator).to(torch.bfloat16)
    b = torch.randn((GROUPS, K, N), device="cuda", generator=generator).to(torch.bfloat16)
    offs = torch.cumsum(torch.tensor(sizes, device="cuda"), 0).to(torch.int32)
    return a, b, offs


def implementations(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, sizes: list[int]) -> dict[str, Callable]:
    out = torch.empty((ROWS, N), dtype=torch.bfloat16, device="cuda")
    spans = [(sum(sizes[:g]), sum(sizes[: g + 1])) for g in range(GROUPS)]

    def loop() -> torch.Tensor:
        for g, (start, end) in enumerate(spans):
            torch.mm(a[start:end], b[g], out=out[start:end])
        return out

    return {
        "triton": lambda: grouped_mm(a, b, offs, form="2d_3d", check_offsets=False),
        "torch_grouped_mm": lambda: torch._grouped_mm(a, b, offs=offs),
        "torch_mm_loop": loop,
    }


@pytest.mark.parametrize("name", ["triton", "torch_grouped_mm", "torch_mm_loop"])
@pytest.mark.parametrize("groups", sorted(SIZES))
def test_grouped_gemm(measure: Callable, groups: str, name: str) -> None:
    sizes = SIZES[groups]
    a, b, offs = problem(sizes)
    fn = implementations(a, b, offs, sizes)[name]
    expected = torch._grouped_mm(a, b, offs=offs).float()
    got = fn().float()
    assert float((got - expected).abs().max()) <= 0.02 * float(expected.abs().max())  # same product (sanity)
    flops = 2 * ROWS * N * K
    bytes_moved = 2 * (ROWS * K + GROUPS * K * N + ROWS * N)
    info = measure(lambda: fn, bytes_moved=bytes_moved, implementation=name, groups=groups)
    info["tflops"] = flops / (info["ms"] * 1e-3) / 1e12
    print(f"\ngrouped GEMM {groups:>6} {name:<17} {info['ms']:8.3f} ms {info['tflops']:7.1f} TFLOP/s")
