"""``quant.mx`` ``scale_rule=rceil, edges=torchao_018`` against torchao 0.18's own ``to_mx`` on the CPU.

torchao 0.18's eager RCEIL (``prototype/mx_formats/mx_tensor.py`` ``_to_mx_rceil``) takes
``ceil(torch.log2(max_abs / max_pos))`` in float32, so a block amax a few ulps above ``max * 2**j`` keeps the
scale ``j`` where the power-of-two round-up (cuBLAS, TransformerEngine) moves to ``j + 1``.  Checked here, per
element format, on: every float32 amax ``max * 2**j + k`` ulps for ``k`` in -64..64 and every ``j`` with
``max * 2**j`` a positive float32 (subnormals included); 2**14 random float32 amaxes; every positive finite
bfloat16 amax with bfloat16 input.  Scale bytes and element codes must be equal bit for bit.  The slack table
the reference uses is checked against 60-digit ``decimal`` arithmetic, and (``slow``) the rule against
``torch.log2`` on every positive float32 ``d``.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import torch

from reference.formats import get_format
from reference.quant.mx import _LOG2_SLACK, MX_FORMATS, _log2_rounds_to_power, mx, scale_bytes

F32_INF_BITS = 0x7F80_0000


@pytest.fixture(scope="module")
def to_mx() -> Any:
    """torchao's ``to_mx`` and its element dtypes; skips unless torchao 0.18 is installed."""
    torchao = pytest.importorskip("torchao")
    if not torchao.__version__.startswith("0.18."):
        pytest.skip(f"edges=torchao_018 models torchao 0.18, installed {torchao.__version__}")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
    from torchao.prototype.mx_formats.mx_tensor import to_mx as torchao_to_mx

    elements = {
        "float8_e4m3fn": torch.float8_e4m3fn,
        "float8_e5m2": torch.float8_e5m2,
        "float6_e2m3fn": DTYPE_FP6_E2M3,
        "float6_e3m2fn": DTYPE_FP6_E3M2,
        "float4_e2m1fn": torch.float4_e2m1fn_x2,
    }

    def call(x: torch.Tensor, format: str) -> tuple[np.ndarray, np.ndarray]:
        scale, data = torchao_to_mx(x, elements[format], 32, ScaleCalculationMode.RCEIL)
        return scale.view(torch.uint8).reshape(-1).numpy(), data.view(torch.uint8).numpy()

    return call


def window_amaxes(format: str, ulps: int = 64) -> np.ndarray:
    """float32 bit patterns ``max * 2**j + k`` ulps, ``|k| <= ulps``, for every ``j`` with ``max * 2**j`` a float32."""
    top = np.float32(get_format(format).max_finite)
    with np.errstate(over="ignore"):
        centres = np.ldexp(top, np.arange(-160, 130)).astype(np.float32)
    centres = centres[(centres > 0) & np.isfinite(centres)].view(np.uint32).astype(np.int64)
    bits = np.unique((centres[:, None] + np.arange(-ulps, ulps + 1)).ravel())
    return bits[(bits > 0) & (bits < F32_INF_BITS)]


def blocks_of(amax_bits: np.ndarray, seed: int, bfloat16: bool = False) -> np.ndarray:
    """One float32 block of 32 per amax: ``amax * u`` (``|u| < 1``), the amax itself at a random place, random signs."""
    rng = np.random.default_rng(seed)
    amax = amax_bits.astype(np.uint32).view(np.float32)
    x = (amax[:, None] * rng.uniform(-1, 1, (amax.size, 32)).astype(np.float32)).astype(np.float32)
    if bfloat16:  # round to nearest even at 16 bits: never above the (bfloat16) amax
        bits = x.view(np.uint32).astype(np.uint64)
        x = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    where = rng.integers(0, 32, amax.size)
    x[np.arange(amax.size), where] = amax * rng.choice(np.array([-1, 1], dtype=np.float32), amax.size)
    return x


def assert_like_torchao(to_mx: Any, x: np.ndarray, format: str, bfloat16: bool = False) -> np.ndarray:
    """Reference and torchao bytes equal; returns the scale bytes."""
    source = torch.from_numpy(x)
    scale, data = to_mx(source.to(torch.bfloat16) if bfloat16 else source, format)
    out = mx(x, format=format, scale_rule="rceil", edges="torchao_018")
    ours = out["scale_rowwise"][: x.shape[0], 0]
    wrong = np.flatnonzero(ours != scale)
    amax = np.abs(x).max(axis=1)
    assert wrong.size == 0, (
        f"{format}: {wrong.size} of {x.shape[0]} scale bytes differ, e.g. amax {amax[wrong[:3]].tolist()} "
        f"(bits {[hex(b) for b in amax[wrong[:3]].view(np.uint32)]}): ours {ours[wrong[:3]].tolist()}, "
        f"torchao {scale[wrong[:3]].tolist()}"
    )
    bad_rows = np.flatnonzero((out["data_rowwise"] != data).any(axis=1))
    assert bad_rows.size == 0, f"{format}: data differs in {bad_rows.size} blocks, e.g. rows {bad_rows[:3].tolist()}"
    return ours


