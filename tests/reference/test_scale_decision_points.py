"""Scale decision points: block and tensor amaxes on every rounding or selection boundary of a scale formula.

For every block-scaled contract and scale rule the reference's scale is checked against an oracle written here
from the rule's definition, on float32 amaxes exactly on each boundary and 1..k ulps either side, and on the
bfloat16 amaxes nearest each boundary (1..k bfloat16 ulps either side):

- ``quant.mx`` (``scale_bytes``, every ``scale_rule`` x ``edges``, five formats): powers of two (floor, ceil), the
  EVEN rounding midpoints ``(2 - 2**-(m+1)) * 2**e``, ``max * 2**j`` and ``2**j / fl32(1/max)`` (rceil), over
  every binade, so the clamps at bytes 0 and 254 are crossed too;
- ``quant.nvfp4`` (``scaled_operand``, ``te``, ``torchao``, ``torchao_cuda``): block amaxes whose scaled target
  lands within an ulp of each E4M3 rounding midpoint, of 448 and of torchao's floor ``2**-6``, built from an
  exact global scale (a given amax ``2688 * 2**k``); global amaxes ``2688 * 2**k`` +- ulps and at the overflow
  of ``2688 / amax``;
- ``quant.fp8_tensor`` / ``quant.fp8_block`` (``scale_from_amax`` and the contracts): ``fp8_max * 2**-n`` (where
  ``power_2_scale`` steps), ``epsilon``, the overflow of ``fp8_max / amax``.

The oracle's float32 arithmetic is exact: a product of two float32 values is exact in float64 and rounds once
to float32; a quotient is the float32 candidate nearest the exact one, by exact float64 residuals
(``f32_div``, itself checked against ``fractions.Fraction``).  E4M3 rounding is ml_dtypes'; torchao 0.18's
float32 ``log2`` is torch's.
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
import torch

from reference.quant.fp8 import fp8_tensor, scale_from_amax
from reference.quant.fp8_blockwise import fp8_block
from reference.quant.mx import EDGES, mx, scale_bytes
from reference.quant.nvfp4 import scaled_operand

F32, F64 = np.float32, np.float64
FLT_MAX = F32(np.finfo(F32).max)
BF16_MAX = F32(3.3895313892515355e38)  # 0x7F7F0000
INF_BITS = 0x7F80_0000
MX = {  # element format: (max, emax, mantissa bits)
    "float8_e4m3fn": (448.0, 8, 3),
    "float8_e5m2": (57344.0, 15, 2),
    "float6_e2m3fn": (7.5, 2, 3),
    "float6_e3m2fn": (28.0, 4, 2),
    "float4_e2m1fn": (6.0, 2, 1),
}
E4M3 = np.arange(0, 0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(F32)
"""Every non-negative finite E4M3 value (0 .. 448), ascending."""


# %% Exact float32 arithmetic and boundary neighbourhoods


def f32_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fl32(a * b): exact in float64 (24 + 24 bits), then one rounding."""
    with np.errstate(over="ignore"):
        return (np.asarray(a, F32).astype(F64) * np.asarray(b, F32).astype(F64)).astype(F32)


