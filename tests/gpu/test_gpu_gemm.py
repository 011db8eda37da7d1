"""``fast.gemm`` and torch's grouped and scaled GEMMs on a CUDA device (run by ``nox -s gpu``).

- the Triton grouped GEMM, compiled, with every autotune tile and with the autotuner, for each form on ragged
  groups (an empty one among them) and ``K`` both a multiple of the tile and not: within the bound of
  ``specs/group/gemm.yaml`` (with this test's ``K``) of a float64 product computed on the GPU, and also of the
  NumPy reference on a small case;
- ``torch._grouped_mm`` within the same bound, on the same operands (beside ours);
- the mixture-of-experts shape of the benchmark (8 groups, 16384 rows, N = K = 4096) for the Triton kernel
  and ``torch._grouped_mm`` against float64;
- ``gemm.scaled`` through ``fast.scaled`` (``torch._scaled_mm`` where it has a kernel: tensorwise, rowwise and
  the three blockwise pairs on sm90 with CUDA >= 12.9) within the bound of ``specs/gemm/scaled.yaml`` of the
  NumPy reference, on FP8-quantized normal data, and the largest error seen relative to ``abs_dot``
  printed (``-s``) to check the spec's ``mtol`` against the hardware.

One command: ``python -m pytest tests/gpu/test_gpu_gemm.py -m gpu -q -s``.  The spec rows themselves run
with ``pytest tests/test_contracts.py --qconform-spec 'gemm.scaled' --qconform-backend fast`` (and
``group.gemm``, ``--qconform-backend torch``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import fast.gemm
import reference.gemm
from fast._triton import PATH_ENV
from fast.gemm import _autotune_configs, _grouped_triton, _output, grouped, grouped_mm, scaled

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SIZES = [300, 0, 17, 1024, 128, 555]
"""Ragged group sizes along the split axis (multiples of 8 where the split is K or columns: see ``sizes_for``)."""


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fast call here runs the device path (an error if Triton is missing, never a silent fallback)."""
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def sizes_for(form: str) -> list[int]:
    return SIZES if form == "2d_3d" else [8 * -(-size // 8) for size in SIZES]


def operands(form: str, sizes: list[int], m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """bfloat16 normal operands of the form's shapes on the GPU."""
    total, groups = sum(sizes), len(sizes)
    shapes = {"2d_3d": ((total, k), (groups, k, n)), "2d_2d": ((m, total), (total, n)),
              "3d_2d": ((groups, m, k), (k, total))}[form]  # fmt: skip
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(s, device="cuda", generator=generator).to(torch.bfloat16) for s in shapes)  # type: ignore[return-value]


def float64_product(a: torch.Tensor, b: torch.Tensor, form: str, sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact-product float64 result and abs_dot, group by group, on the GPU."""
    a64, b64 = a.double(), b.double()
    out = torch.zeros(_output(a, b, form, len(sizes)).shape, dtype=torch.float64, device="cuda")
    abs_dot = torch.zeros_like(out)
    start = 0
    for g, size in enumerate(sizes):
        end = start + size
        if form == "2d_3d":
            out[start:end], abs_dot[start:end] = a64[start:end] @ b64[g], a64[start:end].abs() @ b64[g].abs()
        elif form == "2d_2d":
            out[g], abs_dot[g] = a64[:, start:end] @ b64[start:end], a64[:, start:end].abs() @ b64[start:end].abs()
        else:
            out[:, start:end], abs_dot[:, start:end] = (
                a64[g] @ b64[:, start:end],
                a64[g].abs() @ b64[:, start:end].abs(),
            )
        start = end
    return out, abs_dot


def assert_within_bound(got: torch.Tensor, exact: torch.Tensor, abs_dot: torch.Tensor, k: int, what: str) -> float:
    """specs/group/gemm.yaml's bound with this K: rtol 0.00785 of the bfloat16 reference, mtol 2 K 2**-23."""
    __tracebackhide__ = True
    ref = exact.to(torch.bfloat16).double()
    diff = (got.double() - ref).abs()
    allowed = 2.0**-119 + 0.00785 * ref.abs() + 2 * k * 2.0**-23 * abs_dot
    worst = float((diff / allowed).max()) if diff.numel() else 0.0
    assert bool((diff <= allowed).all()), f"{what}: {int((diff > allowed).sum())} elements out of bound, worst {worst}"
    return worst


@pytest.mark.parametrize("k", [256, 200])
@pytest.mark.parametrize("form", ["2d_3d", "2d_2d", "3d_2d"])
def test_every_tile_configuration(form: str, k: int) -> None:
    sizes = sizes_for(form)
    a, b = operands(form, sizes, m=333, n=300, k=k, seed=k)
    exact, abs_dot = float64_product(a, b, form, sizes)
    offs = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    k_max = max(sizes) if form == "2d_2d" else k
    for tile in _autotune_configs():
        out = _output(a, b, form, len(sizes))
        _grouped_triton(a, b, offs, out, form, tile)
        assert_within_bound(out, exact, abs_dot, k_max, f"{form} K={k} {tile}")


@pytest.mark.parametrize("form", ["2d_3d", "2d_2d", "3d_2d"])
def test_autotuned_kernel_and_torch_grouped_mm_within_the_bound(form: str) -> None:
    sizes = sizes_for(form)
    a, b = operands(form, sizes, m=512, n=512, k=1024, seed=7)
    exact, abs_dot = float64_product(a, b, form, sizes)
    k_max = max(sizes) if form == "2d_2d" else 1024
    ours = grouped(a, b, form=form, groups=len(sizes), group_sizes=sizes)["out"]
    worst = assert_within_bound(ours, exact, abs_dot, k_max, f"triton {form}")
    offs = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    assert torch.equal(grouped_mm(a, b, offs, form=form, check_offsets=False), ours)
    theirs = torch._grouped_mm(a, b, offs=offs)
    worst_torch = assert_within_bound(theirs, exact, abs_dot, k_max, f"torch._grouped_mm {form}")
    print(f"\n{form}: worst |diff| / allowed: triton {worst:.3g}, torch._grouped_mm {worst_torch:.3g}")


def test_small_case_against_the_numpy_reference() -> None:
    sizes = [5, 0, 40, 3]
    a, b = operands("2d_3d", sizes, m=0, n=24, k=40, seed=3)
    ref = reference.gemm.grouped(a.float().cpu().numpy(), b.float().cpu().numpy(), form="2d_3d", groups=4,
                                 group_sizes=sizes)  # fmt: skip
    out = grouped(a, b, form="2d_3d", groups=4, group_sizes=sizes)["out"].float().cpu().numpy()
    allowed = 2.0**-119 + 0.00785 * np.abs(ref["out"]) + 2.0**-16 * ref["abs_dot"]
    assert (np.abs(out - ref["out"]) <= allowed).all()


def test_mixture_of_experts_shape_of_the_benchmark() -> None:
    groups, rows, n, k = 8, 16384, 4096, 4096
    sizes = [rows // groups] * groups
    a, b = operands("2d_3d", sizes, m=0, n=n, k=k, seed=11)
    exact, abs_dot = float64_product(a, b, "2d_3d", sizes)
    offs = torch.tensor(np.cumsum(sizes), dtype=torch.int32, device="cuda")
    worst = assert_within_bound(grouped_mm(a, b, offs, form="2d_3d"), exact, abs_dot, k, "triton")
    worst_torch = assert_within_bound(torch._grouped_mm(a, b, offs=offs), exact, abs_dot, k, "torch._grouped_mm")
    print(f"\nMoE 8 x [2048, 4096] x [4096, 4096]: worst |diff| / allowed: triton {worst:.3g}, torch {worst_torch:.3g}")


# -- gemm.scaled ------------------------------------------------------------------------------------
PAIRS = [("tensorwise", "tensorwise"), ("rowwise", "rowwise"), ("1x128", "128x128"), ("1x128", "1x128"),
         ("128x128", "1x128")]  # fmt: skip


def quantized(x: torch.Tensor, scaling: str, fmt: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [rows, K] quantized with amax scales of ``scaling``: FP8 values (float32) and float32 dequant scales."""
    rows, k = x.shape
    block_rows = {"tensorwise": rows, "rowwise": 1, "1x128": 1, "128x128": 128}[scaling]
    block_k = k if scaling in ("tensorwise", "rowwise") else 128
    blocks = x.reshape(rows // block_rows, block_rows, k // block_k, block_k)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12)
    scale = amax / torch.finfo(fmt).max
    values = (blocks / scale).to(fmt).float().reshape(rows, k)
    return values, scale.reshape(rows // block_rows, k // block_k).float()


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(("scaling_a", "scaling_b"), PAIRS)
def test_scaled_through_torch_scaled_mm_within_the_bound(scaling_a: str, scaling_b: str, out_dtype: str) -> None:
    m, n, k = 256, 512, 512
    generator = torch.Generator(device="cuda").manual_seed(5)
    x = torch.randn((m, k), device="cuda", generator=generator)
    w = torch.randn((n, k), device="cuda", generator=generator)
    a, scale_a = quantized(x, scaling_a, torch.float8_e4m3fn)
    b, scale_b = quantized(w, scaling_b, torch.float8_e4m3fn)
    params = {"scaling_a": scaling_a, "scaling_b": scaling_b, "format_a": "float8_e4m3fn",
              "format_b": "float8_e4m3fn", "out_dtype": out_dtype}  # fmt: skip
    uses_scaled_mm = fast.gemm._scaled_mm_runs(a, b, (scaling_a, scaling_b), ("float8_e4m3fn",) * 2, out_dtype)
    out = scaled(a, b, scale_a, scale_b, **params)["out"].cpu().numpy()
    ref = reference.gemm.scaled(*(t.cpu().numpy() for t in (a, b, scale_a, scale_b)), **params)
    rtol = 0.00785 if out_dtype == "bfloat16" else 2.0**-21
    diff = np.abs(out - ref["out"])
    excess = np.maximum(diff - rtol * np.abs(ref["out"]), 0)
    worst = float(np.divide(excess, ref["abs_dot"], out=np.zeros_like(excess), where=ref["abs_dot"] > 0).max())
    print(f"\n{scaling_a} x {scaling_b} {out_dtype}: _scaled_mm {uses_scaled_mm}, worst excess / abs_dot {worst:.3g}")
    assert (diff <= rtol * np.abs(ref["out"]) + 2.0**-9 * ref["abs_dot"]).all(), f"worst {worst} vs mtol 2**-9"


def test_blockwise_scaled_mm_is_used_on_hopper_with_cuda_12_9() -> None:
    """The claim of fast.gemm and the torch backend: sm90 and CUDA >= 12.9 run the blockwise pairs natively."""
    cuda = tuple(int(part) for part in str(torch.version.cuda).split(".")[:2])
    if torch.cuda.get_device_capability() != (9, 0) or cuda < (12, 9):
        pytest.skip("needs sm90 and CUDA >= 12.9")
    a = torch.zeros((256, 512), device="cuda")
    b = torch.zeros((512, 512), device="cuda")
    for pair in PAIRS:
        assert fast.gemm._scaled_mm_runs(a, b, pair, ("float8_e4m3fn",) * 2, "bfloat16")
