"""``reference.int4``: the tinygemm layout against torch's own bytes, hand-computed words, round trips,
the single-rounding dequant against exact rational arithmetic, the two-rounding one against torch's
bfloat16 ops, and argument errors.

Oracles: the golden vectors ``tests/vectors/tinygemm_int4pack_torch211_h100.npz`` (``_convert_weight_to_int4pack``
on an H100); Python's ``fractions.Fraction`` (exact ``(q - 8) * s + z``, then round half to even by hand);
torch CPU bfloat16 arithmetic, which is torchao's Python dequant verbatim; a loop over the
layout's index formula written from the torch source comment, independent of the reference's
vectorized indexing.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from reference.int4 import (
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
RNG = np.random.default_rng(20261122)


def bf16(bits: np.ndarray) -> np.ndarray:
    """float32 carriers of bfloat16 bit patterns."""
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def high_first(q: np.ndarray) -> np.ndarray:
    """The uint8 [N, K/2] form torch >= 2.5 takes: even k in the high nibble."""
    return ((q[:, 0::2] << 4) | q[:, 1::2]).astype(np.uint8)


def pack_by_loop(q: np.ndarray, ikt: int) -> np.ndarray:
    """The layout one word at a time, from int4mm.cu's comment: lane t reads row t // 4 and columns
    kb = (kt * ikt + 2 * j) * 16 + 2 * (t % 4) + {0, 8, 16, 24} (even nibbles) and + 1 (odd nibbles)."""
    n, k = q.shape
    n_tiles, k_tiles = -(-n // 8), k // (ikt * 16)
    out = np.zeros((n_tiles, k_tiles, 32, ikt // 2), dtype=np.uint32)
    for nt in range(n_tiles):
        for kt in range(k_tiles):
            for t in range(32):
                row = nt * 8 + t // 4
                if row >= n:
                    continue
                for j in range(ikt // 2):
                    kb = (kt * ikt + 2 * j) * 16 + 2 * (t % 4)
                    word = 0
                    for m in range(4):
                        word |= int(q[row, kb + 8 * m]) << (4 * m)
                        word |= int(q[row, kb + 8 * m + 1]) << (4 * m + 16)
                    out[nt, kt, t, j] = word
    return out.view(np.int32)


# %% Golden vectors: torch's bytes


@pytest.mark.parametrize(("n", "k", "ikt"), [(64, 256, 2), (128, 512, 4)])
def test_pack_reproduces_torchs_bytes(n: int, k: int, ikt: int) -> None:
    vectors = np.load(VECTORS)
    q, expected = vectors[f"q_{n}_{k}_{ikt}"], vectors[f"packed_{n}_{k}_{ikt}"]
    assert expected.shape == (n // 8, k // (ikt * 16), 32, ikt // 2)
    np.testing.assert_array_equal(tinygemm_pack(q, inner_k_tiles=ikt)["packed"], expected)
    form = tinygemm_pack(q_uint8=high_first(q), inner_k_tiles=ikt, input_form="uint8")["packed"]
    np.testing.assert_array_equal(form, expected)
    np.testing.assert_array_equal(tinygemm_unpack(expected, inner_k_tiles=ikt)["q"], q)


def test_loop_oracle_agrees_with_torchs_bytes() -> None:
    """The second oracle itself is pinned to the golden vectors."""
    vectors = np.load(VECTORS)
    np.testing.assert_array_equal(pack_by_loop(vectors["q_64_256_2"], 2), vectors["packed_64_256_2"])


# %% Hand-computed words and every inner_k_tiles


def test_first_lane_holds_k_0_8_16_24_then_the_odd_partners() -> None:
    q = np.array([list(range(16)) + list(range(15, -1, -1))], dtype=np.int32)
    words = tinygemm_pack(q, inner_k_tiles=2)["packed"].view(np.uint32)
    # lane 0: nibbles q[0], q[8], q[16], q[24], q[1], q[9], q[17], q[25] = 0, 8, 15, 7, 1, 9, 14, 6
    assert [hex(int(w)) for w in words[0, 0, :4, 0]] == ["0x6e917f80", "0x4cb35da2", "0x2ad53bc4", "0x8f719e6"]
    assert not words[0, 0, 4:].any(), "lanes 4..31 are rows 1..7: zero padding"


@pytest.mark.parametrize("ikt", INNER_K_TILES)
@pytest.mark.parametrize("n", [1, 7, 8, 13, 24])
def test_pack_matches_the_loop_and_unpack_inverts_it(ikt: int, n: int) -> None:
    k = ikt * 16 * 3
    q = RNG.integers(0, 16, (n, k)).astype(np.int32)
    packed = tinygemm_pack(q, inner_k_tiles=ikt)["packed"]
    np.testing.assert_array_equal(packed, pack_by_loop(q, ikt))
    unpacked = tinygemm_unpack(packed, inner_k_tiles=ikt)["q"]
    assert unpacked.shape == (8 * -(-n // 8), k)
    np.testing.assert_array_equal(unpacked[:n], q)
    assert not unpacked[n:].any(), "padding rows unpack to zeros"


@pytest.mark.parametrize("ikt", INNER_K_TILES)
def test_pack_inverts_unpack_for_every_word(ikt: int) -> None:
    words = RNG.integers(0, 1 << 32, (3, 2, 32, ikt // 2), dtype=np.uint64).astype(np.uint32).view(np.int32)
    q = tinygemm_unpack(words, inner_k_tiles=ikt)["q"]
    assert q.min() >= 0 and q.max() <= 15
    np.testing.assert_array_equal(tinygemm_pack(q, inner_k_tiles=ikt)["packed"], words)


# %% scales_and_zeros


def test_scales_and_zeros_matches_torchaos_cat_and_transpose() -> None:
    scales, zeros = (bf16(RNG.integers(0, 1 << 16, (2, 5, 3))) for _ in range(2))  # an MoE-style leading dim
    ours = tinygemm_scales_and_zeros(scales, zeros)["scales_and_zeros"]
    s, z = (torch.from_numpy(bf16_bits(a).view(np.int16)).view(torch.bfloat16) for a in (scales, zeros))
    theirs = torch.cat([s.unsqueeze(-1), z.unsqueeze(-1)], dim=-1).transpose(-3, -2).contiguous()
    np.testing.assert_array_equal(bf16_bits(ours), theirs.view(torch.int16).numpy().view(np.uint16))
    back = tinygemm_unpack_scales_and_zeros(ours)
    np.testing.assert_array_equal(back["scales"].view(np.uint32), scales.view(np.uint32))
    np.testing.assert_array_equal(back["zeros"].view(np.uint32), zeros.view(np.uint32))


# %% Dequant: one rounding (exact arithmetic oracle) and two (torch bf16 ops)


def round_half_even_bf16(value: Fraction) -> float:
    """An exact rational rounded to bfloat16, nearest even, by hand (finite, normal or subnormal)."""
    if value == 0:
        return 0.0
    sign, magnitude = (-1 if value < 0 else 1), abs(value)
    exponent = math.floor(math.log2(magnitude))
    while Fraction(2) ** exponent > magnitude:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= magnitude:
        exponent += 1
    quantum = Fraction(2) ** max(exponent - 7, -133)
    steps = magnitude / quantum
    floor = steps.numerator // steps.denominator
    rest = steps - floor
    up = rest > Fraction(1, 2) or (rest == Fraction(1, 2) and floor % 2 == 1)
    return sign * float((floor + up) * quantum)


def random_scales_and_zeros(shape: tuple[int, ...], spread: float) -> np.ndarray:
    """bfloat16 values over a range of exponents, both signs, zeros and subnormals sprinkled in."""
    values = RNG.standard_normal(shape) * np.exp2(RNG.uniform(-spread, spread, shape))
    bits = bf16_bits(values.astype(np.float32))
    bits[RNG.random(shape) < 0.02] = 0x0001  # the smallest subnormal
    bits[RNG.random(shape) < 0.02] = 0x8000  # -0
    return bf16(bits)


@pytest.mark.parametrize("spread", [2.0, 40.0, 120.0])
def test_fma_dequant_is_the_exact_value_rounded_once(spread: float) -> None:
    ikt, gs = 2, 32
    packed = RNG.integers(0, 1 << 32, (2, 2, 32, 1), dtype=np.uint64).astype(np.uint32).view(np.int32)
    sz = random_scales_and_zeros((2, 16, 2), spread)
    w = tinygemm_dequant(packed, sz, inner_k_tiles=ikt, group_size=gs)["w"]
    q = tinygemm_unpack(packed, inner_k_tiles=ikt)["q"]
    for n, k in zip(RNG.integers(0, 16, 400), RNG.integers(0, 64, 400), strict=True):
        s, z = sz[k // gs, n]
        exact = Fraction(int(q[n, k]) - 8) * Fraction(float(s)) + Fraction(float(z))
        expected = round_half_even_bf16(exact)
        if expected == 0.0:
            continue  # the sign of an exact zero is IEEE's; checked separately
        assert w[n, k] == expected, f"q={q[n, k]} s={float(s)!r} z={float(z)!r}: {w[n, k]!r} != {expected!r}"


def test_fma_is_single_rounding_where_float32_would_round_twice() -> None:
    """3 * 1.0078125 = 3.0234375 is a bfloat16 midpoint; - 2**-30 puts the exact value below it."""
    packed = np.zeros((1, 1, 32, 1), dtype=np.uint32)
    packed[0, 0, :4, 0] = 0xBBBBBBBB  # row 0: q = 11 everywhere (q - 8 = 3)
    packed[0, 0, 4:, 0] = 0x88888888  # rows 1..7: q = 8
    sz = np.zeros((1, 8, 2), dtype=np.float32)
    sz[:, :, 0], sz[:, :, 1] = 1.0, 0.5
    sz[0, 0] = [1.0078125, -(2.0**-30)]
    words = packed.view(np.int32)
    fma = tinygemm_dequant(words, sz, inner_k_tiles=2, group_size=32, rounding="fma")["w"]
    mul_add = tinygemm_dequant(words, sz, inner_k_tiles=2, group_size=32, rounding="mul_add")["w"]
    assert set(fma[0].tolist()) == {3.015625}
    assert set(mul_add[0].tolist()) == {3.03125}
    naive = np.float32(np.float32(3.0) * np.float32(1.0078125) + np.float32(-(2.0**-30)))
    assert float(naive) == 3.0234375, "float32 rounds the exact value onto the bfloat16 midpoint"
    assert (fma[1:] == 0.5).all() and (mul_add[1:] == 0.5).all()


@pytest.mark.parametrize("ikt", INNER_K_TILES)
@pytest.mark.parametrize("gs", GROUP_SIZES)
def test_mul_add_dequant_is_torchaos_bfloat16_ops(ikt: int, gs: int) -> None:
    k_tiles = max(1, gs // (ikt * 16)) * 2
    packed = RNG.integers(0, 1 << 32, (2, k_tiles, 32, ikt // 2), dtype=np.uint64).astype(np.uint32).view(np.int32)
    k = k_tiles * ikt * 16
    sz = random_scales_and_zeros((k // gs, 16, 2), 20.0)
    ours = tinygemm_dequant(packed, sz, inner_k_tiles=ikt, group_size=gs, rounding="mul_add")["w"]
    q = torch.from_numpy(tinygemm_unpack(packed, inner_k_tiles=ikt)["q"])
    sz_t = torch.from_numpy(bf16_bits(sz).view(np.int16)).view(torch.bfloat16)
    scale = sz_t[..., 0].t().repeat_interleave(gs, dim=1)
    zero = sz_t[..., 1].t().repeat_interleave(gs, dim=1)
    theirs = (q - 8.0).to(torch.bfloat16)  # torchao _dequantize_affine_tinygemm, in place as there
    theirs *= scale
    theirs += zero
    np.testing.assert_array_equal(bf16_bits(ours), theirs.view(torch.int16).numpy().view(np.uint16))


def test_the_roundings_differ_on_about_an_eighth_of_random_weights() -> None:
    packed = RNG.integers(0, 1 << 32, (16, 8, 32, 4), dtype=np.uint64).astype(np.uint32).view(np.int32)
    sz = bf16(bf16_bits((RNG.standard_normal((8, 128, 2)) * 0.05).astype(np.float32)))
    fma, mul_add = (
        tinygemm_dequant(packed, sz, inner_k_tiles=8, group_size=128, rounding=r)["w"] for r in ("fma", "mul_add")
    )
    assert 0.05 < float(np.mean(fma != mul_add)) < 0.2


def test_dequant_special_values_follow_ieee() -> None:
    packed = np.full((1, 1, 32, 1), 0x88888888, dtype=np.uint32)  # q = 8: w = 0 * s + z
    packed[0, 0, 4:8, 0] = 0x99999999  # row 1: q = 9: w = s + z
    sz = np.zeros((1, 8, 2), dtype=np.float32)
    sz[0, 0] = [np.inf, 1.0]  # 0 * Inf: NaN
    sz[0, 1] = [np.inf, -np.inf]  # Inf - Inf: NaN
    sz[0, 2] = [1.0, -0.0]  # +0 + -0: +0
    sz[0, 3] = [-1.0, -0.0]  # -0 + -0: -0
    sz[0, 4] = [bf16(np.array([0x7F00]))[0], 0.0]  # 0 * 2**127
    w = tinygemm_dequant(packed.view(np.int32), sz, inner_k_tiles=2, group_size=32)["w"]
    assert np.isnan(w[0]).all() and np.isnan(w[1]).all()
    assert (w[2].view(np.uint32) == 0).all() and (w[3].view(np.uint32) == 0x80000000).all()
    assert (w[4] == 0).all()
    big = np.full((1, 1, 32, 1), 0xFFFFFFFF, dtype=np.uint32)  # q = 15: 7 * s + z
    big[0, 0, 4:8, 0] = 0  # row 1: q = 0: -8 * s + z
    sz = np.zeros((1, 8, 2), dtype=np.float32)
    sz[0, 0, 0] = bf16(np.array([0x7F7F]))[0]  # the largest finite bfloat16: 7 * s overflows to Inf
    sz[0, 1] = bf16(np.array([0x7E00, 0x7F40]))  # -8 * 2**125 + 1.5 * 2**127 = -2**126: finite, though -8s is not
    w = tinygemm_dequant(big.view(np.int32), sz, inner_k_tiles=2, group_size=32)["w"]
    assert np.isposinf(w[0]).all() and (w[1] == -(2.0**126)).all()


# %% mm


def test_mm_is_the_float64_product_of_the_dequantized_weight() -> None:
    packed = RNG.integers(0, 1 << 32, (2, 2, 32, 2), dtype=np.uint64).astype(np.uint32).view(np.int32)
    sz = bf16(bf16_bits((RNG.standard_normal((2, 16, 2)) * 0.05).astype(np.float32)))
    a = bf16(bf16_bits(RNG.standard_normal((3, 128)).astype(np.float32)))
    out = tinygemm_mm(a, packed, sz, inner_k_tiles=4, group_size=64)["out"]
    w = tinygemm_dequant(packed, sz, inner_k_tiles=4, group_size=64)["w"]
    exact = [[math.fsum(float(x) * float(y) for x, y in zip(row, col, strict=True)) for col in w] for row in a]
    expected = [[round_half_even_bf16(Fraction(v)) for v in row] for row in exact]
    np.testing.assert_array_equal(out, np.array(expected, dtype=np.float32))


# %% Argument errors


def test_errors_name_the_constraint() -> None:
    q = np.zeros((8, 64), dtype=np.int32)
    with pytest.raises(ValueError, match=r"K=64, but K must be a multiple of inner_k_tiles \* 16 = 128"):
        tinygemm_pack(q, inner_k_tiles=8)
    with pytest.raises(ValueError, match=r"inner_k_tiles=6"):
        tinygemm_pack(q, inner_k_tiles=6)
    bad = q.copy()
    bad[3, 5] = 16
    with pytest.raises(ValueError, match=r"q\[3, 5\]=16, but q must hold values 0..15"):
        tinygemm_pack(bad, inner_k_tiles=2)
    with pytest.raises(ValueError, match=r"q_uint8="):
        tinygemm_pack(q, inner_k_tiles=2, input_form="uint8")
    with pytest.raises(TypeError, match=r"q.dtype=int64"):
        tinygemm_pack(q.astype(np.int64), inner_k_tiles=2)
    packed = tinygemm_pack(q, inner_k_tiles=2)["packed"]
    sz = np.zeros((2, 8, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=r"group_size=48"):
        tinygemm_dequant(packed, sz, inner_k_tiles=2, group_size=48)
    with pytest.raises(ValueError, match=r"K=64 and group_size=128, but group_size must divide K"):
        tinygemm_dequant(packed, sz, inner_k_tiles=2, group_size=128)
    with pytest.raises(ValueError, match=r"scales_and_zeros.shape=\(8, 2, 2\).*\[2, 8, 2\]"):
        tinygemm_dequant(packed, np.zeros((8, 2, 2), dtype=np.float32), inner_k_tiles=2, group_size=32)
    with pytest.raises(TypeError, match=r"scales_and_zeros.*bfloat16"):
        tinygemm_dequant(packed, sz + np.float32(0.1), inner_k_tiles=2, group_size=32)
    with pytest.raises(ValueError, match=r"packed.shape=\(1, 2, 32, 1\).*inner_k_tiles=4"):
        tinygemm_unpack(packed, inner_k_tiles=4)
