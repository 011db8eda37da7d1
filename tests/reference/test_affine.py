"""``reference.quant.affine`` / ``reference.dequant.affine`` against torchao's formulas run by torch.

The second oracle transcribes torchao's primitives (``choose_qparams_affine``, ``quantize_affine``,
``_choose_qparams_affine_tinygemm``, ``_quantize_affine_tinygemm``, ``_quantize_affine_no_zero_point``
and the dequants, pytorch/ao@36027d8) as plain torch ops on CPU tensors of the arithmetic dtype,
so torch's own bfloat16 / float16 arithmetic and CPU division decide every rounding.  The CUDA
variant (``scalar_division="reciprocal"``) is emulated the way ``div_true_kernel_cuda`` computes it.
Known disagreement: none.  The reference shares no code with this file.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from reference.dequant.affine import affine as dequantize
from reference.quant.affine import MAPPINGS, QUANT_DTYPES, ZERO_POINT_DOMAINS
from reference.quant.affine import affine as quantize

TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
RANGES = {"int8": (-128, 127), "int4": (-8, 7), "uint4": (0, 15)}
ROWS = [(m, d) for m in MAPPINGS for d in ZERO_POINT_DOMAINS if d != "float" or m == "asymmetric"]


def torchao_quantize(
    x: torch.Tensor, mapping: str, domain: str, dtype: str, block: tuple[int, int], eps: Any, cuda_division: bool
) -> dict[str, torch.Tensor]:
    """torchao's quantization primitives as torch ops; ``cuda_division`` divides by Python numbers as CUDA does."""
    qmin, qmax = RANGES[dtype]
    if eps == "smallest_normal":
        eps = torch.finfo(x.dtype).smallest_normal
    elif eps == "epsilon":
        eps = torch.finfo(x.dtype).eps

    def div(t: torch.Tensor, c: float) -> torch.Tensor:
        if not cuda_division:
            return t / c
        inverse = torch.tensor(float("inf") if c == 0 else 1.0 / c, dtype=torch.float32)
        return (t.float() * inverse).to(t.dtype)  # a * float32(1 / b), rounded to t's dtype

    rows, cols = x.shape
    groups = x.view(rows // block[0], block[0], cols // block[1], block[1])
    mn, mx = torch.amin(groups, dim=(1, 3)), torch.amax(groups, dim=(1, 3))

    def spread(t: torch.Tensor) -> torch.Tensor:
        return t.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)

    out: dict[str, torch.Tensor] = {}
    if domain == "float":
        scale = torch.clamp(div(mx - mn, float(qmax - qmin)), min=eps)
        mid = (qmax + qmin + 1) / 2
        zero = mn + scale * mid
        min_val = zero - scale * mid
        q = torch.clamp(torch.round((x - spread(min_val)) / spread(scale)), qmin, qmax)
        out["zero"] = zero
    else:
        min_neg, max_pos = torch.min(mn, torch.zeros_like(mn)), torch.max(mx, torch.zeros_like(mx))
        if mapping == "asymmetric":
            scale = torch.clamp(div(max_pos - min_neg, float(qmax - qmin)), min=eps)
            zp = torch.clamp(qmin - torch.round(min_neg / scale), qmin, qmax)
        else:
            if mapping == "symmetric":
                scale = div(torch.max(-min_neg, max_pos), float(qmax - qmin) / 2)
            else:
                smin, smax = div(min_neg, float(qmin)), div(max_pos, float(qmax))
                scale = torch.where(smin > smax, smin, smax)
            zp = torch.full_like(scale, int((qmax + qmin + 1) / 2))
            scale = torch.clamp(scale, min=eps)
        zp = zp.to(torch.int32)
        t = torch.round(x * spread(1.0 / scale))
        if domain == "int":
            t = t + spread(zp)
            out["zero_point"] = zp
        q = torch.clamp(t, qmin, qmax)
    out["q"], out["scale"] = q.to(torch.int32), scale
    return out


