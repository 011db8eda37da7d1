"""FP8 per-tensor scaling recipes (contracts ``quant.fp8_tensor``, ``quant.fp8_delayed``): Triton kernels for
CUDA and torch paths for the rest, plus the device functions the blockwise recipe (``fast/quant/fp8_block/``)
shares.

Contracts
---------
- ``quant.fp8_tensor`` (:func:`fp8_tensor`): TransformerEngine's current scaling. ``amax = max|x|`` (NaN
  ignored); ``scale`` from TE's ``compute_scale_from_amax`` (epsilon floor; amax 0/Inf/NaN -> 1;
  ``fp8_max / amax``; infinite -> FLT_MAX or the input dtype's max; optional power of two);
  ``scale_inv = 1 / scale``; ``data = satfinite_rne(fl32(x * scale))`` and its transpose.  Spec:
  ``specs/quant/fp8_tensor.yaml``.
- ``quant.fp8_delayed`` (:func:`fp8_delayed`): one step of delayed scaling: the cast with a given scale,
  the amax recorded into ``history[0]`` by an int32 atomic max, then TE's history roll and scale update.
  Spec: ``specs/quant/fp8_delayed.yaml``.

How the arithmetic is kept exact
--------------------------------
- Scales: float32 scales (``fp8_max / amax``) and ``1 / scale`` are one correctly rounded float32 division each
  (``tl.div_rn``, PTX ``div.rn.f32``, which keeps subnormals: ``1 / FLT_MAX`` is one), TE's ``__fdiv_rn`` /
  ``__frcp_rn``; Triton's float32 ``/`` would be ``div.full.f32``, not correctly rounded.  (Until 2026-11-27 the
  kernels divided in float64 and rounded once to float32, the same value, since double rounding is innocuous for
  division when the wider format has at least 2p + 2 bits, 53 >= 50; float32 division takes fewer registers.)
  A quotient that rounds to Inf is replaced by ``value_for_inf``.  Power-of-two scales, ``bits(fl32(fp8_max
  / amax)) & 0xFF800000``, need no division: their exponent follows from the exponents and mantissas of
  amax and fp8_max (:func:`scale_from_amax`; ``tests/gpu/test_gpu_fp8_recipes.py`` checks it against the
  float64 quotient on all 2**31 non-negative float32 amaxes); their reciprocal is exact with integers.
- Elements: ``fl32(x * scale)`` is one float32 multiply (nothing is added to the product, so there is no
  FMA to contract, and Triton does not flush subnormal operands of a multiply); the FP8 code comes from
  one of three rounding cores (``ROUNDING_CORES``, the kernels' ``CORE``):

  - ``hardware`` (compiled kernels, the default on CUDA): ``cvt.rn.satfinite.{e4m3,e5m2}x2.f32``, one
    instruction per two values (sm_89+).  It rounds to nearest even and saturates ±Inf and overflow to
    ±max like the contract; a NaN becomes 0x7F whatever its sign (the specs compare NaN codes as NaN).
    ``tests/gpu/test_gpu_fp8_recipes.py`` proves it equal to ``lean`` on all 2**32 float32 inputs.
  - ``lean`` (the default in Triton's interpreter, which cannot run inline PTX): integer arithmetic on the
    float32 bits.  Clamping the magnitude to the largest finite value first saturates (rounding is
    monotonic); normal results round the mantissa with ``(m + 2**(s-1) - 1 + lsb) >> s`` (a carry moves
    into the exponent) and rebias with one constant; subnormal results are ``bits(|v| + 2**(23 + e_min))
    - bits(2**(23 + e_min))``, where the float32 add rounds ``|v|`` to a multiple of the smallest
    subnormal, ties to even.  NaN -> 0x7F with the sign of the input.
  - ``exact``: ``fast._triton.round_to_code``, the ``cast.fp8`` core; the tests compare ``lean`` with it on
    every bfloat16 pattern and random float32 patterns.
- Amax: ``|x|`` with NaN replaced by 0, then a maximum; across programs an ``atomic_max`` on the int32
  bit pattern (non-negative floats order like their bits).

Paths and passes
----------------
Current scaling takes two passes over ``x`` on the GPU: an amax kernel (at most ``AMAX_TILE[2]`` programs,
each striding over the blocks, then one atomic maximum per program), then
a cast kernel in which every program derives the scale from the amax itself (a few scalar operations)
and writes the rowwise tile and its transpose from one read.  Delayed scaling takes one pass (the cast
kernel records the amax while casting) and a one-program update kernel.  The torch paths do the same
arithmetic with torch ops (the element rounding through ``fast.cast.fp8``).  ``QCONFORM_FAST_PATH``
chooses as in ``fast/cast.py`` (``fast._triton.selected_path``).  In Triton's interpreter the kernels run
under ``numpy.errstate(all="ignore")``: NumPy warns where the GPU silently gives Inf (``1 / 0``).  The
scale rule's epsilon and value_for_inf are runtime arguments, not constexprs, so that the recipes' variants
share compiled kernels.  Tiles (``CAST_TILES``, ``AMAX_TILE``) come from a GPU sweep
(``docs/performance.md``).

This module imports without Triton and queries no device at import time.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from fast._checks import check_choice
from fast._triton import PATH_ENV, device, float32_bits, jit, round_to_code, selected_path, tl, triton
from fast.cast import fp8 as cast_fp8
from fast.formats import FORMATS

__all__ = [
    "AMAX_COMPUTE_ALGOS",
    "DELAYED_UPDATES",
    "FP8_FORMATS",
    "INF_SCALES",
    "PATH_ENV",
    "ROUNDING_CORES",
    "USAGES",
    "X_DTYPES",
    "bench",
    "fp8_code",
    "fp8_delayed",
    "fp8_tensor",
    "reciprocal",
    "rounding_core",
    "scale_from_amax",
]

FP8_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")
INF_SCALES: tuple[str, ...] = ("float32_max", "input_max")
X_DTYPES: tuple[str, ...] = ("bfloat16", "float32", "float16")
AMAX_COMPUTE_ALGOS: tuple[str, ...] = ("max", "most_recent")
DELAYED_UPDATES: tuple[str, ...] = ("fused", "unfused")
ROUNDING_CORES: tuple[str, ...] = ("exact", "lean", "hardware")
"""The kernels' FP8 rounding cores (module docstring), in the order of their ``CORE`` ids."""

