"""Benchmarks of the tinygemm int4 layout at N = K = 8192 (inner_k_tiles 8, group size 128), beside peers.

- Triton unpack to int32 and fused unpack + dequant to bfloat16 (fast.int4), against the copy
  bandwidth (target: 85% of it for the bytes each moves; issue #5);
- Triton pack from the uint8 [N, K/2] form, against ``aten._convert_weight_to_int4pack`` on the same
  GPU tensor, timed in the same test (target: at least as fast);
- peers: torch's pack op, and the only exact dequant torch has, ``_weight_int4pack_mm`` of an identity
  matrix (slow: a K x K GEMM);
- the CPU torch path of the dequant on a smaller weight, with pytest-benchmark.

Bytes moved are the fewest each operation must move: unpack reads N*K/2 and writes 4*N*K; dequant
reads N*K/2 and 4*N*K/gs (scales and zeros) and writes 2*N*K; pack reads and writes N*K/2.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

import fast.int4
from fast.cast import PATH_ENV
from fast.int4 import tinygemm_dequant, tinygemm_pack, tinygemm_unpack

pytestmark = pytest.mark.bench
N = K = 8192
IKT, GS = 8, 128
TILING = {"lines": fast.int4._BLOCK_LINES, "m_lanes": fast.int4._M_LANES, "num_warps": fast.int4._NUM_WARPS}
"""The unpack / dequant kernel's tiling, recorded with its timings."""
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def operands(device: str, n: int = N, k: int = K) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A uint8 [n, k/2] weight, its packed form and bfloat16 scales and zeros."""
    generator = torch.Generator().manual_seed(0)
    q_uint8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=generator).to(device)
    packed = tinygemm_pack(q_uint8=q_uint8, inner_k_tiles=IKT, input_form="uint8")["packed"]
    sz = (torch.randn((k // GS, n, 2), generator=generator) * 0.05).to(torch.bfloat16).to(device)
    return q_uint8, packed, sz


@pytest.fixture
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.mark.gpu
@cuda_only
@pytest.mark.usefixtures("triton_path")
def test_gpu_unpack(measure: Callable[..., dict[str, Any]]) -> None:
    pytest.importorskip("triton")
    _, packed, _ = operands("cuda")
    measure(
        lambda: functools.partial(tinygemm_unpack, packed, inner_k_tiles=IKT),
        bytes_moved=N * K // 2 + 4 * N * K,
        implementation="fast.int4.tinygemm_unpack (Triton)",
        shape=[N, K],
        inner_k_tiles=IKT,
        tiling=TILING,
    )


@pytest.mark.gpu
@cuda_only
@pytest.mark.usefixtures("triton_path")
@pytest.mark.parametrize("fma", ["hardware", "emulated"])
def test_gpu_dequant(measure: Callable[..., dict[str, Any]], fma: str) -> None:
    """The default (``fma.rn.bf16x2``) and the float32 emulation of the single-rounding FMA."""
    pytest.importorskip("triton")
    _, packed, sz = operands("cuda")
    out = torch.empty((N, K), dtype=torch.bfloat16, device="cuda")
    call: Callable[[], object] = (
        functools.partial(tinygemm_dequant, packed, sz, inner_k_tiles=IKT, group_size=GS)
        if fma == "hardware"
        else functools.partial(fast.int4._tile_triton, packed, sz, out, IKT, GS, "fma")
    )
    measure(
        lambda: call,
        bytes_moved=N * K // 2 + 4 * N * (K // GS) + 2 * N * K,
        implementation=f"fast.int4.tinygemm_dequant (Triton, fused unpack + dequant, {fma} FMA)",
        shape=[N, K],
        inner_k_tiles=IKT,
        group_size=GS,
        tiling=TILING,
    )


@pytest.mark.gpu
@cuda_only
@pytest.mark.usefixtures("triton_path")
def test_gpu_pack(measure: Callable[..., dict[str, Any]], cuda_ms: Callable[..., float]) -> None:
    """Our pack and torch's op on the same uint8 tensor, both timed here; the ratio is recorded."""
    pytest.importorskip("triton")
    q_uint8, _, _ = operands("cuda")
    torch_ms = cuda_ms(lambda: torch.ops.aten._convert_weight_to_int4pack(q_uint8, IKT))
    info = measure(
        lambda: functools.partial(tinygemm_pack, q_uint8=q_uint8, inner_k_tiles=IKT, input_form="uint8"),
        bytes_moved=N * K,
        implementation="fast.int4.tinygemm_pack (Triton, uint8 form)",
        shape=[N, K],
        inner_k_tiles=IKT,
        peer="aten._convert_weight_to_int4pack",
        peer_ms=torch_ms,
    )
    info["speedup_vs_peer"] = torch_ms / info["ms"]


@pytest.mark.gpu
@cuda_only
def test_gpu_torch_pack_peer(measure: Callable[..., dict[str, Any]]) -> None:
    q_uint8, _, _ = operands("cuda")
    measure(
        lambda: functools.partial(torch.ops.aten._convert_weight_to_int4pack, q_uint8, IKT),
        bytes_moved=N * K,
        implementation="aten._convert_weight_to_int4pack (peer)",
        shape=[N, K],
        inner_k_tiles=IKT,
    )


@pytest.mark.gpu
@cuda_only
def test_gpu_identity_matmul_dequant_peer(measure: Callable[..., dict[str, Any]]) -> None:
    """torch's only exact dequant of the layout: a K x K GEMM against the identity."""
    _, packed, sz = operands("cuda")
    eye = torch.eye(K, dtype=torch.bfloat16, device="cuda")
    measure(
        lambda: functools.partial(torch.ops.aten._weight_int4pack_mm, eye, packed, GS, sz),
        bytes_moved=N * K // 2 + 4 * N * (K // GS) + 2 * N * K,
        implementation="aten._weight_int4pack_mm(eye(K)) (peer; the transpose not included)",
        shape=[N, K],
        inner_k_tiles=IKT,
        group_size=GS,
    )


def test_cpu_dequant(benchmark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "torch")
    _, packed, sz = operands("cpu", n=1024, k=1024)
    w = benchmark(tinygemm_dequant, packed, sz, inner_k_tiles=IKT, group_size=GS)["w"]
    benchmark.extra_info.update(shape=[1024, 1024], inner_k_tiles=IKT, group_size=GS, threads=torch.get_num_threads())
    assert w.shape == (1024, 1024)
