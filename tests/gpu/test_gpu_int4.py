"""``fast.int4`` and torch's tinygemm ops on a CUDA device (run by ``nox -s gpu``).

- torch's ``_convert_weight_to_int4pack`` equals ``reference.int4.tinygemm_pack`` and ``fast.int4``'s
  Triton pack (both weight forms), for every ``inner_k_tiles`` and a ragged ``N``;
- ``unpack(pack(q)) == q`` with the Triton kernels, for our pack and torch's;
- the Triton dequant equals the kernel's own dequant, ``_weight_int4pack_mm(eye(K), packed, gs, sz).t()``
  (``a @ w.T`` with ``a = eye(K)`` is ``w.T``), bit for bit, for every ``inner_k_tiles`` and group size
  (``N = 256``, ``K = 2048``, and ``K = 8192`` once), with the hardware ``fma.rn.bf16x2`` and with the
  float32 emulation, on scales and zeros that include double-rounding traps (a bfloat16 midpoint
  product plus a tiny zero); the two-rounding dequant differs from it on some weights, so the
  comparison can fail.  The identity matmul turns ``-0`` into ``+0`` (an fp32 accumulator starts at
  ``+0``), so zeros are compared without their sign; inputs are finite;
- the two-rounding dequant equals torchao's Python dequant run by torch on CUDA;
- ``quant.affine``: torchao's formulas run by torch on CUDA divide by a Python number as a multiply
  by the float32 reciprocal (``scalar_division="reciprocal"``), and ``fast`` gives the reference's
  bits on CUDA for both divisions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import fast.int4
from fast.cast import PATH_ENV
from fast.int4 import GROUP_SIZES, INNER_K_TILES, tinygemm_dequant, tinygemm_pack, tinygemm_unpack
from fast.quant import affine as fast_quantize
from reference.int4 import tinygemm_dequant as reference_dequant
from reference.int4 import tinygemm_pack as reference_pack
from reference.quant import affine as reference_quantize

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

K = 2048
"""Columns of the weights here: 8 super-tiles at inner_k_tiles = 8, 8 groups at group_size 256."""


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fast call here runs the Triton kernels (an error if Triton is missing, never a silent fallback)."""
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def random_q(n: int, k: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 16, (n, k), dtype=torch.int32, generator=torch.Generator().manual_seed(seed))


def high_first(q: torch.Tensor) -> torch.Tensor:
    return ((q[:, 0::2] << 4) | q[:, 1::2]).to(torch.uint8)


def torch_pack(q: torch.Tensor, ikt: int) -> torch.Tensor:
    return torch.ops.aten._convert_weight_to_int4pack(high_first(q).cuda().contiguous(), ikt)


@pytest.mark.parametrize("ikt", INNER_K_TILES)
@pytest.mark.parametrize("n", [256, 203])
def test_torch_pack_equals_reference_and_fast(ikt: int, n: int) -> None:
    q = random_q(n, K, seed=ikt * 1000 + n)
    expected = torch_pack(q, ikt).cpu()
    np.testing.assert_array_equal(expected.numpy(), reference_pack(q.numpy(), inner_k_tiles=ikt)["packed"])
    fast_u8 = tinygemm_pack(q_uint8=high_first(q).cuda(), inner_k_tiles=ikt, input_form="uint8")["packed"]
    fast_i32 = tinygemm_pack(q.cuda(), inner_k_tiles=ikt)["packed"]
    assert torch.equal(fast_u8.cpu(), expected) and torch.equal(fast_i32.cpu(), expected)