@pytest.mark.parametrize("format", MX_FORMATS)
def test_window_amaxes_against_to_mx(to_mx: Any, format: str) -> None:
    bits = window_amaxes(format)
    ours = assert_like_torchao(to_mx, blocks_of(bits, seed=len(format)), format)
    # the amaxes where torchao 0.18 keeps the lower scale: the round-up rule (edges=te) differs there
    round_up = scale_bytes(bits, format=format, scale_rule="rceil", edges="te")
    kept = int(np.count_nonzero(round_up != ours))
    assert kept > 4000, f"only {kept} window amaxes where log2's rounding keeps the scale: the windows miss it"
    assert np.all(round_up.astype(int) - ours <= 1)


@pytest.mark.parametrize("format", MX_FORMATS)
def test_random_float32_amaxes_against_to_mx(to_mx: Any, format: str) -> None:
    bits = np.random.default_rng(32 + len(format)).integers(1, F32_INF_BITS, 1 << 14)
    assert_like_torchao(to_mx, blocks_of(bits, seed=7), format)


@pytest.mark.parametrize("format", MX_FORMATS)
def test_every_bfloat16_amax_against_to_mx(to_mx: Any, format: str) -> None:
    """Every positive finite bfloat16 amax, bfloat16 input (the case the golden H100 vectors cover)."""
    bits = np.arange(1, 0x7F80, dtype=np.int64) << 16
    ours = assert_like_torchao(to_mx, blocks_of(bits, seed=9, bfloat16=True), format, bfloat16=True)
    assert np.array_equal(ours, scale_bytes(bits, format=format, scale_rule="rceil", edges="te"))


def test_log2_slack_against_decimal() -> None:
    """Every row of the slack table: ``T = floor(grid * (2**h - 1))`` in 60-digit arithmetic, ``h`` exact."""
    context = decimal.Context(prec=60)
    ln2 = context.ln(decimal.Decimal(2))
    for row, slack in enumerate(_LOG2_SLACK.tolist()):
        j = row - 127
        above = np.nextafter(np.float32(j), np.float32(np.inf))
        h = (Fraction(float(above)) - j) / 2  # half the float32 spacing above j, exactly
        grid = 2**22 if j == -127 else 2**23
        h_decimal = context.divide(decimal.Decimal(h.numerator), decimal.Decimal(h.denominator))
        bound = context.multiply(grid, context.exp(context.multiply(h_decimal, ln2)) - 1)
        assert slack == math.floor(bound), f"j={j}: slack {slack}, exact bound {bound}"
        fraction = bound - math.floor(bound)
        assert fraction > decimal.Decimal("0.09") or bound < decimal.Decimal("1e-30"), f"j={j}: bound {bound}"


def test_log2_rounding_windows_by_hand() -> None:
    """E4M3 amax 448 * 2**70 (d = 2**70) plus 22 d-ulps keeps 197; 23 moves to 198; d = 2**-127 + 11 subnormal ulps."""
    d = np.array([(70 + 127) << 23, ((70 + 127) << 23) + 22, ((70 + 127) << 23) + 23, 0x40_0000 + 11, 0x40_0000 + 12])
    exponent, mantissa = d >> 23, d & 0x7F_FFFF
    assert _log2_rounds_to_power(exponent, mantissa).tolist() == [False, True, False, True, False]
    assert torch.log2(torch.tensor(d.astype(np.uint32).view(np.float32))).ceil().tolist() == [70, 70, 71, -127, -126]


@pytest.mark.slow
def test_rule_against_torch_log2_on_every_float32() -> None:
    """Every positive finite float32 ``d``: ``clamp(ceil(torch.log2(d)), -127, 127) + 127`` (1 to 7 minutes)."""
    for start in range(0, F32_INF_BITS, 1 << 24):
        bits = np.arange(start, min(start + (1 << 24), F32_INF_BITS), dtype=np.uint32)
        log2 = torch.log2(torch.from_numpy(bits.view(np.float32)))
        expected = (torch.clamp(torch.ceil(log2), min=-127, max=127) + 127).to(torch.uint8).numpy()
        wide = bits.astype(np.int64)
        exponent, mantissa = wide >> 23, wide & 0x7F_FFFF
        byte = exponent + np.where(exponent == 0, mantissa > 0x40_0000, mantissa != 0)
        got = np.clip(byte - _log2_rounds_to_power(exponent, mantissa), 0, 254)
        assert np.array_equal(got, expected), f"d bits {[hex(b) for b in bits[got != expected][:4]]}"