def codes(values: torch.Tensor, dtype: str) -> np.ndarray:
    return (values.numpy() & (0xFF if dtype == "int8" else 0xF)).astype(np.uint8)


def bits(values: torch.Tensor | np.ndarray) -> np.ndarray:
    array = values.float().numpy() if isinstance(values, torch.Tensor) else values
    return np.asarray(array, dtype=np.float32).view(np.uint32)


def weights(rng: np.random.Generator, rows: int, cols: int, arithmetic: str) -> np.ndarray:
    """Rows over very different magnitudes (1e-9 to 1e2), some zero groups."""
    x = rng.standard_normal((rows, cols)) * np.exp(rng.uniform(-20.0, 4.5, (rows, 1)))
    x[:, : cols // 3] *= rng.random() < 0.3
    return x.astype(np.float32) if arithmetic != "float16" else np.clip(x, -3e4, 3e4).astype(np.float32)


@pytest.mark.parametrize(("mapping", "domain"), ROWS)
@pytest.mark.parametrize("arithmetic", list(TORCH))
@pytest.mark.parametrize("cuda_division", [False, True], ids=["divide", "reciprocal"])
def test_matches_torchaos_primitives(mapping: str, domain: str, arithmetic: str, cuda_division: bool) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{mapping} {domain} {arithmetic} {cuda_division}".encode()))
    for trial in range(24):
        dtype = QUANT_DTYPES[trial % 3]
        eps = ("smallest_normal", "epsilon", 1e-6)[trial % 3]
        block = (int(rng.integers(1, 4)), int(rng.integers(1, 20)))
        x = weights(rng, block[0] * int(rng.integers(1, 4)), block[1] * int(rng.integers(1, 4)), arithmetic)
        kwargs: dict[str, Any] = dict(mapping=mapping, zero_point_domain=domain, dtype=dtype, eps=eps)
        division = "reciprocal" if cuda_division else "divide"
        try:
            ours = quantize(
                x, **kwargs, block_rows=block[0], block_cols=block[1], arithmetic=arithmetic, scalar_division=division
            )
        except ValueError as error:
            assert "overflows float16" in str(error) and arithmetic == "float16" and eps == 1e-6
            continue
        theirs = torchao_quantize(
            torch.from_numpy(x).to(TORCH[arithmetic]), mapping, domain, dtype, block, eps, cuda_division
        )
        what = f"{kwargs} {block} trial {trial}"
        np.testing.assert_array_equal(ours["q"], codes(theirs["q"], dtype), err_msg=what)
        np.testing.assert_array_equal(bits(ours["scale"]), bits(theirs["scale"]), err_msg=what)
        if domain == "int":
            np.testing.assert_array_equal(ours["zero_point"], codes(theirs["zero_point"], dtype), err_msg=what)
        if domain == "float":
            np.testing.assert_array_equal(bits(ours["zero"]), bits(theirs["zero"]), err_msg=what)


def test_cuda_and_cpu_division_give_different_float32_scales() -> None:
    """(max - min) / 15 and (max - min) * float32(1/15) differ in the last place for some float32 ranges."""
    x = np.array([[-2.729365825653076, 0.0]], dtype=np.float32)
    scales = {
        division: quantize(
            x, mapping="asymmetric", zero_point_domain="int", dtype="uint4", block_rows=1, block_cols=2,
            scalar_division=division,
        )["scale"][0, 0]
        for division in ("divide", "reciprocal")
    }  # fmt: skip
    assert scales["divide"] == (torch.tensor([2.729365825653076]) / 15.0).item()
    assert scales["divide"] != scales["reciprocal"], scales


@pytest.mark.parametrize("arithmetic", ["bfloat16", "float16"])
def test_scalar_division_changes_nothing_in_16_bit_arithmetic(arithmetic: str) -> None:
    """Every finite value of the dtype divided by every constant torchao divides by: divide == reciprocal.

    A quotient of an 8- (11-) bit significand by these constants is never within a float32 ulp of a
    rounding boundary of the dtype, so the spec has ``reciprocal`` rows for float32 arithmetic only.
    """
    from reference._opmath import to_dtype

    values = np.arange(1 << 16, dtype=np.uint32)
    if arithmetic == "bfloat16":
        values = (values << 16).view(np.float32)
    else:
        values = values.astype(np.uint16).view(np.float16).astype(np.float32)
    values = values[np.isfinite(values)]
    with np.errstate(over="ignore"):
        for constant in (15.0, 255.0, 7.5, 127.5, 7.0, 127.0, -8.0, -128.0):
            divided = to_dtype(values / np.float32(constant), arithmetic)
            multiplied = to_dtype(values * np.float32(1.0 / constant), arithmetic)
            np.testing.assert_array_equal(divided.view(np.uint32), multiplied.view(np.uint32), err_msg=str(constant))


# %% Hand-computed cases


def test_symmetric_int8_divides_by_127_5_and_rounds_half_to_even() -> None:
    x = np.array([[-255.0, 1.0, 3.0, 5.0]], dtype=np.float32)
    out = quantize(x, mapping="symmetric", zero_point_domain="int", dtype="int8", block_rows=1, block_cols=4)
    assert out["scale"].tolist() == [[2.0]] and out["zero_point"].tolist() == [[0]]
    assert out["q"].tolist() == [[0x80, 0x00, 0x02, 0x02]]  # -127.5 -> -128, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2


def test_uint4_symmetric_zero_point_is_8() -> None:
    x = np.array([[-7.5, 0.0, 7.5, 1.0]], dtype=np.float32)
    out = quantize(x, mapping="symmetric", zero_point_domain="int", dtype="uint4", block_rows=1, block_cols=4)
    assert out["zero_point"].tolist() == [[8]] and out["scale"].tolist() == [[1.0]]
    assert out["q"].tolist() == [[0, 8, 15, 9]]  # -7.5 + 8 = 0.5 -> 0 (half to even, before adding 8: -8 + 8)


def test_no_clipping_err_takes_the_larger_of_min_over_qmin_and_max_over_qmax() -> None:
    x = np.array([[-8.0, 3.5], [-1.0, 7.0]], dtype=np.float32)
    out = quantize(
        x, mapping="symmetric_no_clipping_err", zero_point_domain="none", dtype="int4", block_rows=1, block_cols=2
    )
    assert out["scale"].tolist() == [[1.0], [1.0]]  # max(-8/-8, 3.5/7) and max(-1/-8, 7/7)
    assert out["q"].tolist() == [[0x8, 0x4], [0xF, 0x7]]


def test_tinygemm_float_zero_uses_the_raw_minimum() -> None:
    x = np.array([[2.0, 3.0, 9.5, 17.0]], dtype=np.float32)
    out = quantize(x, mapping="asymmetric", zero_point_domain="float", dtype="uint4", block_rows=1, block_cols=4)
    assert out["scale"].tolist() == [[1.0]] and out["zero"].tolist() == [[10.0]]
    assert out["q"].tolist() == [[0, 1, 8, 15]]  # (9.5 - 2) / 1 = 7.5 -> 8


def test_block_rows_group_two_rows_and_per_tensor_is_the_whole_shape() -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3) - 4
    per_tensor = quantize(x, mapping="symmetric", zero_point_domain="none", dtype="int8", block_rows=4, block_cols=3)
    assert per_tensor["scale"].shape == (1, 1)
    two_rows = quantize(x, mapping="symmetric", zero_point_domain="none", dtype="int8", block_rows=2, block_cols=1)
    assert two_rows["scale"].shape == (2, 3)
    assert two_rows["scale"][0, 0] == np.float32(4.0) / np.float32(127.5)  # max |{-4, -1}| / 127.5


