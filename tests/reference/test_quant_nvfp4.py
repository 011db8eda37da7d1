"""``reference.quant.nvfp4`` and ``reference.dequant.nvfp4``: hand-computed cases, edge cases and second oracles.

Second oracles, each written here from the sources, sharing no code with the reference:

- ``te_oracle``: TransformerEngine's kernel arithmetic in NumPy float32, with the casts done by
  ml_dtypes (``float8_e4m3fn`` after clamping to ±448, ``float4_e2m1fn``), NaN-ignoring amaxes by
  ``np.nanmax`` and its own packing; a given amax as ``quantize_with_amax`` passes it to the kernels;
- ``te_python_reference``: TE's ``reference_nvfp4.py`` (``_quantize_blockwise_reference`` and the
  comparison-interval ``cast_to_fp4x2``) transcribed to torch, which differs from the kernel on -0.0 and
  NaN only (a named expected difference);
- ``torchao_oracle``: torchao's ``nvfp4_quantize`` with ``per_tensor_amax_to_scale`` in torch (eager CPU);
- torchao itself (0.18, where importable): ``nvfp4_quantize(x, 16, per_tensor_amax_to_scale(amax))`` for a
  given amax;
- ``hadamard_oracle``: the float64 product with the explicit ``diag(s) @ H16 / 4`` matrix, then bfloat16.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import ml_dtypes
import numpy as np
import pytest
import torch

from reference.dequant.nvfp4 import nvfp4 as dequantize
from reference.quant.nvfp4 import RHT_SIGN_MASK, hadamard_16, nvfp4
from reference.stochastic import nvfp4 as stochastic_nvfp4

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
FLT_MAX = np.float32(np.finfo(np.float32).max)
RNG = np.random.default_rng(20261122)


def bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (as float32) by ml_dtypes."""
    return np.asarray(values, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def unpack(data: np.ndarray) -> np.ndarray:
    """Codes from packed bytes, low nibble first."""
    return np.stack([data & 15, data >> 4], axis=-1).reshape(data.shape[0], -1)


# %% Second oracles


def te_oracle(
    x: np.ndarray, *, block: str = "1x16", zero_scale: str = "flt_max", amax: float | None = None
) -> dict[str, np.ndarray]:
    """TE's rowwise NVFP4 of float32 ``x``: float32 arithmetic, ml_dtypes casts; ``amax`` replaces the data's
    (``fminf`` drops a NaN operand, so a NaN amax gives S_enc = FLT_MAX and a NaN block target FLT_MAX)."""
    rows, cols = x.shape
    with np.errstate(all="ignore"):
        magnitude = np.abs(x.astype(np.float32))
        if amax is None:
            amax = np.nan_to_num(np.nanmax(magnitude), nan=0.0) if not np.isnan(magnitude).all() else 0
        amax = np.float32(amax)
        s_enc = FLT_MAX if np.isnan(amax) else np.minimum(np.float32(2688) / amax, FLT_MAX)
        if amax == 0 or s_enc == 0:
            s_enc = np.float32(1)
        s_dec = np.float32(1) / s_enc
        blocks = np.where(np.isnan(magnitude), 0, magnitude).reshape(rows, cols // 16, 16).max(axis=2)
        if block == "16x16":
            blocks = np.repeat(blocks.reshape(rows // 16, 16, cols // 16).max(axis=1), 16, axis=0)
        product = blocks * (s_enc * np.float32(1 / 6))
        target = np.where(np.isnan(product), FLT_MAX, np.minimum(product, FLT_MAX))
        sf = np.clip(target, np.float32(-448), np.float32(448)).astype(ml_dtypes.float8_e4m3fn)
        sf_value = sf.astype(np.float32)
        enc = np.minimum(np.float32(1) / (sf_value * s_dec), FLT_MAX)
        if zero_scale == "zero":
            enc = np.where(sf_value == 0, np.float32(0), enc)
        scaled = (x.reshape(rows, cols // 16, 16) * enc[:, :, None]).reshape(rows, cols)
    codes = scaled.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 15
    codes = np.where(np.isnan(scaled), 7, codes)  # PTX satfinite: NaN -> +MAX_NORM (ml_dtypes gives -0)
    data = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    return {"data": data, "scales": sf.view(np.uint8), "amax": np.array([amax]), "tensor_scale": np.array([s_dec])}


def te_python_reference(x: np.ndarray) -> dict[str, np.ndarray]:
    """TE ``reference_nvfp4.py`` (1x16, no RHT) transcribed to torch float32 ops."""
    t = torch.from_numpy(x.astype(np.float32))
    rows, cols = t.shape
    vec_max = t.view(rows, cols // 16, 16).abs().amax(dim=-1, keepdim=True)
    global_amax = t.abs().max().view(1)
    encode = torch.div(torch.tensor(448.0 * 6.0), global_amax)
    encode = torch.min(encode, torch.tensor(torch.finfo(torch.float32).max))
    if encode == 0:
        encode = torch.tensor(1.0)
    decode = torch.div(1.0, encode)
    decode_scale = vec_max * (encode * torch.reciprocal(torch.tensor(6.0)))
    decode_scale = torch.min(decode_scale, torch.tensor(torch.finfo(torch.float32).max))
    decode_scale = torch.clamp(decode_scale, -448.0, 448.0).to(torch.float8_e4m3fn)
    encode_scale = torch.min(
        torch.div(1.0, decode_scale.to(torch.float32) * decode), torch.tensor(torch.finfo(torch.float32).max)
    )
    clipped = torch.clamp(t.view(rows, cols // 16, 16) * encode_scale, -6.0, 6.0).reshape(rows, cols)
    result = torch.zeros_like(clipped, dtype=torch.uint8)
    intervals = [  # reference_nvfp4.cast_to_fp4x2, interval by interval
        ((clipped >= 0.0) & (clipped <= 0.25), 0), ((clipped > 0.25) & (clipped < 0.75), 1),
        ((clipped >= 0.75) & (clipped <= 1.25), 2), ((clipped > 1.25) & (clipped < 1.75), 3),
        ((clipped >= 1.75) & (clipped <= 2.5), 4), ((clipped > 2.5) & (clipped < 3.5), 5),
        ((clipped >= 3.5) & (clipped <= 5.0), 6), (clipped > 5.0, 7),
        ((clipped >= -0.25) & (clipped < -0.0), 8), ((clipped < -0.25) & (clipped > -0.75), 9),
        ((clipped <= -0.75) & (clipped >= -1.25), 10), ((clipped < -1.25) & (clipped > -1.75), 11),
        ((clipped <= -1.75) & (clipped >= -2.5), 12), ((clipped < -2.5) & (clipped > -3.5), 13),
        ((clipped <= -3.5) & (clipped >= -5.0), 14), (clipped < -5.0, 15),
    ]  # fmt: skip
    for where, code in intervals:
        result[where] = code
    codes = result.numpy()
    return {
        "data": (codes[:, 0::2] + codes[:, 1::2] * 16).astype(np.uint8),
        "scales": decode_scale.view(torch.uint8).reshape(rows, cols // 16).numpy(),
    }


def torchao_oracle(x: np.ndarray, cuda: bool = False) -> dict[str, np.ndarray]:
    """torchao ``nvfp4_quantize(x, 16, per_tensor_amax_to_scale(torch.max(torch.abs(x))))``, eager on CPU, or
    as on CUDA (``cuda``), where ATen divides by a Python scalar ``c`` as a multiplication by ``fl32(1 / c)``."""
    t = torch.from_numpy(x.astype(np.float32))
    rows, cols = t.shape
    amax = torch.max(torch.abs(t)).to(torch.float32)
    max_abs = torch.amax(torch.abs(t.reshape(rows, -1, 16)), dim=-1)
    if cuda:
        per_tensor_scale = amax * torch.tensor(1 / 2688.0, dtype=torch.float32)
        block_scale = max_abs * torch.tensor(1 / 6.0, dtype=torch.float32)
    else:
        per_tensor_scale = amax / (448.0 * 6.0)
        block_scale = max_abs / 6.0
    scaled_block_scales = block_scale / per_tensor_scale
    fp8 = torch.clamp(scaled_block_scales, min=torch.finfo(torch.float8_e4m3fn).tiny, max=448.0).to(torch.float8_e4m3fn)
    reciprocal = (1.0 / per_tensor_scale) / fp8.to(torch.float32)
    scaled = torch.clamp(t.reshape(rows, -1, 16) * reciprocal.unsqueeze(-1), -6.0, 6.0).reshape(rows, cols)
    codes = scaled.numpy().astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 15
    return {
        "data": (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8),
        "scales": fp8.view(torch.uint8).numpy(),
        "tensor_scale": per_tensor_scale.reshape(1).numpy(),
    }


def hadamard_oracle(values: np.ndarray) -> np.ndarray:
    """``bf16(chunk @ (diag(s) @ H16 / 4))`` per 16-element chunk of each row, the product in float64."""
    h = np.array([[(-1) ** bin(i & j).count("1") for j in range(16)] for i in range(16)], dtype=np.float64)
    signs = np.array([-1.0 if (RHT_SIGN_MASK >> i) & 1 else 1.0 for i in range(16)])
    rht = np.diag(signs) @ h / 4
    rows, cols = values.shape
    product = (values.reshape(rows, cols // 16, 16).astype(np.float64) @ rht).reshape(rows, cols)
    return bf16(product.astype(np.float32))


def random_matrix(rows: int, cols: int, spread: float = 3.0) -> np.ndarray:
    """bfloat16 values (as float32) of a normal distribution with per-block magnitudes varying by 2**spread."""
    scale = 2.0 ** RNG.uniform(-spread, spread, size=(rows, cols // 16, 1))
    return bf16((RNG.standard_normal((rows, cols // 16, 16)) * scale).reshape(rows, cols))


# %% Hand-computed cases


def test_scale_512_block_scale_256_gives_exact_ties_to_even() -> None:
    """amax 5.25: S_enc = 2688 / 5.25 = 512 exactly; a block of amax 3 gets v = 3 * fl32(512 / 6) = 256.0000076,
    E4M3 256 (0x78), so enc = 1 / (256 / 512) = 2 exactly and every tie is exact."""
    x = np.zeros((16, 16), np.float32)
    x[0] = [3, -3, 1.5, 1.25, 0.375, 0.125, -0.125, 0, -0.0, 2.5, 0.875, 1.75, 0.25, 0.625, 2.75, 0.5]
    x[1, 0] = 5.25
    out = nvfp4(x, usage="rowwise")
    # 6 -> 7, -6 -> F, 3 -> 5, 2.5 ties to 2 (4), 0.75 ties to 1 (2), 0.25 ties to 0, -0.25 -> 8, 0, -0 -> 8,
    # 5 ties to 4 (6), 1.75 ties to 2 (4), 3.5 ties to 4 (6), 0.5 -> 1, 1.25 ties to 1 (2), 5.5 -> 7, 1 -> 2
    assert unpack(out["data"])[0].tolist() == [7, 15, 5, 4, 2, 0, 8, 0, 8, 6, 4, 6, 1, 2, 7, 2]
    assert out["data"][0].tolist() == [0xF7, 0x45, 0x02, 0x08, 0x68, 0x64, 0x21, 0x27]
    assert out["scales"][:2, 0].tolist() == [0x78, 0x7E]
    assert out["amax"].tolist() == [5.25]
    assert out["tensor_scale"].tolist() == [2.0**-9]


def test_global_scale_rule_edge_cases() -> None:
    """S_enc: 2688 / amax; amax 0 -> 1; amax Inf -> 1 (2688 / Inf = 0); tiny amax -> FLT_MAX (overflow)."""
    zeros = np.zeros((16, 16), np.float32)
    out = nvfp4(zeros)
    assert out["amax"].tolist() == [0.0] and out["tensor_scale"].tolist() == [1.0]
    assert not out["data"].any() and not out["scales"].any() and not out["columnwise_data"].any()
    inf = zeros.copy()
    inf[3, 5] = -np.inf
    out = nvfp4(inf, usage="rowwise")
    assert out["amax"].tolist() == [np.inf] and out["tensor_scale"].tolist() == [1.0]
    assert out["scales"][3, 0] == 0x7E  # min(Inf, FLT_MAX) saturates to 448
    assert unpack(out["data"])[3, 5] == 0xF
    tiny = zeros.copy()
    tiny[0, 0] = 1e-40  # a float32 subnormal: 2688 / 1e-40 overflows
    out = nvfp4(tiny, usage="rowwise")
    assert out["tensor_scale"][0] == np.float32(1) / FLT_MAX
    nan_only = np.full((16, 16), np.nan, np.float32)
    out = nvfp4(nan_only, usage="rowwise")
    assert out["amax"].tolist() == [0.0]  # NaN is ignored: fmaxf from 0
    assert (unpack(out["data"]) == 7).all()  # and every NaN element is +6


def test_zero_scale_variants_on_a_block_whose_scale_rounds_to_zero() -> None:
    x = np.zeros((16, 16), np.float32)
    x[0, 0] = 2688.0  # S_enc = 1
    x[1, :4] = [1e-4, -1e-4, 0.0, -0.0]  # block amax 1e-4: 1e-4 / 6 < 2**-10, E4M3 0
    flt_max = nvfp4(x, usage="rowwise", zero_scale="flt_max")
    zero = nvfp4(x, usage="rowwise", zero_scale="zero")
    assert flt_max["scales"][1, 0] == zero["scales"][1, 0] == 0
    assert unpack(flt_max["data"])[1, :4].tolist() == [7, 15, 0, 8]
    assert unpack(zero["data"])[1, :4].tolist() == [0, 8, 0, 8]


def test_one_outlier_block_and_zero_blocks() -> None:
    x = np.zeros((16, 32), np.float32)
    x[0, :16] = 1e-3
    x[0, 7] = 100.0  # one outlier: the block's scale follows it, the rest rounds to 0
    out = nvfp4(x, usage="rowwise")
    codes = unpack(out["data"])
    assert codes[0, 7] == 7 and (np.delete(codes[0, :16], 7) == 0).all()
    assert out["scales"][0].tolist()[1] == 0 and not codes[0, 16:].any()


def test_nan_inf_and_negative_zero_elements() -> None:
    x = np.zeros((16, 16), np.float32)
    x[0, :6] = [np.nan, np.inf, -np.inf, -0.0, 1.0, -np.nan]
    codes = unpack(nvfp4(x, usage="rowwise")["data"])[0, :6].tolist()
    assert codes == [7, 7, 15, 8, 0, 7]


def test_two_dimensional_tiles_share_one_scale_and_transpose() -> None:
    x = random_matrix(32, 48)
    out = nvfp4(x, block="16x16")
    scales = out["scales"].reshape(2, 16, 3)
    assert (scales == scales[:, :1, :]).all()  # one scale per tile, on each of its 16 rows
    tiles = scales[:, 0, :]  # [M / 16, K / 16]
    np.testing.assert_array_equal(out["columnwise_scales"], np.repeat(tiles.T, 16, axis=0))
    np.testing.assert_array_equal(unpack(out["columnwise_data"]), unpack(out["data"]).T)


def test_columnwise_operand_is_the_rowwise_quantization_of_the_transpose() -> None:
    x = random_matrix(48, 32)
    both = nvfp4(x)
    transposed = nvfp4(np.ascontiguousarray(x.T), usage="rowwise")
    for name in ("data", "scales", "amax", "tensor_scale"):
        np.testing.assert_array_equal(both[f"columnwise_{name}"], transposed[name])


def test_row_scaled_amax_equals_quantizing_each_row_alone() -> None:
    x = random_matrix(16, 32) * np.float32(2.0) ** RNG.integers(-20, 20, size=(16, 1)).astype(np.float32)
    out = nvfp4(x, amax_scope="row")
    for row in range(16):
        alone = nvfp4(np.repeat(x[row : row + 1], 16, axis=0), usage="rowwise")
        assert out["amax"][row] == alone["amax"][0] and out["tensor_scale"][row] == alone["tensor_scale"][0]
        np.testing.assert_array_equal(out["data"][row], alone["data"][0])
        np.testing.assert_array_equal(out["scales"][row], alone["scales"][0])
    column_amax = np.abs(x).max(axis=0)
    np.testing.assert_array_equal(out["columnwise_amax"], column_amax)


# %% Second oracles


@pytest.mark.parametrize(("block", "zero_scale"), list(itertools.product(["1x16", "16x16"], ["flt_max", "zero"])))
def test_te_rule_against_the_ml_dtypes_oracle(block: str, zero_scale: str) -> None:
    for spread in (2.0, 30.0):
        x = random_matrix(64, 128, spread)
        x[5, 17] = np.nan
        x[9, 3] = -0.0
        got = nvfp4(x, usage="rowwise", block=block, zero_scale=zero_scale)
        expected = te_oracle(x, block=block, zero_scale=zero_scale)
        for name in ("data", "scales", "amax", "tensor_scale"):
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_te_python_reference_agrees_except_on_negative_zero() -> None:
    x = random_matrix(32, 64, 30.0)
    got = nvfp4(x, usage="rowwise")
    expected = te_python_reference(x)
    np.testing.assert_array_equal(got["scales"], expected["scales"])
    np.testing.assert_array_equal(got["data"], expected["data"])
    x[0, 0] = -0.0  # named expected difference: the Python reference's intervals send -0.0 to code 0
    assert unpack(nvfp4(x, usage="rowwise")["data"])[0, 0] == 8
    assert unpack(te_python_reference(x)["data"])[0, 0] == 0


@pytest.mark.parametrize("rule", ["torchao", "torchao_cuda"])
def test_torchao_rules_against_torchao_eager(rule: str) -> None:
    for spread in (2.0, 30.0):
        x = random_matrix(32, 64, spread)
        got = nvfp4(x, usage="rowwise", scale_rule=rule)
        expected = torchao_oracle(x, cuda=rule == "torchao_cuda")
        for name in ("data", "scales", "tensor_scale"):
            np.testing.assert_array_equal(got[name], expected[name], err_msg=name)
        assert not got["data_dont_care"].any()


def test_torchao_rules_differ_in_the_last_place() -> None:
    """``amax / 2688`` against ``amax * fl32(1/2688)``: some amaxes give different tensor scales."""
    amax = bf16(RNG.uniform(1, 1000, 4096).astype(np.float32))
    divided, multiplied = amax / np.float32(2688), amax * np.float32(1 / 2688)
    assert (divided != multiplied).any()
    x = np.zeros((16, 16), np.float32)
    x[0, 0] = amax[np.flatnonzero(divided != multiplied)[0]]
    scales = [nvfp4(x, usage="rowwise", scale_rule=r)["tensor_scale"][0] for r in ("torchao", "torchao_cuda")]
    assert scales[0] != scales[1]


def test_torchao_amax_zero_gives_nan_scales_and_dont_care_data() -> None:
    """torchao has no guard: pts = 0, block scale 0 / 0 = NaN, scaled values NaN (masked from comparison)."""
    out = nvfp4(np.zeros((16, 16), np.float32), usage="rowwise", scale_rule="torchao")
    assert out["tensor_scale"].tolist() == [0.0]
    assert ((out["scales"] & 0x7F) == 0x7F).all()
    assert out["data_dont_care"].all()
    floor = nvfp4(np.eye(16, dtype=np.float32), usage="rowwise", scale_rule="torchao")
    assert floor["scales"][0, 0] == 0x7E and not floor["data_dont_care"].any()


def test_hadamard_against_the_float64_product() -> None:
    values = random_matrix(32, 64, 2.0)  # within 2**12 in a chunk: every order sums exactly
    np.testing.assert_array_equal(hadamard_16(values), hadamard_oracle(values))


def test_hadamard_order_decides_inexact_sums() -> None:
    """Terms 2**22, 1/4, 1/4, 2**14 (inputs 2**24, 1, 1, 2**16 at positions 0, 1, 2, 4): the exact sum
    2**22 + 2**14 + 1/2 rounds to bfloat16 2**22 + 2**15, but the butterflies add 1/4 to 2**22 first, a
    float32 tie that goes to 2**22, twice, and reach the bfloat16 tie 2**22 + 2**14, which goes to even 2**22."""
    values = np.zeros((1, 16), np.float32)
    values[0, [0, 1, 2, 4]] = [2.0**24, 1.0, 1.0, 2.0**16]
    assert hadamard_16(values)[0, 0] == 2.0**22
    assert hadamard_oracle(values)[0, 0] == 2.0**22 + 2.0**15


def test_rht_columnwise_amax_is_post_transform() -> None:
    x = random_matrix(32, 48)
    out = nvfp4(x, rht=True)
    transformed = hadamard_16(np.ascontiguousarray(x.T))
    assert out["columnwise_amax"][0] == np.abs(transformed).max()
    assert out["amax"][0] == np.abs(x).max()


def test_stochastic_rounding_with_extreme_random_bits() -> None:
    x = random_matrix(16, 32)
    rne = nvfp4(x, usage="rowwise")
    zeros = np.zeros(x.shape, np.uint8)
    ones = np.full(x.shape, 255, np.uint8)
    down = nvfp4(x, usage="rowwise", rounding="stochastic", random_bits=zeros)
    up = nvfp4(x, usage="rowwise", rounding="stochastic", random_bits=ones)
    assert (down["scales"] == rne["scales"]).all() and (up["scales"] == rne["scales"]).all()
    magnitudes = [E2M1[unpack(o["data"]) & 7] for o in (down, rne, up)]
    assert (magnitudes[0] <= magnitudes[1]).all() and (magnitudes[1] <= magnitudes[2]).all()


def test_stochastic_contract_neighbours_and_frequencies() -> None:
    x = random_matrix(16, 16)
    out = stochastic_nvfp4(x, draws=500)
    codes, lower, upper, p = out["codes"], out["lower"], out["upper"], out["p_upper"]
    assert ((codes == lower) | (codes == upper)).all()
    frequency = (codes == upper).mean(axis=0)
    moving = lower != upper
    assert np.abs(frequency[moving] - p[moving]).max() < 0.15
    assert ((p >= 0) & (p < 1)).all()


# %% Dequantization


def test_dequantize_every_code_with_unit_scales() -> None:
    data = np.array([[0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE]], np.uint8)
    x = dequantize(data, np.array([[0x40]], np.uint8), tensor_scale=np.array([0.5], np.float32), scale_rule="torchao")
    expected = np.concatenate([E2M1, -E2M1]).astype(np.float32)
    assert x["x"][0].tolist() == expected.tolist()
    assert np.signbit(x["x"][0, 8])


def test_dequantize_round_trip_error_is_within_half_a_step() -> None:
    x = random_matrix(32, 64, 4.0)
    q = nvfp4(x, usage="rowwise")
    back = dequantize(q["data"], q["scales"], amax=q["amax"])["x"]
    block_scale = np.repeat(q["scales"].view(ml_dtypes.float8_e4m3fn).astype(np.float64), 16, axis=1)
    unit = block_scale * float(q["amax"][0]) / 2688  # one unit of E2M1 in x's scale; the largest half-step is 1
    assert (np.abs(back.astype(np.float64) - x) <= unit * 1.001).all()


def test_dequantize_te_and_torchao_orders() -> None:
    data = np.full((1, 8), 0x77, np.uint8)
    scales = np.array([[0x7E]], np.uint8)
    amax = np.array([1.1], np.float32)
    te = dequantize(data, scales, amax=amax)["x"][0, 0]
    assert te == np.float32(6) * (np.float32(448) * np.float32(1.1) * np.float32(1 / 2688))
    pts = np.array([np.float32(1.1) / np.float32(2688)], np.float32)
    torchao = dequantize(data, scales, tensor_scale=pts, scale_rule="torchao")["x"][0, 0]
    assert torchao == np.float32(6) * (pts[0] * np.float32(448))


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
def test_dequantize_rounds_to_the_output_dtype(out_dtype: str) -> None:
    data = RNG.integers(0, 256, size=(4, 16), dtype=np.uint8)
    scales = RNG.integers(0, 0x7F, size=(4, 2), dtype=np.uint8)
    amax = np.array([3.3], np.float32)
    wide = dequantize(data, scales, amax=amax)["x"]
    narrow = dequantize(data, scales, amax=amax, out_dtype=out_dtype)["x"]
    dtype = ml_dtypes.bfloat16 if out_dtype == "bfloat16" else np.float16
    np.testing.assert_array_equal(narrow, wide.astype(dtype).astype(np.float32))


# %% A given amax (amax_source="given")


def given(x: np.ndarray, amax: float, **params: object) -> dict[str, np.ndarray]:
    """``nvfp4`` with one given amax for every operand ``usage`` keeps (as TE's ``quantize_with_amax``)."""
    usage = params.get("usage", "both")
    a = np.array([amax], np.float32)
    amaxes = {"amax": a} if usage == "rowwise" else {"columnwise_amax": a} if usage == "columnwise" else {}
    return nvfp4(x, amax_source="given", **(amaxes or {"amax": a, "columnwise_amax": a}), **params)  # type: ignore[arg-type]


def assert_same(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], names: Iterable[str]) -> None:
    """Bits equal; NaN equals NaN in float32 outputs and E4M3 codes; don't-care data bytes skipped."""
    for name in names:
        g, e = got[name], expected[name]
        if g.dtype == np.float32:
            same = (g.view(np.uint32) == e.view(np.uint32)) | (np.isnan(g) & np.isnan(e))
        else:
            same = g == e
            if name.endswith("scales"):
                same |= ((g & 0x7F) == 0x7F) & ((e & 0x7F) == 0x7F)
            if name.endswith("data"):
                same |= got[f"{name}_dont_care"]
        assert same.all(), f"{name}: {(~same).sum()} differ, first at {np.argwhere(~same)[:3].tolist()}"


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"block": "16x16", "zero_scale": "zero"},
        {"rht": True},
        {"scale_rule": "torchao", "usage": "rowwise"},
        {"scale_rule": "torchao_cuda"},
        {"rounding": "stochastic", "usage": "columnwise"},
    ],
    ids=str,
)
def test_given_true_amax_equals_the_computed_path(params: dict[str, object]) -> None:
    x = random_matrix(48, 64, 8.0)
    x[3, 5], x[7, 9] = -np.inf, -0.0
    if params.get("rounding") == "stochastic":
        params = params | {"columnwise_random_bits": RNG.integers(0, 256, (64, 48), dtype=np.uint8)}
    computed = nvfp4(x, **params)  # type: ignore[arg-type]
    amaxes = {k: v for k, v in computed.items() if k in ("amax", "columnwise_amax")}
    got = nvfp4(x, amax_source="given", **amaxes, **params)  # type: ignore[arg-type]
    assert_same(got, computed, computed)


def test_given_amax_below_the_data_saturates_block_scales_and_elements() -> None:
    """amax 5.25 (S_enc 512) for a block of amax 8: 8 * fl32(512 / 6) = 682.7 > 448 gives 448 (0x7E), enc 8 / 7:
    8 -> 9.14 -> 6 (7), 1 -> 1.14 -> 1 (2), -2 -> -2.29 -> -2 (0xC), 0.5 -> 0.57 -> 0.5 (1); torchao (amax 4:
    pts = 4 / 2688, 8 / 6 / pts = 896 clamps to 448, enc 1.5) the same with 6, 1.5, -3, 1 (0.75 ties to even)."""
    x = np.zeros((16, 16), np.float32)
    x[0, :4] = [8.0, 1.0, -2.0, 0.5]
    te = given(x, 5.25, usage="rowwise")
    assert te["scales"][0, 0] == 0x7E and unpack(te["data"])[0, :4].tolist() == [7, 2, 12, 1]
    assert te["amax"].tolist() == [5.25] and te["tensor_scale"].tolist() == [2.0**-9]
    torchao = given(x, 4.0, usage="rowwise", scale_rule="torchao")
    assert torchao["scales"][0, 0] == 0x7E and unpack(torchao["data"])[0, :4].tolist() == [7, 3, 13, 2]


def test_given_amax_edge_values_under_te() -> None:
    """0 and Inf give S_enc 1 (the guard), NaN FLT_MAX (fminf drops it), a negative amax negative scales."""
    x = np.zeros((16, 16), np.float32)
    x[0, :3] = [3000.0, 1.0, -0.5]  # block amax 3000: above 2688, so S_enc = 1 saturates it too
    for amax in (0.0, np.inf):
        out = given(x, amax, usage="rowwise")
        assert out["tensor_scale"].tolist() == [1.0] and out["scales"][0, 0] == 0x7E
        assert unpack(out["data"])[0, :3].tolist() == [7, 0, 8]  # enc 1 / 448: 6.7 -> 6, 0.0022 -> 0, -0.0011 -> -0
    nan = given(x, np.nan, usage="rowwise")
    assert nan["tensor_scale"][0] == np.float32(1) / FLT_MAX and np.isnan(nan["amax"][0])
    assert nan["scales"][0, 0] == 0x7E and unpack(nan["data"])[0, :3].tolist() == [7, 7, 15]
    negative = given(x, -3000.0, usage="rowwise")
    positive = given(x, 3000.0, usage="rowwise")
    assert negative["tensor_scale"][0] == -positive["tensor_scale"][0]
    np.testing.assert_array_equal(negative["scales"], positive["scales"] | 0x80)  # E4M3 -0 included
    np.testing.assert_array_equal(negative["data"], positive["data"])


@pytest.mark.parametrize("zero_scale", ["flt_max", "zero"])
def test_given_amax_te_against_the_ml_dtypes_oracle(zero_scale: str) -> None:
    for spread in (2.0, 30.0):
        x = random_matrix(32, 64, spread)
        x[5, 17] = np.nan
        true = float(np.nanmax(np.abs(x)))
        for amax in (true, true / 4, true * 3, 0.0, np.inf, np.nan, -true / 2, 1e-40, 3e38):
            got = given(x, amax, usage="rowwise", zero_scale=zero_scale)
            expected = te_oracle(x, zero_scale=zero_scale, amax=amax)
            assert_same(got | {"data_dont_care": np.zeros_like(got["data"], bool)}, expected, expected)


@pytest.mark.parametrize("factor", [1.0, 0.25, 3.0, 0.0, np.inf, np.nan, -1.0, -0.0])
def test_given_amax_torchao_against_torchao_nvfp4_quantize(factor: float) -> None:
    """torchao 0.18's own ``nvfp4_quantize(x, 16, per_tensor_amax_to_scale(amax))`` on the CPU (``torchao``)."""
    nvfp4_tensor = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    x = random_matrix(32, 64, 4.0)
    amax = np.float32(np.abs(x).max() * factor) if np.isfinite(factor) and factor != 0 else np.float32(factor)
    tensor_scale = nvfp4_tensor.per_tensor_amax_to_scale(torch.tensor([amax]))
    scales, data = nvfp4_tensor.nvfp4_quantize(torch.from_numpy(x), 16, tensor_scale)
    got = given(x, float(amax), usage="rowwise", scale_rule="torchao")
    expected = {"data": data.view(torch.uint8).numpy(), "scales": scales.view(torch.uint8).numpy()}
    assert_same(got, expected | {"tensor_scale": tensor_scale.numpy()}, ["data", "scales", "tensor_scale"])


# %% Argument checks


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"x": np.zeros(16, np.float32)}, ValueError, "2-D"),
        ({"x": np.zeros((16, 24), np.float32)}, ValueError, "multiples of 16"),
        ({"x": np.zeros((0, 16), np.float32)}, ValueError, "empty"),
        ({"x": np.zeros((16, 16), np.float64)}, TypeError, "x.dtype=float64"),
        ({"x": np.zeros((16, 16), np.float32), "block": "16x32"}, ValueError, "block='16x32'"),
        ({"x": np.zeros((16, 16), np.float32), "amax_scope": "row", "block": "16x16"}, ValueError, "block='16x16'"),
        ({"x": np.zeros((16, 16), np.float32), "amax_scope": "row", "usage": "columnwise"}, ValueError, "usage='both'"),
        ({"x": np.zeros((16, 16), np.float32), "scale_rule": "torchao", "rht": True}, ValueError, "rht=True"),
        ({"x": np.zeros((16, 16), np.float32), "rht": 1}, ValueError, "rht=1"),
        ({"x": np.zeros((16, 16), np.float32), "amax_source": "fixed"}, ValueError, "amax_source='fixed'"),
        ({"x": np.zeros((16, 16), np.float32), "amax_source": "given", "usage": "rowwise"}, ValueError, "no amax"),
        ({"x": np.zeros((16, 16), np.float32), "amax_source": "given", "usage": "columnwise",
          "columnwise_amax": np.ones(1, np.float32), "amax": np.ones(1, np.float32)}, ValueError, "amax with usage"),
        ({"x": np.zeros((16, 16), np.float32), "columnwise_amax": np.ones(1, np.float32)}, ValueError,
         "columnwise_amax with amax_source='computed'"),
        ({"x": np.zeros((16, 16), np.float32), "amax_source": "given", "usage": "rowwise",
          "amax": np.float32(1.0)}, TypeError, "amax of type float32"),
        ({"x": np.zeros((16, 16), np.float32), "amax_source": "given", "usage": "rowwise",
          "amax": np.ones((1, 1), np.float32)}, ValueError, "amax.shape=(1, 1)"),
        ({"x": np.zeros((16, 16), np.float32), "amax_source": "given", "amax_scope": "row"}, ValueError,
         "amax_scope='row'"),
        (
            {"x": np.zeros((16, 16), np.float32), "rounding": "stochastic", "usage": "rowwise",
             "random_bits": np.zeros((16, 16), np.uint8), "columnwise_random_bits": np.zeros((16, 16), np.uint8)},
            ValueError,
            "columnwise_random_bits with usage",
        ),
    ],
)  # fmt: skip
def test_bad_arguments_name_the_constraint(kwargs: dict[str, object], error: type[Exception], fragment: str) -> None:
    x = kwargs.pop("x")
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        nvfp4(x, **kwargs)  # type: ignore[arg-type]