def f32_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """fl32(a / b) for finite non-negative ``a`` and positive finite ``b``, correctly rounded (ties to even)."""
    a, b = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32))
    a64, b64 = a.astype(F64), b.astype(F64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        guess = np.minimum(a64 / b64, F64(FLT_MAX)).astype(F32)
        candidates = np.stack([np.nextafter(guess, F32(-np.inf)), guess, np.nextafter(guess, F32(np.inf))])
        residual = np.abs(a64 - candidates.astype(F64) * b64)  # exact: 48-bit products, Sterbenz
    residual = np.where(candidates < 0, np.inf, residual)
    best = residual.min(axis=0)
    odd = (candidates.view(np.uint32) & 1).astype(bool)
    rank = np.where(residual == best, np.where(odd, 1, 0), 2)  # nearest, then even
    pick = np.take_along_axis(candidates, rank.argmin(axis=0)[None], axis=0)[0]
    overflow = a64 >= b64 * (2.0**128 - 2.0**103)  # the midpoint between FLT_MAX and 2**128 rounds to Inf
    return np.where(overflow, F32(np.inf), pick).astype(F32)


def ceil_log2(values: np.ndarray) -> np.ndarray:
    """Exact ``ceil(log2 v)`` of positive float32 values (frexp is exact); ``v = 0`` gives -1000."""
    mantissa, exponent = np.frexp(np.asarray(values, F32).astype(F64))
    return np.where(values == 0, -1000, np.where(mantissa == 0.5, exponent - 1, exponent)).astype(np.int64)


def floor_log2(values: np.ndarray) -> np.ndarray:
    """Exact ``floor(log2 v)`` of positive float32 values; ``v = 0`` gives -1000."""
    _, exponent = np.frexp(np.asarray(values, F32).astype(F64))
    return np.where(values == 0, -1000, exponent - 1).astype(np.int64)


def around(centres: np.ndarray, ulps: int) -> np.ndarray:
    """float32 bit patterns (int64) of every positive finite value within ``ulps`` of a centre."""
    bits = np.asarray(centres, F32).view(np.uint32).astype(np.int64)
    near = np.unique((bits[:, None] + np.arange(-ulps, ulps + 1)).ravel())
    return near[(near > 0) & (near < INF_BITS)]


def around_bf16(centres: np.ndarray, ulps: int) -> np.ndarray:
    """float32 bit patterns of the positive finite bfloat16 values within ``ulps`` bfloat16 ulps of each centre."""
    bits = np.asarray(centres, F32).view(np.uint32).astype(np.int64) >> 16
    near = np.unique((bits[:, None] + np.arange(-ulps, ulps + 2)).ravel())
    near = near[(near > 0) & (near < INF_BITS >> 16)]
    return near << 16


def values_of(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, np.int64).astype(np.uint32).view(F32)


def test_f32_div_against_fractions() -> None:
    """The oracle's division: within half an ulp of the exact quotient, ties to even, on boundary-like inputs."""
    rng = np.random.default_rng(1)
    a = np.concatenate([values_of(rng.integers(1, INF_BITS, 300)), F32([448 * 2.0**-130, 1, 2688, 1e-45])])
    b = np.concatenate([values_of(rng.integers(0x3F80_0000, 0x4780_0000, 300)), F32([448, 6, 2688, 3])])
    q = f32_div(a, b)
    for x, y, r in zip(a.tolist(), b.tolist(), q.tolist(), strict=True):
        exact = Fraction(x) / Fraction(y)
        if r == np.inf:
            assert exact >= Fraction(2**128 - 2**103)
            continue
        up, down = Fraction(float(np.nextafter(F32(r), F32(np.inf)))), Fraction(float(np.nextafter(F32(r), F32(0))))
        error, half_up, half_down = exact - Fraction(r), (up - Fraction(r)) / 2, (Fraction(r) - down) / 2
        assert -half_down <= error <= half_up, (x, y, r)
        if error in (half_up, -half_down):
            assert np.array([r], F32).view(np.uint32)[0] % 2 == 0, (x, y, r)


# %% MX: every scale rule under every edge policy


def mx_oracle(amax: np.ndarray, format: str, rule: str, edges: str) -> np.ndarray:
    """E8M0 bytes of positive finite float32 amaxes from the rules' definitions."""
    top, emax, mbits = MX[format]
    if rule == "floor":
        power = floor_log2(amax) - emax
    elif rule == "ceil":
        power = ceil_log2(amax) - emax
    elif rule == "even":  # round to mbits + 1 significant bits, ties up, then floor
        mantissa, exponent = np.frexp(amax.astype(F64))
        carried = np.floor(mantissa * 2.0 ** (mbits + 1) + 0.5) == 2.0 ** (mbits + 1)
        power = np.where(amax == 0, -1000, exponent - 1 + carried) - emax
    elif edges == "torchao_018":  # torchao 0.18: ceil(torch.log2(fl32(amax / max))) in float32
        log2 = torch.log2(torch.from_numpy(f32_div(amax, F32(top))))
        power = torch.clamp(torch.ceil(log2), -127, 127).to(torch.int64).numpy()
    else:  # cvt.rp of fl32(amax * fl32(1 / max))
        power = ceil_log2(f32_mul(amax, f32_div(F32(1), F32(top))))
    return np.clip(power + 127, 0, 254)


def mx_decision_points(format: str, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(float32 decision amaxes +- 64 ulps, bfloat16 ones +- 8 ulps) of ``rule`` for ``format``, every binade."""
    top, _, mbits = MX[format]
    powers = np.arange(-149, 128)
    if rule in ("floor", "ceil"):
        centres = np.ldexp(F32(1), powers)
    elif rule == "even":
        centres = np.concatenate([np.ldexp(F32(1), powers), np.ldexp(F32(2 - 2.0 ** -(mbits + 1)), powers)])
    else:
        with np.errstate(over="ignore"):
            at_max = np.ldexp(F32(top), np.arange(-160, 130)).astype(F32)
        at_max = at_max[(at_max > 0) & np.isfinite(at_max)]
        reciprocal = f32_div(F32(1), F32(top))
        centres = np.concatenate([at_max, f32_div(np.ldexp(F32(1), powers).astype(F32), reciprocal)])
    centres = centres[np.isfinite(centres) & (centres > 0)]
    return around(centres, 64), around_bf16(centres, 8)


@pytest.mark.parametrize("rule", ["floor", "ceil", "even", "rceil"])
@pytest.mark.parametrize("format", list(MX))
def test_mx_scale_bytes_on_decision_points(format: str, rule: str) -> None:
    for kind, bits in zip(("float32", "bfloat16"), mx_decision_points(format, rule), strict=True):
        amax = values_of(bits)
        for edges in EDGES:
            got = scale_bytes(bits, format=format, scale_rule=rule, edges=edges).astype(np.int64)
            want = mx_oracle(amax, format, rule, edges)
            bad = np.flatnonzero(got != want)
            assert bad.size == 0, (
                f"{format} {rule} {edges} {kind}: {bad.size} of {amax.size} decision amaxes differ, e.g. "
                f"{[hex(b) for b in bits[bad[:3]]]}: {got[bad[:3]].tolist()} != {want[bad[:3]].tolist()}"
            )
        # both sides of every boundary: the bytes step somewhere in each neighbourhood
        assert np.unique(want).size > 200, f"{format} {rule} {kind}: the amaxes cover too few scale bytes"


@pytest.mark.parametrize("format", list(MX))
def test_mx_contract_applies_the_scale_bytes(format: str) -> None:
    """``mx`` itself on blocks whose amax is a decision point (float32 and bfloat16 input), rowwise and columnwise."""
    for rule in ("even", "rceil"):
        bits = np.concatenate(mx_decision_points(format, rule))[::7]
        rows = -(-bits.size // 32) * 32
        x = np.zeros((rows, 32), F32)
        x[: bits.size, 5] = -values_of(bits)
        x[: bits.size, 6] = values_of(bits) * F32(0.5)
        for edges in ("te", "torchao_018"):
            out = mx(x, format=format, scale_rule=rule, usage="both", edges=edges)
            want = np.zeros(rows, np.int64)
            want[: bits.size] = mx_oracle(values_of(bits), format, rule, edges)
            want[bits.size :] = 0
            assert np.array_equal(out["scale_rowwise"][:rows, 0], want), f"{format} {rule} {edges} rowwise"
            columns = mx(np.ascontiguousarray(x.reshape(-1, 32, 32).transpose(0, 2, 1)).reshape(rows, 32),
                         format=format, scale_rule=rule, usage="columnwise", edges=edges)  # fmt: skip
            assert np.array_equal(columns["scale_columnwise"][: rows // 32, :32].reshape(-1), want)


# %% NVFP4: E4M3 block scales at their rounding midpoints, tensor scales around 2688 * 2**k


SIXTH, INV_2688 = f32_div(F32(1), F32(6)), f32_div(F32(1), F32(2688))
E4M3_MIDPOINTS = (E4M3[:-1] + E4M3[1:]) / F32(2)  # exact: 4 significant bits plus one
TARGETS = np.concatenate([E4M3_MIDPOINTS, F32([448.0, 2.0**-6])])
"""Where an NVFP4 block scale decides: every E4M3 rounding midpoint (2**-10 between 0 and the smallest
subnormal included), the saturation at 448, and torchao's clamp floor 2**-6."""
GLOBAL_AMAXES = np.concatenate([2688 * 2.0 ** np.array([-24, -7, 0, 9, 30]), [1.0, 3.1e-3, 7.77e5]]).astype(F32)
"""Given tensor amaxes: 2688 * 2**k (an exact global scale 2**-k, the ties of torchao's division reachable) and
three whose global scale has a full mantissa (where a different float32 association of b * S_enc / 6 rounds
otherwise)."""


def nvfp4_oracle(block_amax: np.ndarray, amax: F32, rule: str) -> tuple[np.ndarray, np.ndarray, F32]:
    """(E4M3 codes, float32 targets before the E4M3 rounding, tensor_scale) of positive finite block amaxes."""
    if rule == "te":
        encode = F32(1) if amax == 0 else np.minimum(f32_div(F32(2688), amax), FLT_MAX)
        tensor_scale = f32_div(F32(1), encode)
        target = np.minimum(f32_mul(block_amax, f32_mul(encode, SIXTH)), FLT_MAX)
    else:
        if rule == "torchao":
            tensor_scale, sixth = f32_div(amax, F32(2688)), f32_div(block_amax, F32(6))
        else:
            tensor_scale, sixth = f32_mul(amax, INV_2688), f32_mul(block_amax, SIXTH)
        target = np.clip(f32_div(sixth, tensor_scale), F32(2.0**-6), F32(448))
    codes = np.minimum(target, F32(448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return codes, target, F32(tensor_scale)


def nvfp4_block_points(amax: F32, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(float32 block amaxes whose target is within an ulp or so of a TARGETS point, bfloat16 ones)."""
    _, _, tensor_scale = nvfp4_oracle(F32([1.0]), amax, rule)
    if rule == "te":  # target = fl32(b * fl32(S_enc / 6))
        per_unit = F64(f32_mul(f32_div(F32(2688), amax), SIXTH))
    elif rule == "torchao":  # target = fl32(fl32(b / 6) / pts)
        per_unit = 1 / (6 * F64(tensor_scale))
    else:  # target = fl32(fl32(b * fl32(1/6)) / pts)
        per_unit = F64(SIXTH) / F64(tensor_scale)
    centres = (TARGETS.astype(F64) / per_unit).astype(F32)
    centres = centres[np.isfinite(centres) & (centres > 0)]
    return around(centres, 4), around_bf16(centres, 3)


def nvfp4_scales(block_amax: np.ndarray, amax: F32, rule: str) -> dict[str, np.ndarray]:
    """The reference's ``scaled_operand`` on one 1x16 block per block amax, with ``amax`` given."""
    x = np.zeros((-(-block_amax.size // 16) * 16, 16), F32)
    x[: block_amax.size, 3] = block_amax
    x[: block_amax.size, 9] = -block_amax * F32(0.25)
    x[block_amax.size :, 0] = block_amax[0]  # padding rows: any finite block
    parts = scaled_operand(
        x, block="1x16", amax_scope="tensor", scale_rule=rule, zero_scale="flt_max", given_amax=np.array([amax], F32)
    )
    return {"scales": parts["scales"][: block_amax.size, 0], "tensor_scale": parts["tensor_scale"]}


@pytest.mark.parametrize("rule", ["te", "torchao", "torchao_cuda"])
def test_nvfp4_block_scales_at_e4m3_midpoints(rule: str) -> None:
    hits = {"below": 0, "on": 0, "above": 0}
    for amax in GLOBAL_AMAXES:
        for kind, bits in zip(("float32", "bfloat16"), nvfp4_block_points(amax, rule), strict=True):
            block_amax = values_of(bits)
            codes, target, tensor_scale = nvfp4_oracle(block_amax, amax, rule)
            got = nvfp4_scales(block_amax, amax, rule)
            bad = np.flatnonzero(got["scales"] != codes)
            assert bad.size == 0, (
                f"{rule} amax {amax} {kind}: {bad.size} of {bits.size} block scales differ, e.g. block amax "
                f"{[hex(b) for b in bits[bad[:3]]]}: {got['scales'][bad[:3]].tolist()} != {codes[bad[:3]].tolist()}"
            )
            assert got["tensor_scale"].view(np.uint32)[0] == np.float32(tensor_scale).view(np.uint32)
            # the construction lands within one float32 ulp of the midpoints, on both sides (and on some)
            upper = np.clip(np.searchsorted(E4M3_MIDPOINTS, target), 1, E4M3_MIDPOINTS.size - 1)
            low, high = E4M3_MIDPOINTS[upper - 1], E4M3_MIDPOINTS[upper]
            nearest = np.where(target - low < high - target, low, high)
            close = np.abs(target.astype(F64) - nearest) <= np.spacing(nearest).astype(F64)
            hits["below"] += int(np.count_nonzero(close & (target < nearest)))
            hits["on"] += int(np.count_nonzero(target == nearest))
            hits["above"] += int(np.count_nonzero(close & (target > nearest)))
    assert min(hits["below"], hits["above"]) > 200, hits
    if rule == "torchao":  # fl32(b / 6) / 2**k hits the midpoints exactly: the ties-to-even cases
        assert hits["on"] > 100, hits


@pytest.mark.parametrize("rule", ["te", "torchao", "torchao_cuda"])
def test_nvfp4_tensor_scale_on_decision_points(rule: str) -> None:
    """Given amaxes 2688 * 2**k +- 16 ulps over every binade and (te) at the overflow of 2688 / amax."""
    powers = np.arange(-149, 116)
    centres = np.ldexp(F32(2688), powers).astype(F32)
    if rule == "te":
        centres = np.concatenate([centres, f32_div(F32(2688), FLT_MAX)[None]])
    centres = centres[centres > 0]
    for bits in (around(centres, 16), around_bf16(centres, 4)):
        amaxes = values_of(bits)[::4]
        for amax in amaxes:
            block = np.array([amax], F32)
            codes, _, tensor_scale = nvfp4_oracle(block, amax, rule)
            got = nvfp4_scales(block, amax, rule)
            assert got["tensor_scale"][0].view(np.uint32) == F32(tensor_scale).view(np.uint32), hex(
                amax.view(np.uint32)
            )
            assert got["scales"][0] == codes[0], f"{rule} amax {amax!r}: block scale {got['scales'][0]} != {codes[0]}"


# %% FP8 current and block scaling: power_2_scale steps, epsilon, the overflow to value_for_inf


def fp8_scale_oracle(amax: np.ndarray, fp8_max: float, power_2: bool, epsilon: float, for_inf: F32) -> np.ndarray:
    amax = np.asarray(amax, F32)
    floored = np.where(amax < F32(epsilon), F32(epsilon), amax)
    scale = f32_div(F32(fp8_max), np.maximum(floored, F32(1e-45)))
    scale = np.where(np.isinf(scale), for_inf, scale)
    if power_2:
        scale = np.ldexp(F32(1), floor_log2(scale)).astype(F32)
    return np.where(floored == 0, F32(1), scale).astype(F32)


def fp8_decision_points(fp8_max: float, epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """(float32 amaxes +- 16 ulps, bfloat16 ones +- 4 ulps): fp8_max * 2**-n (every n), epsilon, the overflow."""
    with np.errstate(over="ignore"):
        centres = np.ldexp(F32(fp8_max), -np.arange(-130, 160)).astype(F32)
    overflow = F32(fp8_max / (2.0**128 - 2.0**103))  # fp8_max / amax rounds to Inf at and below about this
    centres = np.concatenate([centres, F32([epsilon, F32(fp8_max) / FLT_MAX, overflow])])
    centres = centres[np.isfinite(centres) & (centres > 0)]
    return around(centres, 16), around_bf16(centres, 4)


@pytest.mark.parametrize("epsilon", [0.0, 1.0e-4])
@pytest.mark.parametrize("power_2", [False, True])
@pytest.mark.parametrize("fp8_max", [448.0, 57344.0])
def test_fp8_scale_from_amax_on_decision_points(fp8_max: float, power_2: bool, epsilon: float) -> None:
    for bits in fp8_decision_points(fp8_max, epsilon):
        amax = values_of(bits)
        for for_inf in (FLT_MAX, BF16_MAX):
            got = scale_from_amax(amax, fp8_max, power_2_scale=power_2, epsilon=epsilon, value_for_inf=float(for_inf))
            want = fp8_scale_oracle(amax, fp8_max, power_2, epsilon, for_inf)
            bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
            assert bad.size == 0, f"{bad.size} differ, e.g. amax {amax[bad[:3]]}: {got[bad[:3]]} != {want[bad[:3]]}"
        if power_2:
            assert np.unique(got).size > (240 if epsilon == 0 else 130)  # every power-of-two step above epsilon


@pytest.mark.parametrize("epsilon", [0.0, 1.0e-4])
@pytest.mark.parametrize("x_dtype", ["float32", "bfloat16"])
def test_fp8_block_scales_on_decision_points(x_dtype: str, epsilon: float) -> None:
    """``fp8_block`` 1x128 on one block per decision amax: its ``scale_inv`` is fl32(1 / oracle scale)."""
    float32_bits, bfloat16_bits = fp8_decision_points(448.0, epsilon)
    bits = (float32_bits if x_dtype == "float32" else bfloat16_bits)[::2]
    x = np.zeros((bits.size, 128), F32)
    x[:, 127] = values_of(bits)
    x[:, 64] = -values_of(bits)
    for_inf = FLT_MAX if x_dtype == "float32" else BF16_MAX
    for power_2 in (False, True):
        out = fp8_block(x, format="float8_e4m3fn", block="1x128", power_2_scale=power_2, epsilon=epsilon,
                        usage="rowwise", x_dtype=x_dtype)  # fmt: skip
        want = f32_div(F32(1), fp8_scale_oracle(values_of(bits), 448.0, power_2, epsilon, for_inf))
        got = out["scale_inv"][0, : bits.size]
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"pow2={power_2}: scale_inv differs"


@pytest.mark.parametrize("power_2", [False, True])
def test_fp8_tensor_scale_on_decision_points(power_2: bool) -> None:
    """``fp8_tensor`` (current scaling) on tensors whose amax is a decision point: ``scale`` and ``scale_inv``."""
    bits = fp8_decision_points(57344.0, 1.0e-4)[0][::40]
    for amax in values_of(bits):
        out = fp8_tensor(np.array([[amax, -amax / 2]], F32), format="float8_e5m2", power_2_scale=power_2, epsilon=1e-4)
        want = fp8_scale_oracle(np.array([amax]), 57344.0, power_2, 1.0e-4, FLT_MAX)
        assert out["scale"].view(np.uint32)[0] == want.view(np.uint32)[0], f"amax {amax!r}"
        assert out["scale_inv"].view(np.uint32)[0] == f32_div(F32(1), want).view(np.uint32)[0], f"amax {amax!r}"
