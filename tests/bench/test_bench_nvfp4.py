"""Benchmarks of ``quant.nvfp4`` (and ``dequant.nvfp4``) on a bfloat16 8192 x 8192 matrix, beside the copy
bandwidth (``conftest.py``) and the peers, timed the same way on the same input.

Bytes moved: a per-tensor amax needs the whole input before any scale, so the recipe reads the input twice
(the amax pass and the quantize pass: 2 x 128 MiB) and writes each output once (rowwise: 32 MiB of data and
4 MiB of scales; ``both`` twice that).  ``extra_info["one_read_bytes"]`` is the floor of a single read, the
figure issue #4's "about 0.060 ms" refers to.  Peers: ``torch.compile`` of straightforward torch code for
the same TE arithmetic (rowwise, and rowwise plus the transposed operand in one graph), and torchao's own
NVFP4 path (``nvfp4_quantize`` with ``per_tensor_amax_to_scale``) under ``torch.compile`` when torchao is
importable.  Run with ``pytest tests/bench -m bench --benchmark-enable``.

With a given amax (``amax_source="given"``: TE's ``quantize_with_amax`` or amax reduction, torchao's
``per_tensor_scale``) the input is read once: those cases (``-k given``) move one read plus the outputs, beside
the same peers given the same amax (torchao's ``nvfp4_quantize(x, 16, per_tensor_scale)`` and the plain torch
code, both under ``torch.compile``).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import Any

import pytest
import torch

from fast.dequant.nvfp4 import dequantize
from fast.quant.nvfp4 import PATH_ENV, nvfp4

pytestmark = [
    pytest.mark.bench,
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
Measure = Callable[..., dict[str, Any]]
SHAPE = (8192, 8192)
LARGE = (32768, 7168)
"""The grouped benchmarks' total (``test_bench_group.py``): 448 MiB, 4.5 times the H100's L2, above the size where
the stores' L2 hint changes (``fast.quant.nvfp4.launch.store_eviction``)."""
FLT_MAX = torch.finfo(torch.float32).max


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    """Normal bfloat16 values whose 16-element blocks span 2**±8 (varied block scales)."""
    generator = torch.Generator("cuda").manual_seed(0)
    spread = 2.0 ** torch.randint(-8, 9, (SHAPE[0], SHAPE[1] // 16, 1), device="cuda", generator=generator).float()
    values = torch.randn((SHAPE[0], SHAPE[1] // 16, 16), device="cuda", generator=generator) * spread
    return values.reshape(SHAPE).to(torch.bfloat16)


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def output_bytes(usage: str, shape: tuple[int, int] = SHAPE) -> int:
    rows, cols = shape
    per_operand = rows * cols // 2 + rows * cols // 16 + 8
    return per_operand * (2 if usage == "both" else 1)


def input_bytes(x: torch.Tensor) -> int:
    return x.numel() * x.element_size()


VARIANTS: dict[str, dict[str, Any]] = {
    "rowwise": {"usage": "rowwise"},
    "both": {"usage": "both"},
    "columnwise": {"usage": "columnwise"},
    "both 16x16": {"usage": "both", "block": "16x16"},
    "both rht": {"usage": "both", "rht": True},
    "columnwise rht": {"usage": "columnwise", "rht": True},
    "both rht 16x16": {"usage": "both", "rht": True, "block": "16x16"},
    "rowwise torchao_cuda": {"usage": "rowwise", "scale_rule": "torchao_cuda"},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_triton_kernels(measure: Measure, x: torch.Tensor, variant: str) -> None:
    params = VARIANTS[variant]
    usage = params["usage"]
    measure(
        lambda: functools.partial(nvfp4, x, **params),
        bytes_moved=2 * input_bytes(x) + output_bytes(usage),
        one_read_bytes=input_bytes(x) + output_bytes(usage),
        implementation="fast.quant.nvfp4 (Triton, two passes)",
        shape="bf16_8192x8192",
        variant=variant,
    )


@pytest.mark.parametrize("variant", ["rowwise", "columnwise", "both", "both 16x16"])
def test_triton_kernels_large(measure: Measure, variant: str) -> None:
    """The same variants on a bfloat16 ``LARGE`` matrix (normal values)."""
    x = (torch.randn(LARGE, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) * 64).bfloat16()
    params = VARIANTS[variant]
    measure(
        lambda: functools.partial(nvfp4, x, **params),
        bytes_moved=2 * input_bytes(x) + output_bytes(params["usage"], LARGE),
        one_read_bytes=input_bytes(x) + output_bytes(params["usage"], LARGE),
        implementation="fast.quant.nvfp4 (Triton, two passes)",
        shape="bf16_32768x7168",
        variant=variant,
    )


STOCHASTIC_VARIANTS: dict[str, dict[str, Any]] = {
    "rowwise": {"usage": "rowwise"},
    "columnwise": {"usage": "columnwise"},
    "both": {"usage": "both"},
    "both rht": {"usage": "both", "rht": True},
}


@pytest.mark.parametrize("variant", STOCHASTIC_VARIANTS)
def test_triton_stochastic(measure: Measure, x: torch.Tensor, variant: str) -> None:
    """Stochastic rounding with uint8 random bits, read once per operand (TE's gradient recipe: both with RHT)."""
    params = STOCHASTIC_VARIANTS[variant]
    usage = params["usage"]
    generator = torch.Generator("cuda").manual_seed(1)
    bits = {
        name: torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda", generator=generator)
        for name, shape, wanted in (
            ("random_bits", SHAPE, usage != "columnwise"),
            ("columnwise_random_bits", SHAPE[::-1], usage != "rowwise"),
        )
        if wanted
    }
    measure(
        lambda: functools.partial(nvfp4, x, rounding="stochastic", **params, **bits),
        bytes_moved=2 * input_bytes(x) + sum(b.numel() for b in bits.values()) + output_bytes(usage),
        implementation="fast.quant.nvfp4 (Triton, two passes)",
        shape="bf16_8192x8192",
        variant=f"{variant} stochastic uint8 bits",
    )


def test_triton_dequantize(measure: Measure, x: torch.Tensor) -> None:
    q = nvfp4(x, usage="rowwise")
    measure(
        lambda: functools.partial(dequantize, q["data"], q["scales"], amax=q["amax"], out_dtype="bfloat16"),
        bytes_moved=output_bytes("rowwise") + input_bytes(x),
        implementation="fast.dequant.dequantize (Triton)",
        shape="bf16_8192x8192",
        variant="te, bfloat16 out",
    )


# %% Peers


def _torch_nvfp4_rowwise(
    x: torch.Tensor, amax: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TE's NVFP4 arithmetic written plainly in torch (E4M3 by torch's cast, E2M1 by threshold counts), from the
    data's amax or a given one."""
    rows, cols = x.shape
    values = x.float()
    amax = values.abs().amax() if amax is None else amax
    encode = torch.clamp(2688.0 / amax, max=FLT_MAX)
    encode = torch.where((amax == 0) | (encode == 0), torch.ones_like(encode), encode)
    decode = 1.0 / encode
    blocks = values.view(rows, cols // 16, 16)
    block_amax = blocks.abs().amax(dim=-1, keepdim=True)
    scale = torch.clamp(block_amax * (encode * (1.0 / 6.0)), max=448.0).to(torch.float8_e4m3fn)
    enc = torch.clamp(1.0 / (scale.float() * decode), max=FLT_MAX)
    scaled = (blocks * enc).view(rows, cols)
    a = scaled.abs()
    code = (
        (a > 0.25).to(torch.uint8)
        + (a >= 0.75).to(torch.uint8)
        + (a > 1.25).to(torch.uint8)
        + (a >= 1.75).to(torch.uint8)
        + (a > 2.5).to(torch.uint8)
        + (a >= 3.5).to(torch.uint8)
        + (a > 5.0).to(torch.uint8)
    ) | ((scaled < 0).to(torch.uint8) << 3)
    return code[:, 0::2] | (code[:, 1::2] << 4), scale.view(torch.uint8).view(rows, cols // 16), amax


def _torch_nvfp4_both(x: torch.Tensor, amax: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
    return (*_torch_nvfp4_rowwise(x, amax), *_torch_nvfp4_rowwise(x.t().contiguous(), amax))


def _torchao_nvfp4() -> Callable[[torch.Tensor], Any]:
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

    def run(x: torch.Tensor) -> Any:
        return nvfp4_quantize(x, 16, per_tensor_amax_to_scale(torch.max(torch.abs(x))))

    return run


PEERS: dict[str, tuple[Callable[[], Callable[[torch.Tensor], Any]], str]] = {
    "torch.compile of plain torch NVFP4 (rowwise)": (
        lambda: torch.compile(_torch_nvfp4_rowwise, dynamic=False),
        "rowwise",
    ),
    "torch.compile of plain torch NVFP4 (rowwise + transposed)": (
        lambda: torch.compile(_torch_nvfp4_both, dynamic=False),
        "both",
    ),
    "torch.compile of torchao nvfp4_quantize + per_tensor_amax_to_scale": (
        lambda: torch.compile(_torchao_nvfp4(), dynamic=False),
        "rowwise",
    ),
}


@pytest.mark.parametrize("peer", PEERS)
def test_peer(measure: Measure, x: torch.Tensor, peer: str) -> None:
    build, usage = PEERS[peer]
    if "torchao" in peer and importlib.util.find_spec("torchao") is None:
        pytest.skip("torchao is not installed")
    measure(  # built inside, where the fixture records the warnings of imports and compilation
        lambda: functools.partial(build(), x),
        bytes_moved=2 * input_bytes(x) + output_bytes(usage),
        one_read_bytes=input_bytes(x) + output_bytes(usage),
        implementation=peer,
        shape="bf16_8192x8192",
        variant=usage,
    )


# %% A given amax: one read of the input


GIVEN_VARIANTS: dict[str, dict[str, Any]] = {"rowwise": {"usage": "rowwise"}, "both": {"usage": "both"}}


@pytest.fixture(scope="module")
def amax(x: torch.Tensor) -> torch.Tensor:
    """The input's amax, float32 [1] on the GPU, as an amax reduction or a fused producer hands it over."""
    return x.abs().amax().float().reshape(1)


@pytest.mark.parametrize("variant", GIVEN_VARIANTS)
def test_triton_given_amax(measure: Measure, x: torch.Tensor, amax: torch.Tensor, variant: str) -> None:
    params = GIVEN_VARIANTS[variant]
    usage = params["usage"]
    amaxes = {"amax": amax} if usage == "rowwise" else {"amax": amax, "columnwise_amax": amax}
    computed = nvfp4(x, **params)
    given = nvfp4(x, amax_source="given", **amaxes, **params)
    assert all(torch.equal(given[k].view(torch.uint8), computed[k].view(torch.uint8)) for k in computed)
    measure(
        lambda: functools.partial(nvfp4, x, amax_source="given", **amaxes, **params),
        bytes_moved=input_bytes(x) + output_bytes(usage),
        implementation="fast.quant.nvfp4 (Triton, given amax: one pass)",
        shape="bf16_8192x8192",
        variant=f"{variant}, given amax",
    )


def _torchao_nvfp4_given() -> Callable[[torch.Tensor, torch.Tensor], Any]:
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize

    def run(x: torch.Tensor, per_tensor_scale: torch.Tensor) -> Any:
        return nvfp4_quantize(x, 16, per_tensor_scale)

    return run


GIVEN_PEERS: dict[str, tuple[Callable[[], Callable[[torch.Tensor, torch.Tensor], Any]], str, bool]] = {
    # name: (build, usage, whether it takes torchao's per_tensor_scale instead of the amax)
    "torch.compile of plain torch NVFP4 with a given amax (rowwise)": (
        lambda: torch.compile(_torch_nvfp4_rowwise, dynamic=False),
        "rowwise",
        False,
    ),
    "torch.compile of plain torch NVFP4 with a given amax (rowwise + transposed)": (
        lambda: torch.compile(_torch_nvfp4_both, dynamic=False),
        "both",
        False,
    ),
    "torch.compile of torchao nvfp4_quantize with a given per_tensor_scale": (
        lambda: torch.compile(_torchao_nvfp4_given(), dynamic=False),
        "rowwise",
        True,
    ),
}


@pytest.mark.parametrize("peer", GIVEN_PEERS)
def test_peer_given_amax(measure: Measure, x: torch.Tensor, amax: torch.Tensor, peer: str) -> None:
    build, usage, takes_scale = GIVEN_PEERS[peer]
    if takes_scale:
        if importlib.util.find_spec("torchao") is None:
            pytest.skip("torchao is not installed")
        from torchao.prototype.mx_formats.nvfp4_tensor import per_tensor_amax_to_scale

        argument = per_tensor_amax_to_scale(amax)
    else:
        argument = amax
    measure(
        lambda: functools.partial(build(), x, argument),
        bytes_moved=input_bytes(x) + output_bytes(usage),
        implementation=peer,
        shape="bf16_8192x8192",
        variant=f"{usage}, given amax",
    )
