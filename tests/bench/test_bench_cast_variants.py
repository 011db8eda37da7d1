"""Benchmarks of every cast kernel besides fp8 round-to-nearest (``test_bench_cast.py``), of the decode
kernels and of nibble packing, on 2^28 elements, beside the copy bandwidth (``conftest.py``).

Bytes moved are the fewest each call must move: the float32 input (4 bytes), the random bits of
stochastic rounding (1 or 4 bytes) and the one-byte codes; decode reads 1 byte and writes 4; pack
reads 2 codes and writes 1 byte; unpack the reverse.  Peers, timed the same way on the same input:
torch's own casts for the formats it has (eager, and ``torch.compile`` of the cast).

Each figure is a whole call.  ``decode.fp6`` / ``decode.fp4`` and ``pack.nibbles`` check their codes'
range inside the kernel and read the flag back, one host sync per call, so the call's host work
(allocations, the launch) is not overlapped with the previous call's kernel: on the H100 that adds
0.07-0.2 ms to kernels of 0.15-0.46 ms.  ``scripts/diag_kernels.py --groups decode,pack`` times the
kernels alone (decode fp6/fp4 97%, pack 93% of copy).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fast import cast, decode, pack, unpack

pytestmark = [
    pytest.mark.bench,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
Measure = Callable[..., dict[str, Any]]
N = 1 << 28


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    """2^28 float32 values spread over every format's range and beyond."""
    return torch.randn(N, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) * 100


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cast.PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


CASTS: dict[str, tuple[Callable[..., Any], dict[str, Any], torch.dtype | None]] = {
    "fp8 e4m3fn rtz": (cast.fp8, {"format": "float8_e4m3fn", "overflow": "saturate", "rounding": "rtz"}, None),
    "fp8 e5m2 rtz nonsaturating": (
        cast.fp8,
        {"format": "float8_e5m2", "overflow": "nonsaturating", "rounding": "rtz"},
        None,
    ),
    "fp8 e4m3fn stochastic uint8 bits": (
        cast.fp8,
        {"format": "float8_e4m3fn", "overflow": "saturate", "rounding": "stochastic"},
        torch.uint8,
    ),
    "fp8 e4m3fn stochastic uint32 bits": (
        cast.fp8,
        {"format": "float8_e4m3fn", "overflow": "saturate", "rounding": "stochastic"},
        torch.uint32,
    ),
    "fp8 e5m2 stochastic uint32 bits": (
        cast.fp8,
        {"format": "float8_e5m2", "overflow": "nonsaturating", "rounding": "stochastic"},
        torch.uint32,
    ),
    "fp6 e2m3fn rne": (cast.fp6, {"format": "float6_e2m3fn"}, None),
    "fp6 e3m2fn rne": (cast.fp6, {"format": "float6_e3m2fn"}, None),
    "fp6 e2m3fn stochastic uint8 bits": (cast.fp6, {"format": "float6_e2m3fn", "rounding": "stochastic"}, torch.uint8),
    "fp6 e3m2fn stochastic uint32 bits": (
        cast.fp6,
        {"format": "float6_e3m2fn", "rounding": "stochastic"},
        torch.uint32,
    ),
    "fp4 e2m1fn rne": (cast.fp4, {"format": "float4_e2m1fn"}, None),
    "fp4 e2m1fn rtz": (cast.fp4, {"format": "float4_e2m1fn", "rounding": "rtz"}, None),
    "fp4 e2m1fn stochastic uint8 bits": (cast.fp4, {"format": "float4_e2m1fn", "rounding": "stochastic"}, torch.uint8),
    "fp4 e2m1fn stochastic uint32 bits": (
        cast.fp4,
        {"format": "float4_e2m1fn", "rounding": "stochastic"},
        torch.uint32,
    ),
    **{
        f"e8m0 {r}": (cast.e8m0, {"rounding": r, "zero": "min", "overflow": "saturate"}, None)
        for r in cast.E8M0_ROUNDINGS
    },
    **{f"int {d} rne_clamp": (cast.int_, {"dtype": d, "mode": "rne_clamp"}, None) for d in cast.INT_DTYPES},
    "int int8 truncate_wrap": (cast.int_, {"dtype": "int8", "mode": "truncate_wrap"}, None),
}