ROUNDING_CORE: str | None = None
"""The rounding core of every kernel of ``fast.quant.fp8*``; None: ``hardware`` compiled, ``lean`` interpreted."""

F32_MAX = 3.4028234663852886e38
F32_OVERFLOW = 3.4028235677973366e38
"""2**128 - 2**103: float64 values from here up round to float32 Inf."""
INPUT_IDS: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
"""Accepted input dtypes and the kernels' ``INPUT`` id (``fast._triton.float32_bits``)."""
DTYPE_MAX: dict[str, float] = {"float32": F32_MAX, "bfloat16": 3.3895313892515355e38, "float16": 65504.0}
"""Largest finite value of each input dtype (``inf_scale="input_max"``, the blockwise value_for_inf)."""


FORMAT_META: dict[str, dict[str, Any]] = {
    name: {
        "MANTISSA_BITS": fmt.mantissa_bits,
        "BIAS": fmt.bias,
        "MAX_CODE": fmt.max_code,
        "MAX_BITS": int(np.float32(fmt.max_value).view(np.int32)),
        "MAGIC": 2.0 ** (24 - fmt.bias - fmt.mantissa_bits),
        "FP8_MAX": fmt.max_value,
    }
    for name, fmt in ((name, FORMATS[name]) for name in FP8_FORMATS)
}
"""The kernels' constexprs of each format (computed once: launches stay cheap on the host)."""


def rounding_core(tensor_device: torch.device) -> int:
    """The ``CORE`` id for kernels launched on ``tensor_device``: ``ROUNDING_CORE``, else by compiled/interpreted.

    ``ValueError`` for an unknown ``ROUNDING_CORE`` and for ``hardware`` on a device other than CUDA.
    """
    choice = ROUNDING_CORE or ("hardware" if tensor_device.type == "cuda" else "lean")
    if choice not in ROUNDING_CORES:
        raise ValueError(f"Got ROUNDING_CORE={choice!r}, but ROUNDING_CORE must be one of {list(ROUNDING_CORES)}")
    if choice == "hardware" and tensor_device.type != "cuda":
        raise ValueError(f"Got ROUNDING_CORE='hardware' and a tensor on {tensor_device}, but it needs a CUDA device")
    return ROUNDING_CORES.index(choice)


# %% Device functions


@device
def fp8_code(
    value,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_BITS: tl.constexpr,
    MAGIC: tl.constexpr,
    CORE: tl.constexpr,
):
    """uint8 FP8 code of float32 ``value``: round to nearest even, saturate; NaN -> a NaN code (module docstring)."""
    if CORE == 2:  # hardware: two values per cvt; the four results of one asm instance packed in one register
        if MANTISSA_BITS == 3:
            return tl.inline_asm_elementwise(
                "{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, $2, $1;\n"
                "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3;\nmov.b32 $0, {lo, hi};\n}",
                "=r,r,r,r,r",
                [value],
                dtype=tl.uint8,
                is_pure=True,
                pack=4,
            )
        return tl.inline_asm_elementwise(
            "{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e5m2x2.f32 lo, $2, $1;\n"
            "cvt.rn.satfinite.e5m2x2.f32 hi, $4, $3;\nmov.b32 $0, {lo, hi};\n}",
            "=r,r,r,r,r",
            [value],
            dtype=tl.uint8,
            is_pure=True,
            pack=4,
        )
    bits = value.to(tl.int32, bitcast=True)
    if CORE == 1:  # lean
        magnitude = bits & 0x7FFFFFFF
        clamped = tl.minimum(magnitude, MAX_BITS)  # saturate first: rounding is monotonic
        normal = (
            clamped
            + (((1 << (22 - MANTISSA_BITS)) - 1) - ((127 - BIAS) << 23))
            + ((clamped >> (23 - MANTISSA_BITS)) & 1)
        ) >> (23 - MANTISSA_BITS)
        # Below the smallest normal the float32 add rounds |v| to a multiple of the smallest subnormal.
        tiny = (magnitude.to(tl.float32, bitcast=True) + MAGIC).to(tl.int32, bitcast=True) - (
            (127 + 24 - BIAS - MANTISSA_BITS) << 23
        )
        code = tl.where(magnitude < ((128 - BIAS) << 23), tiny, normal)
        code = tl.where(magnitude > 0x7F800000, 0x7F, code)
        return (code | ((bits >> 24) & 0x80)).to(tl.uint8)
    code = round_to_code(bits, bits, 0, MANTISSA_BITS, BIAS, 24, 0x80, True, MAX_CODE, 0x7F, 0xFF, 0, 0)
    return code.to(tl.uint8)