def test_eps_choices() -> None:
    x = np.zeros((1, 2), dtype=np.float32)
    kwargs: dict[str, Any] = dict(mapping="asymmetric", zero_point_domain="int", dtype="int8", block_rows=1)
    for eps, arithmetic, expected in [
        ("smallest_normal", "float32", 2.0**-126),
        ("smallest_normal", "float16", 2.0**-14),
        ("epsilon", "bfloat16", 2.0**-7),
        (1e-6, "bfloat16", 9.98377799987793e-07),
    ]:
        out = quantize(x, **kwargs, block_cols=2, eps=eps, arithmetic=arithmetic)
        assert out["scale"].tolist() == [[expected]], (eps, arithmetic)


# %% Errors


@pytest.mark.parametrize(
    ("change", "error", "pattern"),
    [
        ({"mapping": "symmetric", "zero_point_domain": "float"}, ValueError, "needs mapping='asymmetric'"),
        ({"block_cols": 3}, ValueError, r"block_cols=3 .* divides x.shape\[1\]=4"),
        ({"arithmetic": "float64"}, ValueError, "arithmetic='float64'"),
        ({"scalar_division": "fast"}, ValueError, "scalar_division='fast'"),
        ({"eps": -1.0}, ValueError, "eps=-1.0"),
        ({"eps": "tiny"}, ValueError, "eps='tiny'"),
        ({"x": np.array([[1.0, np.inf, 0.0, 1.0]], dtype=np.float32)}, ValueError, r"x\[0, 1\]=inf"),
        ({"x": np.array([[7e4, 0.0, 0.0, 1.0]], dtype=np.float32), "arithmetic": "float16"}, ValueError, "finite"),
        ({"x": np.ones((1, 4), dtype=np.float64)}, TypeError, "float64"),
    ],
)
def test_quantize_errors(change: dict[str, Any], error: type[Exception], pattern: str) -> None:
    kwargs: dict[str, Any] = dict(
        x=np.ones((1, 4), dtype=np.float32), mapping="asymmetric", zero_point_domain="int", dtype="int8",
        block_rows=1, block_cols=2,
    )  # fmt: skip
    kwargs.update(change)
    with pytest.raises(error, match=pattern):
        quantize(**kwargs)