@pytest.mark.parametrize("name", CASTS)
def test_gpu_cast_kernel(measure: Measure, x: torch.Tensor, name: str) -> None:
    fn, params, random_dtype = CASTS[name]
    extra: dict[str, Any] = {}
    random_bytes = 0
    if random_dtype is not None:
        size = N * random_dtype.itemsize
        raw = torch.randint(0, 1 << 8, (size,), dtype=torch.uint8, device="cuda")
        extra["random_bits"] = raw.view(random_dtype)
        random_bytes = random_dtype.itemsize
    measure(
        lambda: functools.partial(fn, x, **params, **extra),
        bytes_moved=N * (4 + random_bytes + 1),
        implementation=f"fast.cast {name} (Triton)",
        elements=N,
    )


def _to(dtype: torch.dtype) -> Callable[[torch.Tensor], torch.Tensor]:
    def cast_to(t: torch.Tensor) -> torch.Tensor:
        return t.to(dtype)

    return cast_to


PEERS: dict[str, Callable[[], Callable[[torch.Tensor], torch.Tensor]]] = {
    "torch eager x.to(float8_e4m3fnuz)": lambda: _to(torch.float8_e4m3fnuz),
    "torch eager x.to(float8_e5m2fnuz)": lambda: _to(torch.float8_e5m2fnuz),
    "torch eager x.to(float8_e8m0fnu)": lambda: _to(torch.float8_e8m0fnu),
    "torch.compile x.to(float8_e8m0fnu)": lambda: torch.compile(_to(torch.float8_e8m0fnu), dynamic=False),
    "torch eager x.to(int8)": lambda: _to(torch.int8),
    "torch.compile x.round().clamp(-128, 127).to(int8)": lambda: torch.compile(
        lambda t: t.round().clamp(-128, 127).to(torch.int8), dynamic=False
    ),
}


@pytest.mark.parametrize("peer", PEERS)
def test_gpu_cast_peer(measure: Measure, x: torch.Tensor, peer: str) -> None:
    measure(lambda: functools.partial(PEERS[peer](), x), bytes_moved=N * 5, implementation=peer, elements=N)


DECODES: dict[str, tuple[Callable[..., Any], dict[str, Any], int]] = {
    "fp8 e4m3fn": (decode.fp8, {"format": "float8_e4m3fn"}, 8),
    "fp8 e5m2": (decode.fp8, {"format": "float8_e5m2"}, 8),
    "fp6 e2m3fn": (decode.fp6, {"format": "float6_e2m3fn"}, 6),
    "fp4 e2m1fn": (decode.fp4, {"format": "float4_e2m1fn"}, 4),
    "e8m0": (decode.e8m0, {}, 8),
}


@pytest.mark.parametrize("name", DECODES)
def test_gpu_decode_kernel(measure: Measure, name: str) -> None:
    fn, params, width = DECODES[name]
    codes = torch.randint(0, 1 << width, (N,), dtype=torch.uint8, device="cuda")
    measure(
        lambda: functools.partial(fn, codes, **params),
        bytes_moved=N * 5,
        implementation=f"fast.decode {name} (Triton)",
        elements=N,
    )


def test_gpu_decode_peer(measure: Measure) -> None:
    """torch's own widening of float8_e4m3fn codes to float32."""
    codes = torch.randint(0, 256, (N,), dtype=torch.uint8, device="cuda").view(torch.float8_e4m3fn)
    measure(
        lambda: functools.partial(codes.to, torch.float32),
        bytes_moved=N * 5,
        implementation="torch eager codes.to(float32) (float8_e4m3fn)",
        elements=N,
    )


@pytest.mark.parametrize("order", pack.NIBBLE_ORDERS)
def test_gpu_pack_nibbles(measure: Measure, order: str) -> None:
    codes = torch.randint(0, 16, (1 << 14, 1 << 14), dtype=torch.uint8, device="cuda")
    measure(
        lambda: functools.partial(pack.nibbles, codes, order=order),
        bytes_moved=codes.numel() * 3 // 2,
        implementation=f"fast.pack.nibbles {order} (Triton, range check with a host sync)",
        elements=codes.numel(),
    )


@pytest.mark.parametrize("order", unpack.NIBBLE_ORDERS)
def test_gpu_unpack_nibbles(measure: Measure, order: str) -> None:
    packed = torch.randint(0, 256, (1 << 14, 1 << 13), dtype=torch.uint8, device="cuda")
    measure(
        lambda: functools.partial(unpack.nibbles, packed, order=order),
        bytes_moved=packed.numel() * 3,
        implementation=f"fast.unpack.nibbles {order} (Triton)",
        elements=2 * packed.numel(),
    )