@device
def scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX: tl.constexpr, MAX_BITS: tl.constexpr, POW2: tl.constexpr):
    """TE's ``compute_scale_from_amax`` of float32 ``amax`` (scalar or block), exactly (module docstring).

    ``epsilon`` and ``value_for_inf`` are float32 scalars (runtime arguments of the kernels); ``MAX_BITS``
    are the float32 bits of ``FP8_MAX``.
    """
    amax = tl.where(amax < epsilon, epsilon, amax)
    one = (amax == 0.0) | (amax > 3.4028234663852886e38) | (amax != amax)
    if POW2:
        # fl32(FP8_MAX / amax) rounded down to a power of two, without a division: with amax = m * 2**e
        # and FP8_MAX = m_max * 2**e_max (m, m_max in [1, 2)), the quotient is (m_max / m) * 2**(e_max - e),
        # and m_max / m < 1 exactly when m > m_max.  Rounding to float32 never carries it up to the next
        # power of two (m_max / m <= 1 - 2**-24 when m > m_max), so the exponent is exact; it overflows
        # (fl32 gives Inf, then value_for_inf) exactly when it exceeds 127, and always for subnormal amax.
        bits = amax.to(tl.int32, bitcast=True)
        field = ((MAX_BITS >> 23) + 127) - (bits >> 23) - ((bits & 0x7FFFFF) > (MAX_BITS & 0x7FFFFF)).to(tl.int32)
        overflow = (field > 254) | (bits < 0x00800000)
        inf_bits = tl.cast(value_for_inf, tl.float32).to(tl.int32, bitcast=True)  # a Python float when interpreted
        scale_bits = tl.where(overflow, inf_bits & -8388608, field << 23)
        return tl.where(one, 1.0, scale_bits.to(tl.float32, bitcast=True))
    # fl32(FP8_MAX / amax) by one correctly rounded float32 division (``div.rn.f32``); it overflows to Inf exactly
    # where TE's float32 quotient does.  (``tl.where(c, v, v)``: a tensor of v shaped like c, in Triton and Gluon.)
    denominator = tl.where(one, 1.0, amax)
    quotient = tl.div_rn(tl.where(one, FP8_MAX, FP8_MAX), denominator)
    scale = tl.where(quotient <= 3.4028234663852886e38, quotient, value_for_inf)
    return tl.where(one, 1.0, scale)


@device
def reciprocal(scale, POW2: tl.constexpr):
    """The correctly rounded float32 ``1 / scale``; POW2: of a normal power of two, exactly with integers."""
    if POW2:
        exponent = (scale.to(tl.int32, bitcast=True) >> 23) & 0xFF
        return tl.where(exponent < 254, (254 - exponent) << 23, 0x00400000).to(tl.float32, bitcast=True)
    return tl.div_rn(tl.where(scale == scale, 1.0, 1.0), scale)  # div.rn.f32: ±0 -> ±Inf, Inf -> 0, NaN -> NaN


# %% Compute kernels


def _amax_kernel(x_ptr, amax_ptr, n_elements, INPUT: tl.constexpr, BLOCK: tl.constexpr):
    # Each program strides over the blocks (grid = at most AMAX_TILE's programs): one atomic per program.
    pid, programs = tl.program_id(0), tl.num_programs(0)
    offsets = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    running = tl.zeros([BLOCK], tl.float32)
    for _ in range(pid, tl.cdiv(n_elements, BLOCK), programs):
        _, bits = float32_bits(tl.load(x_ptr + offsets, mask=offsets < n_elements, other=0), INPUT)
        value = bits.to(tl.float32, bitcast=True)
        running = tl.maximum(running, tl.where(value == value, tl.abs(value), 0.0))  # NaN ignored
        offsets += programs.to(tl.int64) * BLOCK
    tl.atomic_max(amax_ptr, tl.max(running, axis=0).to(tl.int32, bitcast=True))