def test_float16_range_overflow_is_an_error() -> None:
    x = np.array([[-6e4, 6e4]], dtype=np.float32)
    with pytest.raises(ValueError, match="overflows float16"):
        quantize(x, mapping="asymmetric", zero_point_domain="float", dtype="uint4", block_rows=1, block_cols=2,
                 arithmetic="float16")  # fmt: skip


# %% dequant.affine


def torchao_dequantize(
    q: np.ndarray, scale: torch.Tensor, zp: torch.Tensor | None, zero: torch.Tensor | None, dtype: str, domain: str,
    block: tuple[int, int], out: torch.dtype,
) -> torch.Tensor:  # fmt: skip
    """torchao's dequant primitives on int values (int8 storage for int8/int4, uint8 for uint4)."""
    values = torch.from_numpy(q.astype(np.int16)).to(torch.int8 if dtype != "uint4" else torch.uint8)

    def spread(t: torch.Tensor) -> torch.Tensor:
        return t.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)

    if domain == "int":
        assert zp is not None
        d = values.to(out) - spread(zp).to(out)
        return (d * spread(scale)).to(out)
    if domain == "none":
        return (values.to(out) * spread(scale)).to(out)
    assert zero is not None
    qmin, qmax = RANGES[dtype]
    d = (values - (qmax + qmin + 1) / 2).to(out)
    d *= spread(scale)
    d += spread(zero)
    return d


def signed(codes_: np.ndarray, dtype: str) -> np.ndarray:
    wide = codes_.astype(np.int32)
    if dtype == "int8":
        return np.where(wide > 127, wide - 256, wide)
    return np.where(wide > 7, wide - 16, wide) if dtype == "int4" else wide