@pytest.mark.parametrize("ikt", INNER_K_TILES)
@pytest.mark.parametrize("n", [256, 203])
def test_unpack_inverts_pack(ikt: int, n: int) -> None:
    q = random_q(n, K, seed=ikt + n).cuda()
    for packed in (tinygemm_pack(q, inner_k_tiles=ikt)["packed"], torch_pack(q.cpu(), ikt)):
        unpacked = tinygemm_unpack(packed, inner_k_tiles=ikt)["q"]
        assert unpacked.shape == (8 * -(-n // 8), K)
        assert torch.equal(unpacked[:n], q) and not unpacked[n:].any()


def scales_and_zeros(groups: int, n: int, seed: int) -> torch.Tensor:
    """Random bfloat16 scales and zeros, a tenth of them double-rounding traps.

    A trap is s = 1 + m/128 with m odd and z = +-2**-30: (q - 8) * s for odd q - 8 is often a bfloat16
    midpoint, and z puts the exact value just off it (a float32 FMA then lands on the midpoint).
    """
    generator = torch.Generator().manual_seed(seed)
    sz = torch.randn((groups, n, 2), generator=generator) * 0.05
    trap = torch.rand((groups, n), generator=generator) < 0.1
    odd = torch.randint(0, 64, (groups, n), generator=generator) * 2 + 1
    sign = torch.where(torch.rand((groups, n), generator=generator) < 0.5, -1.0, 1.0)
    sz[..., 0] = torch.where(trap, 1.0 + odd / 128.0, sz[..., 0])
    sz[..., 1] = torch.where(trap, sign * 2.0**-30, sz[..., 1])
    return sz.to(torch.bfloat16).cuda()


def unsigned_zero_bits(w: torch.Tensor) -> torch.Tensor:
    """bfloat16 bits with -0 made +0 (the identity matmul cannot produce -0)."""
    bits = w.contiguous().view(torch.int16)
    return torch.where(bits == -32768, torch.zeros_like(bits), bits)


@pytest.mark.parametrize(
    ("ikt", "gs", "k"),
    [(ikt, gs, K) for ikt in INNER_K_TILES for gs in GROUP_SIZES] + [(8, 128, 8192)],
)
def test_dequant_equals_the_kernels_identity_matmul_dequant(ikt: int, gs: int, k: int) -> None:
    """Bits of the dequant (both FMA paths and the reference) against ``_weight_int4pack_mm(eye(K))``, and the unpack.

    The test can fail: the two-rounding dequant must differ from the identity matmul on some weights.
    """
    n = 256
    q = random_q(n, k, seed=gs + ikt + k).cuda()
    packed = torch_pack(q.cpu(), ikt)
    assert torch.equal(tinygemm_unpack(packed, inner_k_tiles=ikt)["q"], q), "unpack(torch's pack(q)) != q"
    sz = scales_and_zeros(k // gs, n, seed=gs * ikt + k)
    eye = torch.eye(k, dtype=torch.bfloat16, device="cuda")
    expected = unsigned_zero_bits(torch.ops.aten._weight_int4pack_mm(eye, packed, gs, sz).t())
    hardware = tinygemm_dequant(packed, sz, inner_k_tiles=ikt, group_size=gs)["w"]
    emulated = torch.empty_like(hardware)
    fast.int4._tile_triton(packed, sz, emulated, ikt, gs, "fma")
    for name, got in (("fma.rn.bf16x2", hardware), ("float32 emulation", emulated)):
        bad = int((unsigned_zero_bits(got) != expected).sum())
        assert bad == 0, f"{name}: {bad} of {expected.numel()} differ from _weight_int4pack_mm(eye)"
    two_roundings = tinygemm_dequant(packed, sz, inner_k_tiles=ikt, group_size=gs, rounding="mul_add")["w"]
    assert (unsigned_zero_bits(two_roundings) != expected).any(), "the identity matmul cannot tell the roundings apart"
    sz_carrier = (sz.cpu().view(torch.int16).numpy().view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    reference = reference_dequant(packed.cpu().numpy(), sz_carrier, inner_k_tiles=ikt, group_size=gs)["w"]
    ref_bits = torch.from_numpy((reference.view(np.uint32) >> 16).astype(np.uint16).view(np.int16))
    assert torch.equal(hardware.cpu().view(torch.int16), ref_bits), "the reference's single rounding"


@pytest.mark.parametrize("gs", GROUP_SIZES)
def test_mul_add_dequant_equals_torchaos_python_dequant(gs: int) -> None:
    ikt, n = 8, 128
    q = random_q(n, K, seed=gs).cuda()
    packed = tinygemm_pack(q, inner_k_tiles=ikt)["packed"]
    sz = scales_and_zeros(K // gs, n, seed=gs + 1)
    theirs = (q - 8.0).to(torch.bfloat16)  # torchao _dequantize_affine_tinygemm
    theirs *= sz[..., 0].t().repeat_interleave(gs, dim=1)
    theirs += sz[..., 1].t().repeat_interleave(gs, dim=1)
    ours = tinygemm_dequant(packed, sz, inner_k_tiles=ikt, group_size=gs, rounding="mul_add")["w"]
    assert torch.equal(ours.view(torch.int16), theirs.view(torch.int16))
    fma = tinygemm_dequant(packed, sz, inner_k_tiles=ikt, group_size=gs)["w"]
    assert 0.01 < float((fma != ours).float().mean()) < 0.3, "the roundings differ on a fraction of weights"


# %% quant.affine on CUDA


def test_torch_on_cuda_divides_by_python_numbers_as_a_reciprocal_multiply() -> None:
    """torchao's asymmetric scale on float32 CUDA tensors is the reference's ``scalar_division="reciprocal"``."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4096, 32)) * np.exp(rng.uniform(-10, 4, (4096, 1)))).astype(np.float32)
    spread = torch.from_numpy(x).cuda().amax(dim=1) - torch.from_numpy(x).cuda().amin(dim=1)
    kwargs: dict[str, Any] = dict(mapping="asymmetric", zero_point_domain="float", dtype="uint4", block_rows=1)
    expected = {
        division: reference_quantize(x, **kwargs, block_cols=32, scalar_division=division)["scale"][:, 0]
        for division in ("divide", "reciprocal")
    }
    cuda_scale = torch.clamp(spread / 15.0, min=torch.finfo(torch.float32).smallest_normal).cpu().numpy()
    np.testing.assert_array_equal(cuda_scale.view(np.uint32), expected["reciprocal"].view(np.uint32))
    assert (cuda_scale != expected["divide"]).any(), "no row showed the difference; draw more rows"


@pytest.mark.parametrize("division", ["divide", "reciprocal"])
@pytest.mark.parametrize("arithmetic", ["float32", "bfloat16", "float16"])
def test_fast_quantize_on_cuda_matches_the_reference(division: str, arithmetic: str) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 256)) * np.exp(rng.uniform(-10, 4, (64, 1)))).astype(np.float32)
    for mapping, domain in [("asymmetric", "float"), ("asymmetric", "int"), ("symmetric", "none")]:
        kwargs: dict[str, Any] = dict(
            mapping=mapping, zero_point_domain=domain, dtype="uint4", block_rows=1, block_cols=32,
            arithmetic=arithmetic, scalar_division=division,
        )  # fmt: skip
        expected = reference_quantize(x, **kwargs)
        got = fast_quantize(torch.from_numpy(x).cuda(), **kwargs)
        for name, value in expected.items():
            np.testing.assert_array_equal(got[name].cpu().numpy().view(value.dtype), value, err_msg=f"{name} {kwargs}")