def _scaled_cast_kernel(
    # pointers
    x_ptr,
    data_ptr,
    columnwise_ptr,
    amax_ptr,
    scale_ptr,
    amax_out_ptr,
    scale_out_ptr,
    scale_inv_ptr,
    # sizes: x viewed as [M, K]
    M,
    K,
    # scale rule (FROM_AMAX: current scaling; else the scale at scale_ptr, amax recorded atomically)
    epsilon,
    value_for_inf,
    FROM_AMAX: tl.constexpr,
    FP8_MAX: tl.constexpr,
    POW2: tl.constexpr,
    # format and rounding core
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr,
    MAX_BITS: tl.constexpr,
    MAGIC: tl.constexpr,
    CORE: tl.constexpr,
    # outputs and input width
    ROWWISE: tl.constexpr,
    COLWISE: tl.constexpr,
    INPUT: tl.constexpr,
    # tiling
    BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    k_tiles = tl.maximum(tl.cdiv(K, BLOCK_K), 1)
    pid_m, pid_k = tl.program_id(0) // k_tiles, tl.program_id(0) % k_tiles
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < M)[:, None] & (cols < K)[None, :]
    raw = tl.load(x_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :], mask=mask, other=0)
    _, bits = float32_bits(raw, INPUT)
    value = bits.to(tl.float32, bitcast=True)
    first = tl.program_id(0) == 0
    if FROM_AMAX:
        amax = tl.load(amax_ptr).to(tl.float32, bitcast=True)
        scale = scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, POW2)
        if first:
            tl.store(amax_out_ptr, amax)
            tl.store(scale_out_ptr, scale)
            tl.store(scale_inv_ptr, reciprocal(scale, POW2))
    else:
        scale = tl.load(scale_ptr)
        magnitude = tl.where(value == value, tl.abs(value), 0.0)
        tl.atomic_max(amax_ptr, tl.max(tl.max(magnitude, axis=1), axis=0).to(tl.int32, bitcast=True))
        if first:
            tl.store(scale_inv_ptr, reciprocal(scale, False))
    code = fp8_code(value * scale, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE)
    if ROWWISE:
        tl.store(data_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :], code, mask=mask)
    if COLWISE:
        tl.store(columnwise_ptr + cols.to(tl.int64)[:, None] * M + rows[None, :], tl.trans(code), mask=tl.trans(mask))


