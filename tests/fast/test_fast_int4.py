"""``fast.int4`` on CPU: the torch paths against the NumPy reference, the Triton kernels in Triton's
interpreter against the torch paths, torch's golden bytes, the double-rounding trap, and errors.

The reference is the oracle here (the conformance engine checks the same through the specs); the
golden vectors are torch's own ``_convert_weight_to_int4pack`` output on an H100.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fast._triton
import fast.int4
import reference.int4
from fast.cast import PATH_ENV
from fast.int4 import (
    GROUP_SIZES,
    INNER_K_TILES,
    tinygemm_dequant,
    tinygemm_mm,
    tinygemm_pack,
    tinygemm_scales_and_zeros,
    tinygemm_unpack,
    tinygemm_unpack_scales_and_zeros,
)

VECTORS = Path(__file__).parents[1] / "vectors" / "tinygemm_int4pack_torch211_h100.npz"
RNG = np.random.default_rng(5)


def words(n_tiles: int, k_tiles: int, ikt: int) -> np.ndarray:
    return RNG.integers(0, 1 << 32, (n_tiles, k_tiles, 32, ikt // 2), dtype=np.uint64).astype(np.uint32).view(np.int32)


def bf16_tensor(bits: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(bits, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)


def bf16_carrier(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def tensor_bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16)


def carrier_bits(a: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) >> 16).astype(np.uint16)


def sz_bits(groups: int, n8: int, wide: bool) -> np.ndarray:
    """bfloat16 scale/zero patterns: every pattern (NaN, Inf, subnormals) or moderate normal values."""
    if wide:
        return RNG.integers(0, 1 << 16, (groups, n8, 2)).astype(np.uint16)
    values = (RNG.standard_normal((groups, n8, 2)) * np.exp2(RNG.uniform(-30, 30, (groups, n8, 2)))).astype(np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def assert_bf16_equal(got: torch.Tensor, expected: np.ndarray, what: str) -> None:
    """bfloat16 bits equal, any NaN equal to any NaN (the spec compares nan_equal)."""
    __tracebackhide__ = True
    ours, theirs = tensor_bits(got), carrier_bits(expected)
    nan = (ours & 0x7FFF > 0x7F80) & (theirs & 0x7FFF > 0x7F80)
    bad = np.flatnonzero((ours != theirs) & ~nan)
    first = [(hex(ours.flat[i]), hex(theirs.flat[i])) for i in bad[:4]]
    assert bad.size == 0, f"{bad.size} differ [{what}]: first {first}"


@pytest.fixture
def torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, "torch")


def on_both_paths(monkeypatch: pytest.MonkeyPatch, call: Callable[[], Any]) -> tuple[Any, Any]:
    """``call()`` with the Triton kernel in the interpreter, then with the torch path."""
    results = []
    for path in ("triton", "torch"):
        monkeypatch.setenv(PATH_ENV, path)
        if path == "triton":
            monkeypatch.setenv("TRITON_INTERPRET", "1")
        with np.errstate(all="ignore"):
            results.append(call())
    return results[0], results[1]


# %% Torch paths against the reference


@pytest.mark.usefixtures("torch_path")
@pytest.mark.parametrize("ikt", INNER_K_TILES)
@pytest.mark.parametrize("n", [1, 9, 24])
def test_pack_unpack_match_the_reference(ikt: int, n: int) -> None:
    q = RNG.integers(0, 16, (n, ikt * 32)).astype(np.int32)
    expected = reference.int4.tinygemm_pack(q, inner_k_tiles=ikt)["packed"]
    packed = tinygemm_pack(torch.from_numpy(q), inner_k_tiles=ikt)["packed"]
    np.testing.assert_array_equal(packed.numpy(), expected)
    u8 = torch.from_numpy(((q[:, 0::2] << 4) | q[:, 1::2]).astype(np.uint8))
    np.testing.assert_array_equal(tinygemm_pack(q_uint8=u8, inner_k_tiles=ikt, input_form="uint8")["packed"], expected)
    random_words = words(2, 3, ikt)
    np.testing.assert_array_equal(
        tinygemm_unpack(torch.from_numpy(random_words), inner_k_tiles=ikt)["q"].numpy(),
        reference.int4.tinygemm_unpack(random_words, inner_k_tiles=ikt)["q"],
    )


@pytest.mark.usefixtures("torch_path")
@pytest.mark.parametrize("ikt", INNER_K_TILES)
@pytest.mark.parametrize("gs", GROUP_SIZES)
@pytest.mark.parametrize("rounding", ["fma", "mul_add"])
def test_dequant_matches_the_reference(ikt: int, gs: int, rounding: str) -> None:
    k_tiles = max(1, gs // (16 * ikt)) * 2
    packed = words(2, k_tiles, ikt)
    for wide in (False, True):
        bits = sz_bits(k_tiles * 16 * ikt // gs, 16, wide)
        expected = reference.int4.tinygemm_dequant(
            packed, bf16_carrier(bits), inner_k_tiles=ikt, group_size=gs, rounding=rounding
        )["w"]
        with np.errstate(all="ignore"):
            got = tinygemm_dequant(
                torch.from_numpy(packed), bf16_tensor(bits), inner_k_tiles=ikt, group_size=gs, rounding=rounding
            )["w"]
        assert_bf16_equal(got, expected, f"ikt={ikt} gs={gs} {rounding} wide={wide}")


@pytest.mark.usefixtures("torch_path")
def test_scales_and_zeros_and_mm_match_the_reference() -> None:
    scales, zeros = (RNG.integers(0, 1 << 16, (2, 8, 3)).astype(np.uint16) for _ in range(2))
    sz = tinygemm_scales_and_zeros(bf16_tensor(scales), bf16_tensor(zeros))["scales_and_zeros"]
    expected = reference.int4.tinygemm_scales_and_zeros(bf16_carrier(scales), bf16_carrier(zeros))
    np.testing.assert_array_equal(tensor_bits(sz), carrier_bits(expected["scales_and_zeros"]))
    back = tinygemm_unpack_scales_and_zeros(sz)
    np.testing.assert_array_equal(tensor_bits(back["scales"]), scales)
    np.testing.assert_array_equal(tensor_bits(back["zeros"]), zeros)
    packed = words(2, 2, 4)
    sz_b = carrier_bits((RNG.standard_normal((2, 16, 2)) * 0.05).astype(np.float32))
    a_bits = carrier_bits(RNG.standard_normal((3, 128)).astype(np.float32))
    out = tinygemm_mm(bf16_tensor(a_bits), torch.from_numpy(packed), bf16_tensor(sz_b), inner_k_tiles=4, group_size=64)
    a_ref, sz_ref = bf16_carrier(a_bits), bf16_carrier(sz_b)
    ref = reference.int4.tinygemm_mm(a_ref, packed, sz_ref, inner_k_tiles=4, group_size=64)["out"]
    got = tensor_bits(out["out"]).astype(np.uint32) << 16
    np.testing.assert_allclose(got.view(np.float32), ref, rtol=2**-7, atol=1e-30)


# %% Golden vectors on both paths


@pytest.mark.parametrize(("n", "k", "ikt"), [(64, 256, 2), (128, 512, 4)])
def test_pack_reproduces_torchs_bytes(monkeypatch: pytest.MonkeyPatch, n: int, k: int, ikt: int) -> None:
    pytest.importorskip("triton")
    vectors = np.load(VECTORS)
    q = torch.from_numpy(vectors[f"q_{n}_{k}_{ikt}"])
    u8 = ((q[:, 0::2] << 4) | q[:, 1::2]).to(torch.uint8)
    for form, kwargs in (("int32", {"q": q}), ("uint8", {"q_uint8": u8})):
        kernel, torch_path = on_both_paths(
            monkeypatch, lambda kwargs=kwargs, form=form: tinygemm_pack(**kwargs, inner_k_tiles=ikt, input_form=form)
        )
        np.testing.assert_array_equal(kernel["packed"].numpy(), vectors[f"packed_{n}_{k}_{ikt}"])
        np.testing.assert_array_equal(torch_path["packed"].numpy(), vectors[f"packed_{n}_{k}_{ikt}"])


# %% The Triton kernels in the interpreter against the torch paths


@pytest.mark.parametrize("ikt", INNER_K_TILES)
def test_pack_and_unpack_kernels(monkeypatch: pytest.MonkeyPatch, ikt: int) -> None:
    pytest.importorskip("triton")
    for n in (5, 17):  # ragged: the last n-tile is part padding
        q = torch.from_numpy(RNG.integers(0, 16, (n, ikt * 16 * 3)).astype(np.int32))
        kernel, torch_path = on_both_paths(monkeypatch, lambda q=q: tinygemm_pack(q, inner_k_tiles=ikt)["packed"])
        assert torch.equal(kernel, torch_path)
        u8 = ((q[:, 0::2] << 4) | q[:, 1::2]).to(torch.uint8)
        kernel, _ = on_both_paths(
            monkeypatch, lambda u8=u8: tinygemm_pack(q_uint8=u8, inner_k_tiles=ikt, input_form="uint8")["packed"]
        )
        assert torch.equal(kernel, torch_path)
    packed = torch.from_numpy(words(3, 2, ikt))
    kernel, torch_path = on_both_paths(monkeypatch, lambda: tinygemm_unpack(packed, inner_k_tiles=ikt)["q"])
    assert torch.equal(kernel, torch_path)


@pytest.mark.parametrize("ikt", INNER_K_TILES)
@pytest.mark.parametrize("gs", GROUP_SIZES)
def test_dequant_kernel(monkeypatch: pytest.MonkeyPatch, ikt: int, gs: int) -> None:
    """Every word, scales and zeros of every bfloat16 pattern (NaN, Inf, subnormals), both roundings."""
    pytest.importorskip("triton")
    k_tiles = max(1, gs // (16 * ikt)) * 2
    packed = torch.from_numpy(words(2, k_tiles, ikt))
    sz = bf16_tensor(sz_bits(k_tiles * 16 * ikt // gs, 16, wide=True))
    for rounding in ("fma", "mul_add"):
        kernel, torch_path = on_both_paths(
            monkeypatch,
            lambda rounding=rounding: tinygemm_dequant(packed, sz, inner_k_tiles=ikt, group_size=gs, rounding=rounding)[
                "w"
            ],
        )
        nan = kernel.isnan() & torch_path.isnan()
        assert torch.equal(kernel.view(torch.int16)[~nan], torch_path.view(torch.int16)[~nan]), rounding


def crafted_trap() -> tuple[torch.Tensor, torch.Tensor]:
    """Row 0: q = 11, s = 1.0078125, z = -2**-30 (exact 3.0234375 - 2**-30 rounds down to 3.015625)."""
    packed = torch.full((1, 1, 32, 1), 0x88888888 - (1 << 32), dtype=torch.int32)
    packed[0, 0, :4, 0] = 0xBBBBBBBB - (1 << 32)
    sz = torch.tensor([[[1.0, 0.5]] * 8])
    sz[0, 0] = torch.tensor([1.0078125, -(2.0**-30)])
    return packed, sz.to(torch.bfloat16)


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_single_rounding_where_a_float32_fma_would_round_twice(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    if path == "triton":
        pytest.importorskip("triton")
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv(PATH_ENV, path)
    packed, sz = crafted_trap()
    fma = tinygemm_dequant(packed, sz, inner_k_tiles=2, group_size=32)["w"]
    mul_add = tinygemm_dequant(packed, sz, inner_k_tiles=2, group_size=32, rounding="mul_add")["w"]
    assert set(fma[0].tolist()) == {3.015625} and set(mul_add[0].tolist()) == {3.03125}
    naive = torch.addcmul(sz[0, 0, 1].float(), torch.tensor(3.0), sz[0, 0, 0].float()).to(torch.bfloat16)
    assert naive.item() == 3.03125, "float32 then bfloat16 rounds twice"


# %% Errors and path selection


def test_errors_name_the_constraint() -> None:
    q = torch.zeros((8, 64), dtype=torch.int32)
    with pytest.raises(ValueError, match=r"K=64, but K must be a multiple of inner_k_tiles \* 16 = 128"):
        tinygemm_pack(q, inner_k_tiles=8)
    with pytest.raises(ValueError, match=r"inner_k_tiles=3"):
        tinygemm_unpack(torch.zeros((1, 1, 32, 1), dtype=torch.int32), inner_k_tiles=3)
    bad = q.clone()
    bad[2, 7] = -1
    with pytest.raises(ValueError, match=r"q\[2, 7\]=-1, but q must hold values 0..15"):
        tinygemm_pack(bad, inner_k_tiles=2)
    with pytest.raises(TypeError, match=r"q_uint8.dtype=int32, but q_uint8 must be uint8"):
        tinygemm_pack(q_uint8=q, inner_k_tiles=2, input_form="uint8")
    packed = tinygemm_pack(q, inner_k_tiles=2)["packed"]
    with pytest.raises(ValueError, match=r"group_size=16"):
        tinygemm_dequant(packed, torch.zeros((4, 8, 2), dtype=torch.bfloat16), inner_k_tiles=2, group_size=16)
    with pytest.raises(ValueError, match=r"scales_and_zeros.shape=\(8, 2, 2\).*\[2, 8, 2\]"):
        tinygemm_dequant(packed, torch.zeros((8, 2, 2), dtype=torch.bfloat16), inner_k_tiles=2, group_size=32)
    with pytest.raises(TypeError, match=r"scales_and_zeros.dtype=float32, but scales_and_zeros must be bfloat16"):
        tinygemm_dequant(packed, torch.zeros((2, 8, 2)), inner_k_tiles=2, group_size=32)
    with pytest.raises(ValueError, match=r"a.shape=\(1, 3\).*K=64"):
        sz = torch.zeros((2, 8, 2), dtype=torch.bfloat16)
        tinygemm_mm(torch.zeros((1, 3), dtype=torch.bfloat16), packed, sz, inner_k_tiles=2, group_size=32)


def test_forced_triton_on_cpu_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        tinygemm_unpack(torch.zeros((1, 1, 32, 1), dtype=torch.int32), inner_k_tiles=2)


def test_forced_triton_without_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast._triton, "triton", None)
    monkeypatch.setenv(PATH_ENV, "triton")
    with pytest.raises(RuntimeError, match="triton is not installed"):
        tinygemm_unpack(torch.zeros((1, 1, 32, 1), dtype=torch.int32), inner_k_tiles=2)