@pytest.mark.parametrize("domain", ZERO_POINT_DOMAINS)
@pytest.mark.parametrize("out_dtype", list(TORCH))
@pytest.mark.parametrize("scale_dtype", list(TORCH))
def test_dequantize_matches_torchao(domain: str, out_dtype: str, scale_dtype: str) -> None:
    """Whatever dtype torchao's scale has, the reference given its float32 value agrees."""
    rng = np.random.default_rng(7)
    for dtype in QUANT_DTYPES:
        block = (2, 3)
        q = rng.integers(0, 256 if dtype == "int8" else 16, (4, 9)).astype(np.uint8)
        scale_t = (torch.randn((2, 3), generator=torch.Generator().manual_seed(3)) * 3).to(TORCH[scale_dtype])
        zero_t = (torch.randn((2, 3), generator=torch.Generator().manual_seed(4)) * 7).to(TORCH[scale_dtype])
        zp_codes = rng.integers(0, 256 if dtype == "int8" else 16, (2, 3)).astype(np.uint8)
        zp_t = torch.from_numpy(signed(zp_codes, dtype)).to(torch.int32)
        theirs = torchao_dequantize(
            signed(q, dtype), scale_t, zp_t if domain == "int" else None, zero_t if domain == "float" else None,
            dtype, domain, block, TORCH[out_dtype],
        )  # fmt: skip
        ours = dequantize(
            q, scale_t.float().numpy(), zp_codes if domain == "int" else None,
            zero_t.float().numpy() if domain == "float" else None, dtype=dtype, zero_point_domain=domain,
            block_rows=block[0], block_cols=block[1], out_dtype=out_dtype,
        )["x"]  # fmt: skip
        np.testing.assert_array_equal(bits(ours), bits(theirs), err_msg=f"{dtype} {domain}")


def test_asymmetric_quantize_then_dequantize_is_within_half_a_step() -> None:
    """The float domain (tinygemm: mid = 8) is meant for uint4: with int8 or int4 its min lands on code 0 and
    the upper half clips (torchao's formula, kept as is), so it is checked with uint4 only."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    for domain, dtype in [("int", "int8"), ("int", "int4"), ("int", "uint4"), ("float", "uint4")]:
        out = quantize(x, mapping="asymmetric", zero_point_domain=domain, dtype=dtype, block_rows=1, block_cols=16)
        extra = {"zero_point": out["zero_point"]} if domain == "int" else {"zero": out["zero"]}
        back = dequantize(
            out["q"], out["scale"], **extra, dtype=dtype, zero_point_domain=domain, block_rows=1, block_cols=16
        )["x"]
        step = np.repeat(out["scale"], 16, axis=1)
        assert (np.abs(back - x) <= step * 0.5001).all(), (domain, dtype)


def test_dequantize_errors() -> None:
    q, scale = np.zeros((2, 4), dtype=np.uint8), np.ones((2, 2), dtype=np.float32)
    call: Callable[..., Any] = dequantize
    with pytest.raises(ValueError, match=r"q\[1, 2\]=16, but int4 codes are 0..15"):
        bad = q.copy()
        bad[1, 2] = 16
        call(bad, scale, dtype="int4", zero_point_domain="none", block_rows=1, block_cols=2)
    with pytest.raises(ValueError, match=r"zero_point_domain='int' needs zero_point="):
        call(q, scale, dtype="int8", zero_point_domain="int", block_rows=1, block_cols=2)
    with pytest.raises(ValueError, match=r"scale.shape=\(2, 2\).*\[1, 2\]"):
        call(q, scale, dtype="int8", zero_point_domain="none", block_rows=2, block_cols=2)
    with pytest.raises(TypeError, match=r"scale.dtype=float64"):
        call(q, scale.astype(np.float64), dtype="int8", zero_point_domain="none", block_rows=1, block_cols=2)