def _delayed_update_kernel(
    history_ptr,
    amax_ptr,
    scale_ptr,
    new_history_ptr,
    new_scale_ptr,
    L,
    SCALED_MAX: tl.constexpr,
    MOST_RECENT: tl.constexpr,
    FUSED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    index = tl.arange(0, BLOCK)
    valid = index < L
    history = tl.load(history_ptr + index, mask=valid, other=0).to(tl.int32, bitcast=True)
    # The cast kernel's atomicMaxFloat into history[0]: a signed int32 maximum of the bit patterns.
    history = tl.where(index == 0, tl.maximum(history, tl.load(amax_ptr)), history)
    last = tl.sum(tl.where(index == 0, history, 0), axis=0)
    next_entry = tl.load(history_ptr + index + 1, mask=index + 1 < L, other=0).to(tl.int32, bitcast=True)
    rolled = tl.where(index == 0, 0, tl.where(index == L - 1, last, next_entry))
    # The fused kernel skips a zero newest amax.  Only +0.0 can be one here: a -0.0 (a negative int32)
    # loses the atomic max to amax >= +0.0.
    if FUSED:  # noqa: SIM108 (a constexpr branch)
        skip = last == 0
    else:
        skip = last != last
    values = history.to(tl.float32, bitcast=True)
    if MOST_RECENT:
        chosen = last.to(tl.float32, bitcast=True)
    else:
        chosen = tl.max(tl.where(valid & (values == values) & (values > 0.0), values, 0.0), axis=0)
    chosen = tl.where(skip, 0.0, chosen)
    old = tl.load(scale_ptr)
    use = (chosen > 0.0) & (chosen <= 3.4028234663852886e38)
    quotient = SCALED_MAX / tl.where(use, chosen, 1.0).to(tl.float64)
    # An infinite quotient (rounding to Inf in float32) becomes FLT_MAX, as an infinite old scale does.
    new = tl.minimum(quotient, 3.4028234663852886e38).to(tl.float32)
    scale = tl.where(use, new, old)
    scale = tl.where(tl.abs(scale) > 3.4028234663852886e38, 3.4028234663852886e38, scale)
    tl.store(new_scale_ptr, scale)
    tl.store(new_history_ptr + index, tl.where(skip, history, rolled).to(tl.float32, bitcast=True), mask=valid)


# %% Launch helpers

AMAX_TILE: tuple[int, int, int] = (4096, 4, 2112)
"""Elements per block, num_warps and the most programs of the amax kernel (each strides over the blocks)."""
CAST_TILES: dict[str, tuple[int, int, int]] = {
    "rowwise": (32, 128, 4),
    "columnwise": (64, 64, 4),
    "both": (64, 64, 4),
}
"""(BLOCK_M, BLOCK_K, num_warps) of the cast kernel per usage."""


@contextlib.contextmanager
def quiet_interpreter(tensor_device: torch.device) -> Iterator[None]:
    """In Triton's interpreter, silence NumPy's floating-point warnings (the GPU gives Inf/NaN silently)."""
    if tensor_device.type == "cuda":
        yield
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _launch_cast(
    x2: torch.Tensor,
    outputs: dict[str, torch.Tensor],
    buffers: list[torch.Tensor],
    rule: dict[str, Any],
    format: str,
    usage: str,
) -> None:
    """Run ``_scaled_cast_kernel`` over ``x2`` ([M, K]); ``buffers`` = amax, scale, amax_out, scale_out, scale_inv.

    ``rule``: ``epsilon``, ``value_for_inf`` (runtime) and ``FROM_AMAX``, ``POW2`` (constexprs).
    """
    m, k = x2.shape
    block_m, block_k, num_warps = CAST_TILES[usage]
    dummy = outputs.get("data", outputs.get("columnwise_data"))
    grid = (max(1, triton.cdiv(m, block_m) * triton.cdiv(k, block_k)),)
    with quiet_interpreter(x2.device):
        jit(_scaled_cast_kernel)[grid](
            x2,
            outputs.get("data", dummy),
            outputs.get("columnwise_data", dummy),
            *buffers,
            m,
            k,
            rule["epsilon"],
            rule["value_for_inf"],
            FROM_AMAX=rule["FROM_AMAX"],
            POW2=rule["POW2"],
            **FORMAT_META[format],
            CORE=rounding_core(x2.device),
            ROWWISE=usage != "columnwise",
            COLWISE=usage != "rowwise",
            INPUT=INPUT_IDS[x2.dtype],
            BLOCK_M=block_m,
            BLOCK_K=block_k,
            num_warps=num_warps,
        )


# %% Torch paths


def torch_scale_from_amax(
    amax: torch.Tensor, fp8_max: float, *, power_2_scale: bool, epsilon: float, value_for_inf: float
) -> torch.Tensor:
    """:func:`scale_from_amax` with torch ops on float32 ``amax`` (any shape, any device)."""
    amax = torch.where(amax < epsilon, torch.full_like(amax, epsilon), amax)
    one = (amax == 0) | torch.isinf(amax) | torch.isnan(amax)
    quotient = fp8_max / torch.where(one, torch.ones_like(amax), amax).double()
    scale = torch.where(quotient < F32_OVERFLOW, quotient.clamp(max=F32_MAX), value_for_inf).float()
    if power_2_scale:
        scale = (scale.view(torch.int32) & -8388608).view(torch.float32)
    return torch.where(one, torch.ones_like(scale), scale)


def torch_reciprocal(scale: torch.Tensor) -> torch.Tensor:
    """The correctly rounded float32 ``1 / scale`` (float64 quotient rounded once; ±0 -> ±Inf)."""
    quotient = 1.0 / scale.double()
    big = quotient.abs() >= F32_OVERFLOW
    finite = torch.where(big, torch.zeros_like(quotient), quotient).float()
    return torch.where(big, torch.copysign(torch.full_like(finite, math.inf), scale), finite)


def torch_abs_no_nan(x: torch.Tensor) -> torch.Tensor:
    """|x| as float32 with NaN replaced by 0 (the amax ignores NaN)."""
    magnitude = x.float().abs()
    return torch.where(torch.isnan(magnitude), torch.zeros_like(magnitude), magnitude)


def _torch_cast(x2: torch.Tensor, scale: torch.Tensor, format: str) -> torch.Tensor:
    """``satfinite_rne(fl32(x * scale))`` codes of ``x2`` (float32 multiply, then ``fast.cast.fp8``)."""
    scaled = x2.float() * scale
    return cast_fp8(scaled, format=format, overflow="saturate")["codes"]


def _copies(codes: torch.Tensor, shape: tuple[int, ...], usage: str) -> dict[str, torch.Tensor]:
    """``data`` ([*rest, K]) and ``columnwise_data`` ([K, *rest]) of ``[M, K]`` codes per ``usage``."""
    out = {}
    if usage != "columnwise":
        out["data"] = codes.reshape(shape)
    if usage != "rowwise":
        out["columnwise_data"] = codes.t().contiguous().reshape((shape[-1], *shape[:-1]))
    return out


# %% Argument checks


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_x(x: object, x_dtype: object) -> torch.Tensor:
    """``x`` as a contiguous ``[M, K]`` view; ``TypeError``/``ValueError`` as the public docstrings say."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a torch.Tensor")
    if x.dtype not in INPUT_IDS:
        allowed = [dtype_name(d) for d in INPUT_IDS]
        raise TypeError(f"Got x.dtype={dtype_name(x.dtype)}, but x must be one of {allowed}")
    if x_dtype is not None:
        check_choice("x_dtype", x_dtype, X_DTYPES)
        if x_dtype != dtype_name(x.dtype):
            raise ValueError(
                f"Got x.dtype={dtype_name(x.dtype)} and x_dtype={x_dtype!r}, but they must name the same dtype"
            )
    if x.dim() == 0:
        raise ValueError(f"Got x.shape={tuple(x.shape)}, but x must have at least one dimension (its last is K)")
    if not x.is_contiguous():
        raise ValueError(f"Got x with shape {tuple(x.shape)} and strides {x.stride()}, but x must be contiguous")
    k = x.shape[-1]
    return x.reshape(math.prod(x.shape[:-1]), k)


def check_epsilon(epsilon: object) -> None:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon < math.inf:
        raise ValueError(f"Got epsilon={epsilon!r}, but epsilon must be a finite number >= 0")


def _check_float32_state(name: str, value: object) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(value).__name__}, but {name} must be a torch.Tensor")
    if value.dtype != torch.float32:
        raise TypeError(f"Got {name}.dtype={dtype_name(value.dtype)}, but {name} must be float32")
    return value


# %% Public functions


def fp8_tensor(
    x: torch.Tensor,
    *,
    format: str,
    power_2_scale: bool = False,
    epsilon: float = 0.0,
    inf_scale: str = "float32_max",
    usage: str = "both",
    x_dtype: str | None = None,
) -> dict[str, torch.Tensor]:
    """Quantize ``x`` to FP8 with one scale from its own amax (TE current scaling).

    Contract
    --------
    ``quant.fp8_tensor``: ``amax = max|x|`` (NaN ignored, 0 when empty); ``scale`` =
    ``compute_scale_from_amax(amax, fp8_max, power_2_scale, epsilon, value_for_inf)`` with
    ``value_for_inf`` FLT_MAX (``inf_scale="float32_max"``) or the largest value of x's dtype
    (``"input_max"``); ``scale_inv = fl32(1 / scale)``; ``data = satfinite_rne(fl32(x * scale))``.

    Source
    ------
    TE ``Float8CurrentScalingQuantizer`` (``compute_scale_from_amax`` in ``recipe_common.cuh``);
    ``specs/quant/fp8_tensor.yaml``; the NumPy reference is ``reference.quant.fp8.fp8_tensor``.

    Encoding
    --------
    ``x``: contiguous float32/bfloat16/float16, rank >= 1, ``[*rest, K]``.  Outputs on x's device:
    ``amax``, ``scale``, ``scale_inv`` float32 ``[1]``; ``data`` uint8 ``x.shape`` (unless
    ``usage="columnwise"``); ``columnwise_data`` uint8 ``[K, *rest]`` (unless ``usage="rowwise"``).

    Edge cases
    ----------
    amax 0 / Inf -> scale 1; a scale that overflows float32 -> ``value_for_inf`` (pow2: 2**127,
    scale_inv 2**-127); ±Inf and overflow saturate; NaN -> a NaN code (0x7F from the hardware core,
    0x7F/0xFF with the input's sign otherwise); -0.0 -> 0x80.

    Two passes over ``x`` on CUDA (amax, then cast); path per ``QCONFORM_FAST_PATH``.  Raises
    ``TypeError`` unless ``x`` is a float32/bfloat16/float16 tensor; ``ValueError`` for an unknown
    ``format``, ``inf_scale``, ``usage``, ``x_dtype`` or path, an ``x_dtype`` other than x's dtype, a
    negative or non-finite ``epsilon``, a 0-d or non-contiguous ``x``; ``RuntimeError`` if the Triton
    path is forced where it cannot run.
    """
    check_choice("format", format, FP8_FORMATS)
    check_choice("power_2_scale", power_2_scale, (False, True))
    check_choice("inf_scale", inf_scale, INF_SCALES)
    check_choice("usage", usage, USAGES)
    check_epsilon(epsilon)
    x2 = check_x(x, x_dtype)
    fmt = FORMATS[format]
    value_for_inf = F32_MAX if inf_scale == "float32_max" else DTYPE_MAX[dtype_name(x.dtype)]
    epsilon = float(np.float32(epsilon))
    if selected_path(x.device) == "torch":
        magnitude = torch_abs_no_nan(x2)
        amax = magnitude.amax() if magnitude.numel() else torch.zeros((), device=x.device)
        scale = torch_scale_from_amax(
            amax, fmt.max_value, power_2_scale=power_2_scale, epsilon=epsilon, value_for_inf=value_for_inf
        )
        out = {"amax": amax.reshape(1), "scale": scale.reshape(1), "scale_inv": torch_reciprocal(scale).reshape(1)}
        out.update(_copies(_torch_cast(x2, scale, format), tuple(x.shape), usage))
        return out

    outputs = _empty_copies(x, usage)
    amax_bits = torch.zeros(1, dtype=torch.int32, device=x.device)
    if x2.numel():
        with quiet_interpreter(x.device):
            block, num_warps, programs = AMAX_TILE
            jit(_amax_kernel)[(min(triton.cdiv(x2.numel(), block), programs),)](
                x2, amax_bits, x2.numel(), INPUT=INPUT_IDS[x.dtype], BLOCK=block, num_warps=num_warps
            )
    scalars = torch.empty((3, 1), dtype=torch.float32, device=x.device).unbind()
    rule = {"epsilon": epsilon, "value_for_inf": value_for_inf, "FROM_AMAX": True, "POW2": power_2_scale}
    _launch_cast(x2, outputs, [amax_bits, scalars[0], *scalars], rule, format, usage)
    return {"amax": scalars[0], "scale": scalars[1], "scale_inv": scalars[2], **_shaped(outputs, x, usage)}


def fp8_delayed(
    x: torch.Tensor,
    amax_history: torch.Tensor,
    scale: torch.Tensor,
    *,
    format: str,
    amax_compute_algo: str = "max",
    margin: int = 0,
    update: str = "fused",
    usage: str = "both",
) -> dict[str, torch.Tensor]:
    """One step of TE's delayed scaling: cast with the given scale, record the amax, update history and scale.

    Contract
    --------
    ``quant.fp8_delayed``: ``data = satfinite_rne(fl32(x * scale))``, ``scale_inv = fl32(1 / scale)``,
    ``amax = max|x|`` (NaN ignored); ``history[0] = int32_max(history[0], amax)`` (bit patterns); then,
    with ``last = history[0]``: ``update="fused"`` changes nothing more when ``last == 0``; otherwise the
    history rolls (``new[L-1] = last``, ``new[i] = history[i+1]``, ``new[0] = 0``), ``a = fmax(0,
    history)`` (``"max"``) or ``last`` (``"most_recent"``), and ``scale = fl32(fp8_max * 2**-margin / a)``
    when ``a`` is finite and positive, else the old scale; an infinite scale becomes FLT_MAX.

    Source
    ------
    TE ``common/recipe/delayed_scaling.cu`` (``kernel_bulk`` = fused, ``kernel`` = unfused);
    ``specs/quant/fp8_delayed.yaml``; the NumPy reference is ``reference.quant.fp8.fp8_delayed``.

    Encoding
    --------
    ``x`` as :func:`fp8_tensor`; ``amax_history`` float32 ``[L]``; ``scale`` float32 ``[1]``, both on
    x's device (not modified).  Outputs: ``data``/``columnwise_data`` per ``usage``, ``scale_inv``,
    ``amax`` float32 ``[1]``, the updated ``amax_history`` ``[L]`` and ``scale`` ``[1]``.

    Edge cases
    ----------
    A positive NaN in ``history[0]`` survives the atomic max (a negative value or NaN loses it); NaN
    and negative entries never win the ``"max"``; amax Inf keeps the old scale; ``scale`` 0 gives
    ``scale_inv`` +Inf and NaN codes where ``x`` is ±Inf.

    One pass over ``x`` on CUDA (cast and amax) plus a one-program update kernel.  Raises as
    :func:`fp8_tensor`, plus ``TypeError`` unless ``amax_history`` and ``scale`` are float32 tensors and
    ``ValueError`` for shapes other than ``[L]`` (L >= 1) and ``[1]``, an unknown ``amax_compute_algo``
    or ``update``, a ``margin`` that is not an int in 0..64, or state on another device than ``x``.
    """
    check_choice("format", format, FP8_FORMATS)
    check_choice("amax_compute_algo", amax_compute_algo, AMAX_COMPUTE_ALGOS)
    check_choice("update", update, DELAYED_UPDATES)
    check_choice("usage", usage, USAGES)
    x2 = check_x(x, None)
    history = _check_float32_state("amax_history", amax_history)
    scale = _check_float32_state("scale", scale)
    if history.dim() != 1 or history.shape[0] < 1:
        raise ValueError(f"Got amax_history.shape={tuple(history.shape)}, but amax_history must have shape [L], L >= 1")
    if tuple(scale.shape) != (1,):
        raise ValueError(f"Got scale.shape={tuple(scale.shape)}, but scale must have shape [1]")
    if isinstance(margin, bool) or not isinstance(margin, int) or not 0 <= margin <= 64:
        raise ValueError(f"Got margin={margin!r}, but margin must be an int in 0..64")
    if history.device != x.device or scale.device != x.device:
        raise ValueError(
            f"Got x on {x.device}, amax_history on {history.device} and scale on {scale.device}, "
            "but they must be on one device"
        )
    fmt = FORMATS[format]
    scaled_max = math.ldexp(fmt.max_value, -margin)
    history, scale = history.contiguous(), scale.contiguous()
    if selected_path(x.device) == "torch":
        amax = torch_abs_no_nan(x2).amax() if x2.numel() else torch.zeros((), device=x.device)
        out = {"scale_inv": torch_reciprocal(scale), "amax": amax.reshape(1)}
        out.update(_copies(_torch_cast(x2, scale, format), tuple(x.shape), usage))
        new_history, new_scale = _torch_delayed_update(
            history, amax, scale, scaled_max, most_recent=amax_compute_algo == "most_recent", fused=update == "fused"
        )
        return {**out, "amax_history": new_history, "scale": new_scale}

    outputs = _empty_copies(x, usage)
    amax_bits = torch.zeros(1, dtype=torch.int32, device=x.device)
    scale_inv = torch.empty(1, dtype=torch.float32, device=x.device)
    rule = {"epsilon": 0.0, "value_for_inf": F32_MAX, "FROM_AMAX": False, "POW2": False}
    _launch_cast(x2, outputs, [amax_bits, scale, scale_inv, scale_inv, scale_inv], rule, format, usage)
    new_history, new_scale = torch.empty_like(history), torch.empty_like(scale)
    with quiet_interpreter(x.device):
        jit(_delayed_update_kernel)[(1,)](
            history,
            amax_bits,
            scale,
            new_history,
            new_scale,
            history.shape[0],
            SCALED_MAX=scaled_max,
            MOST_RECENT=amax_compute_algo == "most_recent",
            FUSED=update == "fused",
            BLOCK=max(16, triton.next_power_of_2(history.shape[0])),
        )
    amax = amax_bits.view(torch.float32)
    out = {"scale_inv": scale_inv, "amax": amax, **_shaped(outputs, x, usage)}
    return {**out, "amax_history": new_history, "scale": new_scale}


def _torch_delayed_update(
    history: torch.Tensor, amax: torch.Tensor, scale: torch.Tensor, scaled_max: float, *, most_recent: bool, fused: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The record-and-update steps of :func:`fp8_delayed` with torch ops (no host synchronisation)."""
    bits = history.view(torch.int32).clone()
    bits[0] = torch.maximum(bits[0], amax.reshape(()).view(torch.int32))
    recorded = bits.view(torch.float32)
    last = recorded[0]
    rolled = torch.roll(recorded, -1)
    rolled[0] = 0.0
    skip = torch.tensor(fused, device=history.device) & (last == 0)
    if most_recent:
        chosen = last
    else:
        finite_positive = torch.where(torch.isnan(recorded) | (recorded < 0), torch.zeros_like(recorded), recorded)
        chosen = finite_positive.amax()
    chosen = torch.where(skip, torch.zeros_like(chosen), chosen)
    use = (chosen > 0) & torch.isfinite(chosen)
    quotient = scaled_max / torch.where(use, chosen, torch.ones_like(chosen)).double()
    new = torch.where(quotient < F32_OVERFLOW, quotient.clamp(max=F32_MAX), math.inf).float()
    new_scale = torch.where(use, new, scale.reshape(()))
    new_scale = torch.where(torch.isinf(new_scale), torch.full_like(new_scale, F32_MAX), new_scale)
    return torch.where(skip, recorded, rolled), new_scale.reshape(1)


def _empty_copies(x: torch.Tensor, usage: str) -> dict[str, torch.Tensor]:
    """Uninitialised ``[M, K]`` / ``[K, M]`` code buffers for the kernels (reshaped by :func:`_shaped`)."""
    k = x.shape[-1]
    m = math.prod(x.shape[:-1])
    out = {}
    if usage != "columnwise":
        out["data"] = torch.empty((m, k), dtype=torch.uint8, device=x.device)
    if usage != "rowwise":
        out["columnwise_data"] = torch.empty((k, m), dtype=torch.uint8, device=x.device)
    return out


def _shaped(outputs: dict[str, torch.Tensor], x: torch.Tensor, usage: str) -> dict[str, torch.Tensor]:
    shape = tuple(x.shape)
    out = {}
    if "data" in outputs:
        out["data"] = outputs["data"].reshape(shape)
    if "columnwise_data" in outputs:
        out["columnwise_data"] = outputs["columnwise_data"].reshape((shape[-1], *shape[:-1]))
    return out


# %% Benchmark


def bench(shape: tuple[int, int] = (8192, 8192), dtype: torch.dtype = torch.bfloat16, usage: str = "both") -> float:
    """Median milliseconds of :func:`fp8_tensor` (E4M3) on a random CUDA tensor (``triton.testing.do_bench``)."""
    from triton.testing import do_bench

    x = (torch.randn(shape, device="cuda") * 64).to(dtype)
    return float(do_bench(lambda: fp8_tensor(x, format="float8_e4m3fn", usage=usage), return_mode="median"))


if __name__ == "__main__":
    import os

    _device = "cuda" if torch.cuda.is_available() else "cpu"
    _x = (torch.randn(1823, 781, generator=torch.Generator().manual_seed(0)) * 64).to(_device)
    _torch = fp8_tensor(_x, format="float8_e4m3fn")
    os.environ[PATH_ENV] = "triton"
    _kernel = fp8_tensor(_x, format="float8_e4m3fn")
    print({name: bool(torch.equal(_torch[name], _kernel[name])) for name in _torch})
    if _device == "cuda":
        print("ms", bench())
