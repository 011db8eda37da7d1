"""Casts to narrow formats with integer rounding (contracts ``cast.fp8``, ``cast.fp6``, ``cast.fp4``,
``cast.e8m0``, ``cast.int``): Triton kernels for CUDA and torch paths for the rest.

Contracts
---------
- ``cast.fp8`` / ``cast.fp6`` / ``cast.fp4`` (:func:`fp8`, :func:`fp6`, :func:`fp4`): the exact value
  of each float32, bfloat16 or float16 element is rounded to the target format (``rne`` nearest even,
  ``rtz`` toward zero, ``stochastic`` with explicit random bits) across normal and subnormal targets;
  overflow is decided after rounding and resolved by a policy (fp6/fp4 always saturate); NaN gives
  the format's NaN code or the code a ``nan`` policy names.  Specs: ``specs/cast/fp8.yaml`` (v2),
  ``specs/cast/fp6.yaml``, ``specs/cast/fp4.yaml``.
- ``cast.e8m0`` (:func:`e8m0`): a power-of-two scale byte from the float32 exponent and a mantissa
  threshold.  Spec: ``specs/cast/e8m0.yaml``.
- ``cast.int`` (:func:`int_`): int8 / int4 / uint4 bit patterns, ``rne_clamp`` or ``truncate_wrap``.
  Spec: ``specs/cast/int.yaml``.

How the float casts are computed
--------------------------------
Every path widens the input to float32 (exact), reinterprets it as an int32 bit pattern and rounds
with integer arithmetic alone.  Neither Triton's nor torch's own narrow-float casts are used: on the
GPU Triton's saturate while torch 2.11's do not, torch's differ by version, and Triton 3.9's
interpreter mis-rounds the ones whose rounding carries into the exponent (125.8 gives 64 instead of
128).  One rounding core serves fp8, fp6 and fp4; it needs only the target's mantissa bits ``M``
(at most 3) and its bias.  With ``e = max(E, 1)`` for the float32 exponent field ``E`` and
``t = e - 127 + bias`` the target's exponent field:

- normal target (``t >= 1``): rebias the exponent field in place, ``v = |bits| - ((127 - bias) << 23)``,
  and drop ``s = 23 - M`` bits of ``v``; a carry out of the mantissa moves into the exponent, as it must;
- subnormal target (``t <= 0``): ``v`` is the 24-bit significand (no implicit bit for float32
  subnormals), dropping ``s = 24 - M - t`` bits;
- with ``kept = v >> s`` and the dropped bits ``d = v - (kept << s)``, the code is ``kept + up``:
  ``rne`` ``up`` iff ``d`` is above half, or exactly half with ``kept`` odd (computed as
  ``(v + 2**(s-1) - 1 + (kept & 1)) >> s``); ``rtz`` never; ``stochastic`` iff
  ``floor(d * 2**k / 2**s) + r >= 2**k`` for the element's ``k``-bit random number ``r`` (``k = 8`` for
  ``uint8`` random bits, 32 for ``uint32``).  Since ``s >= 20``, ``floor(d * 2**k / 2**s)`` is
  ``(d << max(k - s, 0)) >> (s - k)`` and fits in 32 unsigned bits; the test is
  ``q > 2**k - 1 - r``, an unsigned 32-bit comparison (the kernel needs no 64-bit arithmetic).
  Shifts of ``s >= 31`` leave nothing (``v < 2**31``, ``d < 2**24``), so they are capped.

The rounded code counts on past the largest finite code, so ``min(code, overflow_code)`` applies the
overflow policy: the overflow code is the largest finite code (saturate) or the code right after it
(Inf for E5M2, NaN for E4M3FN, 0x80 for the fnuz formats, whose sign then changes nothing); every
overflow and ±Inf rounds above it.  The sign is taken from the input's own bits, not from the
widened float32: widening can drop the sign of a NaN (torch's CPU float16 widening gives 0x7FFFFFFF
for every NaN).  Formats without a negative zero (fnuz) drop the sign of a zero code.  The kernels
widen bfloat16 by a 16-bit shift, exact by construction: Triton 3.9's interpreter flushes bfloat16
subnormals in ``.to(tl.float32)`` (0x0003 gives 0x00400000, not 0x00030000).

Paths
-----
The Triton kernels run over the flattened contiguous input, one program per 16 KiB of input
(stochastic rounding: 2048 elements with uint8 random bits, 1024 with uint32), in int32 (launches
are split so that offsets fit in int32).  The torch paths do the same integer arithmetic with torch
tensor ops (int64 for the stochastic comparison), on any device.  Which one runs is decided at each
call by the environment variable ``QCONFORM_FAST_PATH``:

- ``auto`` (default): the Triton kernel for CUDA tensors when Triton is importable, else torch;
- ``triton``: always the kernel; CPU tensors need Triton's interpreter, i.e. ``TRITON_INTERPRET=1``
  set before the kernel is first used in the process (``fast._triton.jit`` decorates the kernels
  lazily, once per value of ``TRITON_INTERPRET``), which is how CI checks the kernels on machines without a GPU;
- ``torch``: always the torch path.

This module imports without Triton and queries no device at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from fast._checks import check_choice
from fast._triton import PATH_ENV, e8m0_byte, float32_bits, jit, round_to_code, selected_path, tl, triton
from fast.formats import FORMATS, FloatFormat

__all__ = [
    "E8M0_ROUNDINGS",
    "E8M0_ZERO_POLICIES",
    "FP4_FORMATS",
    "FP6_FORMATS",
    "FP8_FORMATS",
    "INT_DTYPES",
    "INT_MODES",
    "NAN_POLICIES",
    "OVERFLOW_POLICIES",
    "PATH_ENV",
    "ROUNDINGS",
    "bench",
    "e8m0",
    "fp4",
    "fp6",
    "fp8",
    "int_",
]

FP8_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
FP6_FORMATS: tuple[str, ...] = ("float6_e2m3fn", "float6_e3m2fn")
FP4_FORMATS: tuple[str, ...] = ("float4_e2m1fn",)
OVERFLOW_POLICIES: tuple[str, ...] = ("saturate", "nonsaturating")
ROUNDINGS: tuple[str, ...] = ("rne", "rtz", "stochastic")
NAN_POLICIES: tuple[str, ...] = ("max", "signed_max", "negative_zero")
"""What NaN becomes in fp6 / fp4, which have no NaN code."""
E8M0_ROUNDINGS: tuple[str, ...] = ("floor", "ceil", "nearest_up")
E8M0_ZERO_POLICIES: tuple[str, ...] = ("min", "nan")
INT_DTYPES: tuple[str, ...] = ("int8", "int4", "uint4")
INT_MODES: tuple[str, ...] = ("rne_clamp", "truncate_wrap", "rne_wrap", "rna_wrap")

_INPUT_DTYPES: dict[torch.dtype, int] = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
"""Accepted input dtypes and the kernels' ``INPUT`` id for each: 0 float32, 1 bfloat16, 2 float16."""
_RANDOM_DTYPES: dict[torch.dtype, int] = {torch.uint8: 8, torch.uint32: 32}
"""Accepted ``random_bits`` dtypes and their ``k``."""
_ROUNDING_IDS: dict[str, int] = {"rne": 0, "rtz": 1, "stochastic": 2}
_F32_INF = 0x7F800000


class _FloatCast(NamedTuple):
    """Everything a float cast needs besides its inputs (the kernel's constexprs)."""

    fmt: FloatFormat
    rounding: int
    overflow_code: int
    nan_codes: tuple[int, int]


# %% Compute kernels


def _cast_float_kernel(
    # pointers
    x_ptr,
    random_ptr,
    codes_ptr,
    # sizes
    n_elements,
    # format, policies and input width
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SIGN_MASK: tl.constexpr,
    SIGNED_ZERO: tl.constexpr,
    OVERFLOW_CODE: tl.constexpr,
    NAN_CODE: tl.constexpr,
    NEGATIVE_NAN_CODE: tl.constexpr,
    ROUNDING: tl.constexpr,
    RANDOM_BITS: tl.constexpr,
    INPUT: tl.constexpr,
    # tiling
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    signed, bits = float32_bits(tl.load(x_ptr + offsets, mask=mask), INPUT)
    random = tl.load(random_ptr + offsets, mask=mask) if ROUNDING == 2 else 0
    code = round_to_code(
        bits,
        signed,
        random,
        MANTISSA_BITS,
        BIAS,
        SIGN_SHIFT,
        SIGN_MASK,
        SIGNED_ZERO,
        OVERFLOW_CODE,
        NAN_CODE,
        NEGATIVE_NAN_CODE,
        ROUNDING,
        RANDOM_BITS,
    )
    tl.store(codes_ptr + offsets, code.to(tl.uint8), mask=mask)


def _cast_e8m0_kernel(
    x_ptr,
    codes_ptr,
    n_elements,
    SUBNORMAL_THRESHOLD: tl.constexpr,
    NORMAL_THRESHOLD: tl.constexpr,
    OVERFLOW_BYTE: tl.constexpr,
    ZERO_IS_NAN: tl.constexpr,
    INPUT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    signed, bits = float32_bits(tl.load(x_ptr + offsets, mask=mask), INPUT)
    byte = e8m0_byte(bits, signed, SUBNORMAL_THRESHOLD, NORMAL_THRESHOLD, OVERFLOW_BYTE, ZERO_IS_NAN)
    tl.store(codes_ptr + offsets, byte.to(tl.uint8), mask=mask)


def _cast_int_kernel(
    x_ptr,
    codes_ptr,
    n_elements,
    MODE: tl.constexpr,
    LOWEST: tl.constexpr,
    HIGHEST: tl.constexpr,
    CODE_MASK: tl.constexpr,
    INPUT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    signed, bits = float32_bits(tl.load(x_ptr + offsets, mask=mask), INPUT)
    magnitude = bits & 0x7FFFFFFF
    if MODE == 0:  # rne_clamp: clamp in float32 (bounds are integers, so clamping first changes nothing), then
        # round half to even by the float32 addition of 1.5 * 2**23, exact for |v| <= 2**22; NaN gives 0
        clamped = tl.minimum(tl.maximum(bits.to(tl.float32, bitcast=True), LOWEST), HIGHEST)
        rounded = (clamped + 12582912.0) - 12582912.0
        value = tl.where(magnitude > 0x7F800000, 0, rounded.to(tl.int32))
    else:  # the wrap modes: only the low 8 bits of the integer part matter (NaN and Inf leave 0 there)
        negative = signed >> 31  # 0 or -1: (i ^ negative) - negative is i or -i
        exponent = tl.maximum(magnitude >> 23, 1)
        significand = magnitude - ((exponent - 1) << 23)
        left = tl.minimum(tl.maximum(exponent - 150, 0), 8)
        right = tl.minimum(tl.maximum(150 - exponent, 0), 31)
        integer = (significand << left) >> right
        if MODE != 1:  # rne_wrap (2) / rna_wrap (3): round the dropped bits of |x| < 2**23
            shift = tl.minimum(tl.maximum(150 - exponent, 1), 30)
            if MODE == 2:
                rounded = (significand + ((1 << shift) >> 1) - 1 + ((significand >> shift) & 1)) >> shift
            else:
                rounded = (significand + (1 << (shift - 1))) >> shift
            integer = tl.where(exponent < 150, rounded, integer)
        value = (integer ^ negative) - negative
    tl.store(codes_ptr + offsets, (value & CODE_MASK).to(tl.uint8), mask=mask)


_INT_CLAMP_BITS = 0x47000000
"""float32 bits of 2**15: the torch path of ``rne_clamp`` clamps larger magnitudes here (beyond every range)."""
_INT_RANGES: dict[str, tuple[int, int, int]] = {"int8": (-128, 127, 0xFF), "int4": (-8, 7, 0xF), "uint4": (0, 15, 0xF)}
"""lowest, highest, code mask"""
_E8M0_THRESHOLDS: dict[str, tuple[int, int]] = {
    "floor": (1 << 23, 1 << 23),
    "ceil": (0x400001, 1),
    "nearest_up": (0x400001, 0x400000),
}
"""Mantissa thresholds of the rounding carry (float32 subnormals, normals): ``1 << 23`` is never reached."""


# %% Launcher

_BLOCK_BYTES = 16384
"""Input bytes per program: 64 per thread at 8 warps, i.e. four 16-byte loads per thread.

Float32 input runs at the device-to-device copy bandwidth (4 bytes read and 1 written per element);
more elements per thread were slower.  bfloat16 input, with only 3 bytes per element, is bound by the
integer rounding instructions rather than by memory (``docs/performance.md``)."""
_NUM_WARPS = 8
_STOCHASTIC_BLOCKS: dict[int, int] = {8: 2048, 32: 1024}
"""Elements per program of stochastic rounding, by random-bit width: 8 and 4 per thread at 8 warps.

Both reach the copy bandwidth without spills; more elements per thread fell well below it, as did cache
hints, two tiles per program and int64 offsets (``docs/performance.md``, ``scripts/diag_kernels.py``)."""
_MAX_LAUNCH = 1 << 30
"""Elements per launch: keeps ``program_id * BLOCK + arange`` inside int32 (and a multiple of every BLOCK)."""


def _launch(
    kernel: Callable[..., None], x: torch.Tensor, tensors: list[torch.Tensor], block_bytes: int = 0, **meta: Any
) -> None:
    """Run ``kernel(*tensors, n, **meta)`` over contiguous ``x`` (whose flat view is ``tensors[0]``'s)."""
    jitted = jit(kernel)
    flats = [tensor.view(-1) for tensor in tensors]
    block = (block_bytes or _BLOCK_BYTES) // x.element_size()
    for start in range(0, x.numel(), _MAX_LAUNCH):
        n = min(_MAX_LAUNCH, x.numel() - start)
        jitted[(triton.cdiv(n, block),)](
            *(flat[start:] for flat in flats),
            n,
            **meta,
            INPUT=_INPUT_DTYPES[x.dtype],
            BLOCK=block,
            num_warps=_NUM_WARPS,
        )


def _float_triton(x: torch.Tensor, random_bits: torch.Tensor | None, codes: torch.Tensor, cast: _FloatCast) -> None:
    """Write the codes of contiguous ``x`` into contiguous ``codes`` (same shape) with the Triton kernel."""
    width = 0 if random_bits is None else _RANDOM_DTYPES[random_bits.dtype]
    # uint32 random bits travel as int32 (the kernel reinterprets them); absent ones as a dummy pointer.
    randoms = x if random_bits is None else random_bits.view(torch.int32) if width == 32 else random_bits
    _launch(
        _cast_float_kernel,
        x,
        [x, randoms, codes],
        block_bytes=_STOCHASTIC_BLOCKS[width] * x.element_size() if width else _BLOCK_BYTES,
        MANTISSA_BITS=cast.fmt.mantissa_bits,
        BIAS=cast.fmt.bias,
        SIGN_SHIFT=32 - cast.fmt.bits,
        SIGN_MASK=cast.fmt.sign_mask,
        SIGNED_ZERO=cast.fmt.signed_zero,
        OVERFLOW_CODE=cast.overflow_code,
        NAN_CODE=cast.nan_codes[0],
        NEGATIVE_NAN_CODE=cast.nan_codes[1],
        ROUNDING=cast.rounding,
        RANDOM_BITS=width,
    )


# %% Torch paths

_CPU_CHUNK = 1 << 18
"""Elements per pass of the torch paths on CPU: each int32 temporary of a chunk (1 MiB) stays in cache."""


def _chunks(x: torch.Tensor, *others: torch.Tensor) -> Any:
    """Yield ``(slice, x_bits, signed, other parts...)`` over the flattened tensors, chunked on CPU.

    ``x_bits`` is the int32 pattern of the widened float32 (never written to: it may alias ``x``);
    ``signed`` has the input's own sign in bit 31.
    """
    x_flat = x.reshape(-1)
    flats = [other.reshape(-1) for other in others]
    chunk = _CPU_CHUNK if x.device.type == "cpu" else max(x_flat.numel(), 1)
    for start in range(0, x_flat.numel(), chunk):
        part = slice(start, start + chunk)
        bits = x_flat[part].to(torch.float32).view(torch.int32)
        signed = bits if x.dtype == torch.float32 else x_flat[part].view(torch.int16).to(torch.int32)
        yield (part, bits, signed, *(flat[part] for flat in flats))


def _float_torch(x: torch.Tensor, random_bits: torch.Tensor | None, codes: torch.Tensor, cast: _FloatCast) -> None:
    """The float kernel's arithmetic with torch integer ops (the stochastic comparison in int64)."""
    fmt, codes_flat = cast.fmt, codes.view(-1)
    extra = (
        []
        if random_bits is None
        else [random_bits.view(torch.int32) if random_bits.dtype == torch.uint32 else random_bits]
    )
    for part, bits, signed, *randoms in _chunks(x, *extra):
        magnitude = bits & 0x7FFFFFFF
        exponent = (magnitude >> 23).clamp_(min=1)
        normal = exponent > 127 - fmt.bias
        value = torch.where(normal, magnitude - ((127 - fmt.bias) << 23), magnitude - ((exponent - 1) << 23))
        full_shift = ((151 - fmt.mantissa_bits - fmt.bias) - exponent).clamp_(min=23 - fmt.mantissa_bits)
        shift = full_shift.clamp(max=31)
        if cast.rounding == _ROUNDING_IDS["rne"]:
            code = ((1 << (shift - 1)) - 1).add_(value).add_((value >> shift) & 1).bitwise_right_shift_(shift)
        elif cast.rounding == _ROUNDING_IDS["rtz"]:
            code = value >> shift
        else:
            assert random_bits is not None  # checked by the public functions
            width = _RANDOM_DTYPES[random_bits.dtype]
            code = value >> shift
            dropped = (value - (code << shift)).long()
            q = (dropped << (width - full_shift).clamp_(min=0)) >> (full_shift - width).clamp_(0, 31)
            r = randoms[0].long() & ((1 << width) - 1)
            code += (q + r >= (1 << width)).to(torch.int32)

        code.clamp_(max=cast.overflow_code)
        sign = (signed >> (32 - fmt.bits)) & fmt.sign_mask
        if not fmt.signed_zero:
            sign.masked_fill_(code == 0, 0)
        code.bitwise_or_(sign)
        nan = magnitude > _F32_INF
        code = torch.where(nan, torch.where(signed < 0, cast.nan_codes[1], cast.nan_codes[0]), code)
        codes_flat[part] = code.to(torch.uint8)


def _e8m0_torch(x: torch.Tensor, codes: torch.Tensor, rounding: str, zero: str, overflow: str) -> None:
    """``cast.e8m0`` with torch integer ops: exponent field plus a mantissa-threshold carry."""
    subnormal_threshold, normal_threshold = _E8M0_THRESHOLDS[rounding]
    codes_flat = codes.view(-1)
    for part, bits, signed in _chunks(x):
        magnitude = bits & 0x7FFFFFFF
        exponent = magnitude >> 23
        threshold = torch.where(exponent == 0, subnormal_threshold, normal_threshold)
        byte = exponent + ((magnitude & 0x7FFFFF) >= threshold).to(torch.int32)
        byte.masked_fill_(byte > 0xFE, 0xFE if overflow == "saturate" else 0xFF)
        not_a_scale = magnitude > _F32_INF
        if zero == "nan":
            not_a_scale |= signed <= 0
        codes_flat[part] = byte.masked_fill_(not_a_scale, 0xFF).to(torch.uint8)


def _int_torch(x: torch.Tensor, codes: torch.Tensor, dtype: str, mode: str) -> None:
    """``cast.int`` with torch integer ops (see ``_cast_int_kernel``)."""
    lowest, highest, code_mask = _INT_RANGES[dtype]
    codes_flat = codes.view(-1)
    for part, bits, signed in _chunks(x):
        magnitude = bits & 0x7FFFFFFF
        negative = signed >> 31
        if mode == "rne_clamp":
            clamped = magnitude.clamp(max=_INT_CLAMP_BITS)
            exponent = (clamped >> 23).clamp_(min=1)
            significand = clamped - ((exponent - 1) << 23)
            shift = (150 - exponent).clamp_(max=31)
            integer = ((1 << (shift - 1)) - 1).add_(significand).add_((significand >> shift) & 1) >> shift
            value = ((integer ^ negative) - negative).clamp_(lowest, highest)
            value.masked_fill_(magnitude > _F32_INF, 0)
        else:
            exponent = (magnitude >> 23).clamp_(min=1)
            significand = magnitude - ((exponent - 1) << 23)
            integer = (significand << (exponent - 150).clamp_(0, 8)) >> (150 - exponent).clamp_(0, 31)
            if mode != "truncate_wrap":  # round the dropped bits of |x| < 2**23 (see _cast_int_kernel)
                shift = (150 - exponent).clamp_(1, 30)
                if mode == "rne_wrap":
                    rounded = (((1 << shift) >> 1) - 1).add_(significand).add_((significand >> shift) & 1) >> shift
                else:
                    rounded = (significand + (1 << (shift - 1))) >> shift
                integer = torch.where(exponent < 150, rounded, integer)
            value = (integer ^ negative) - negative
        codes_flat[part] = (value & code_mask).to(torch.uint8)


# %% Argument checks


def _dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``: the specs name dtypes without the module."""
    return str(dtype).removeprefix("torch.")


def _check_x(x: object) -> None:
    """``TypeError`` unless ``x`` is a float32/bfloat16/float16 tensor, ``ValueError`` unless contiguous."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a torch.Tensor")
    if x.dtype == torch.float64:
        raise TypeError(
            "Got x.dtype=float64, but x must be float32, bfloat16 or float16: float64 is refused because "
            "narrowing it through float32 rounds twice; convert to float32 first"
        )
    if x.dtype not in _INPUT_DTYPES:
        allowed = [_dtype_name(d) for d in _INPUT_DTYPES]
        raise TypeError(f"Got x.dtype={_dtype_name(x.dtype)}, but x must be one of {allowed}")
    if not x.is_contiguous():
        raise ValueError(f"Got x with shape {tuple(x.shape)} and strides {x.stride()}, but x must be contiguous")


def _check_random_bits(random_bits: object, rounding: str, x: torch.Tensor) -> None:
    """``random_bits`` comes with ``rounding="stochastic"`` and only with it: uint8/uint32, x's shape and device."""
    if rounding != "stochastic":
        if random_bits is not None:
            raise ValueError(
                f"Got random_bits with rounding={rounding!r}, but random_bits is only for rounding='stochastic'"
            )
        return
    if random_bits is None:
        raise ValueError(
            "Got rounding='stochastic' and no random_bits, but stochastic rounding needs random_bits: "
            "a uint8 or uint32 tensor of x's shape"
        )
    if not isinstance(random_bits, torch.Tensor):
        raise TypeError(f"Got random_bits of type {type(random_bits).__name__}, but random_bits must be a torch.Tensor")
    if random_bits.dtype not in _RANDOM_DTYPES:
        raise TypeError(
            f"Got random_bits.dtype={_dtype_name(random_bits.dtype)}, but random_bits must be uint8 or uint32"
        )
    if random_bits.shape != x.shape:
        raise ValueError(
            f"Got random_bits.shape={tuple(random_bits.shape)} and x.shape={tuple(x.shape)}, "
            "but random_bits must have x's shape"
        )
    if random_bits.device != x.device or not random_bits.is_contiguous():
        raise ValueError(
            f"Got random_bits on {random_bits.device} with strides {random_bits.stride()}, "
            f"but random_bits must be contiguous and on x's device ({x.device})"
        )


# %% Public functions


def _cast_float(x: torch.Tensor, random_bits: torch.Tensor | None, cast: _FloatCast) -> dict[str, torch.Tensor]:
    """Run the selected path of a float cast (arguments already checked)."""
    codes = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    if x.numel() > 0:
        run = _float_triton if selected_path(x.device) == "triton" else _float_torch
        run(x, random_bits, codes, cast)
    return {"codes": codes}


def fp8(
    x: torch.Tensor,
    *,
    format: str,
    overflow: str,
    rounding: str = "rne",
    random_bits: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Round float32/bfloat16/float16 values to FP8 codes (E4M3FN, E5M2, E4M3FNUZ, E5M2FNUZ).

    Contract
    --------
    ``cast.fp8`` v2: ``codes = round_format(x)``, elementwise: the exact value of ``x`` rounds to a
    value of ``format`` -- ``rounding="rne"`` the nearest (ties to the even code), ``"rtz"`` toward
    zero, ``"stochastic"`` up iff ``floor(d * 2**k / 2**s) + r >= 2**k`` (``s`` dropped bits holding
    ``d``, ``r`` the element's ``k``-bit ``random_bits``, ``k`` = 8 or 32; exact values never move) --
    across normal and subnormal targets.  Overflow is decided **after** rounding, in every mode: a
    value overflows when it rounds to a magnitude above the largest finite one.  ``overflow``
    chooses what overflow and ±Inf give: ``"saturate"`` ±max finite; ``"nonsaturating"`` ±Inf
    (E5M2), NaN with the sign (E4M3FN) or the NaN 0x80 (fnuz).

    Source
    ------
    OCP 8-bit Floating Point Specification (OFP8) rev 1.0; ml_dtypes ``float8_e4m3fnuz`` /
    ``float8_e5m2fnuz``; ``specs/cast/fp8.yaml`` (version 2).  ``"saturate"`` is TransformerEngine's
    ``cvt.rn.satfinite``; ``"nonsaturating"`` is ml_dtypes' ``astype`` and torch <= 2.12 eager
    ``Tensor.to``; ``stochastic`` with ``uint8`` bits is TransformerEngine's software stochastic rounding.

    Encoding
    --------
    One code per ``uint8``: ``S.EEEE.MMM`` (E4M3FN bias 7, max 448 = 0x7E; E4M3FNUZ bias 8, max 240 =
    0x7F) or ``S.EEEEE.MM`` (E5M2 bias 15, max 57344 = 0x7B, Inf 0x7C; E5M2FNUZ bias 16, max 57344 =
    0x7F).  ``codes`` has the shape of ``x`` and lives on its device; ``random_bits`` (stochastic
    only) is a contiguous ``uint8`` or ``uint32`` tensor of ``x``'s shape on its device.

    Edge cases
    ----------
    - E4M3FN / E5M2: ±0 keep their sign (-0.0 -> 0x80); NaN (any payload) -> 0x7F, 0xFF with the
      input's sign bit.  FNUZ: no -0 (-0.0 and negatives rounding to zero give 0x00); NaN -> 0x80.
    - RNE: E4M3FN 464 ties to 448, anything above overflows; E5M2 61440 ties to even Inf; E4M3FNUZ
      248 and E5M2FNUZ 61440 tie to even codes past the max and overflow.
    - ``rtz``: E4M3FN 479.99 -> 448 and 480 overflows; ``stochastic`` overflows only when it rounds
      up past the max.
    - Overflow and ±Inf: ``saturate`` -> ±max; ``nonsaturating`` -> 0x7F/0xFF (E4M3FN), 0x7C/0xFC
      (E5M2), 0x80 (fnuz).
    - 0-d and empty tensors are fine; float32 subnormal inputs give ±0 (0 for fnuz).

    The implementation (Triton kernel or torch ops) is chosen per call by ``QCONFORM_FAST_PATH``
    (module docstring).  Raises ``TypeError`` unless ``x`` is a float32, bfloat16 or float16 tensor
    and ``random_bits`` (when given) a uint8 or uint32 tensor; ``ValueError`` for an unknown
    ``format``/``overflow``/``rounding``/``QCONFORM_FAST_PATH``, a non-contiguous ``x``, and
    ``random_bits`` missing with ``"stochastic"``, given without it, or of another shape or device;
    ``RuntimeError`` if the Triton path is forced where it cannot run.
    """
    check_choice("format", format, FP8_FORMATS)
    check_choice("overflow", overflow, OVERFLOW_POLICIES)
    check_choice("rounding", rounding, ROUNDINGS)
    _check_x(x)
    _check_random_bits(random_bits, rounding, x)
    fmt = FORMATS[format]
    overflow_code = fmt.max_code if overflow == "saturate" else fmt.nonsaturating_code
    return _cast_float(x, random_bits, _FloatCast(fmt, _ROUNDING_IDS[rounding], overflow_code, fmt.nan_codes))


def _cast_saturating(
    x: torch.Tensor, random_bits: torch.Tensor | None, format: str, rounding: str, nan: str
) -> dict[str, torch.Tensor]:
    """fp6 / fp4 (``format`` checked): overflow and ±Inf saturate, NaN per the ``nan`` policy."""
    check_choice("rounding", rounding, ROUNDINGS)
    check_choice("nan", nan, NAN_POLICIES)
    _check_x(x)
    _check_random_bits(random_bits, rounding, x)
    fmt = FORMATS[format]
    top = fmt.max_code
    nan_codes = {"max": (top, top), "signed_max": (top, top | fmt.sign_mask), "negative_zero": (fmt.sign_mask, 0)}
    return _cast_float(x, random_bits, _FloatCast(fmt, _ROUNDING_IDS[rounding], top, nan_codes[nan]))


def fp6(
    x: torch.Tensor,
    *,
    format: str,
    rounding: str = "rne",
    nan: str = "max",
    random_bits: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Round float32/bfloat16/float16 values to FP6 codes (MX E2M3 or E3M2), always saturating.

    Contract
    --------
    ``cast.fp6``: ``codes = round_format(x)`` with ``rounding`` as in :func:`fp8`; finite overflow and
    ±Inf saturate to ±max (the formats have no Inf or NaN code); ``nan`` chooses what NaN becomes:
    ``"max"`` +max (0x1F) whatever its sign, ``"signed_max"`` ±max with its sign (0x1F / 0x3F),
    ``"negative_zero"`` +NaN -> -0 (0x20) and -NaN -> +0 (0x00), as ml_dtypes.

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.3 (E2M3 bias 1, max 7.5; E3M2 bias 3, max 28);
    ``specs/cast/fp6.yaml``.

    Encoding
    --------
    One code per ``uint8`` in the low 6 bits (``S.EE.MMM`` or ``S.EEE.MM``), bits 6 and 7 zero.

    Edge cases
    ----------
    -0.0 -> 0x20; e2m3 7.75 ties to even 8 and saturates to 7.5 (0x1F); e3m2 30 likewise to 28.

    Raises as :func:`fp8`, and ``ValueError`` for an unknown ``nan`` policy.
    """
    check_choice("format", format, FP6_FORMATS)
    return _cast_saturating(x, random_bits, format, rounding, nan)


def fp4(
    x: torch.Tensor,
    *,
    format: str,
    rounding: str = "rne",
    nan: str = "max",
    random_bits: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Round float32/bfloat16/float16 values to FP4 E2M1 codes, always saturating.

    Contract
    --------
    ``cast.fp4``: as :func:`fp6` for ``float4_e2m1fn`` (magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6): under
    ``rne`` 0.25 -> 0, 0.75 -> 1, 2.5 -> 2, 3.5 -> 4, 5 -> 4, and 7 ties to even 8, which saturates to 6.

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.3 (E2M1 bias 1); PTX ``cvt.rn.satfinite.e2m1x2.f32``;
    ``specs/cast/fp4.yaml``.

    Encoding
    --------
    One code per ``uint8`` in the low 4 bits, ``S.EE.M`` (packing two per byte is ``pack.nibbles``).

    Edge cases
    ----------
    -0.0 -> 0x8; overflow and ±Inf -> 0x7 / 0xF; NaN -> ``max`` 0x7, ``signed_max`` 0x7 / 0xF,
    ``negative_zero`` 0x8 / 0x0.

    Raises as :func:`fp6`.
    """
    check_choice("format", format, FP4_FORMATS)
    return _cast_saturating(x, random_bits, format, rounding, nan)


def e8m0(x: torch.Tensor, *, rounding: str, zero: str, overflow: str) -> dict[str, torch.Tensor]:
    """Round float32/bfloat16/float16 values to E8M0 scale bytes (powers of two).

    Contract
    --------
    ``cast.e8m0``: with ``E`` the float32 exponent field and ``M`` the mantissa field of ``|x|``,
    the byte is ``E + (M >= threshold)`` (value ``2**(byte - 127)``): ``"floor"`` never carries,
    ``"ceil"`` carries iff ``M != 0``, ``"nearest_up"`` iff ``M >= 0x400000`` (ties up); for float32
    subnormals (``E == 0``) ``ceil`` and ``nearest_up`` both need ``M > 0x400000``.  A byte above
    254 (a carry out of ``2**127``, or ±Inf) overflows: ``"saturate"`` 0xFE, ``"nonsaturating"``
    0xFF.  NaN -> 0xFF.  ``zero="min"`` ignores the sign (±0 -> 0x00); ``zero="nan"`` gives 0xFF for
    ±0 and every negative value (-Inf included).

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.4; ``specs/cast/e8m0.yaml``.  torch 2.13
    ``Tensor.to(torch.float8_e8m0fnu)`` is ``nearest_up, min, nonsaturating``; ml_dtypes
    ``nearest_up, nan, nonsaturating``; TransformerEngine's software ``float_to_e8m0`` ``ceil, min, saturate``.

    Encoding
    --------
    One unsigned byte per element; ``codes`` is ``uint8`` with the shape of ``x``, on its device.

    Edge cases
    ----------
    1.0 -> 0x7F; 1.5 -> 0x80 (``nearest_up``, ``ceil``) or 0x7F (``floor``); ``2**127`` -> 0xFE;
    positive values at or below ``2**-127`` -> 0x00.

    Raises ``TypeError`` unless ``x`` is a float32, bfloat16 or float16 tensor, ``ValueError`` for an
    unknown ``rounding``, ``zero`` or ``overflow`` or a non-contiguous ``x``.
    """
    check_choice("rounding", rounding, E8M0_ROUNDINGS)
    check_choice("zero", zero, E8M0_ZERO_POLICIES)
    check_choice("overflow", overflow, OVERFLOW_POLICIES)
    _check_x(x)
    codes = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    if x.numel() > 0:
        if selected_path(x.device) == "triton":
            subnormal_threshold, normal_threshold = _E8M0_THRESHOLDS[rounding]
            _launch(
                _cast_e8m0_kernel,
                x,
                [x, codes],
                SUBNORMAL_THRESHOLD=subnormal_threshold,
                NORMAL_THRESHOLD=normal_threshold,
                OVERFLOW_BYTE=0xFE if overflow == "saturate" else 0xFF,
                ZERO_IS_NAN=zero == "nan",
            )
        else:
            _e8m0_torch(x, codes, rounding, zero, overflow)
    return {"codes": codes}


def int_(x: torch.Tensor, *, dtype: str, mode: str) -> dict[str, torch.Tensor]:
    """Round float32/bfloat16/float16 values to int8, int4 or uint4 two's complement bit patterns.

    Contract
    --------
    ``cast.int``: ``mode="rne_clamp"`` rounds half to even, then clamps to the range of ``dtype``
    (int8 -128..127, int4 -8..7, uint4 0..15; ±Inf give the bounds, NaN gives 0);
    ``"truncate_wrap"`` truncates toward zero and wraps modulo ``2**bits`` (NaN and ±Inf give 0);
    ``"rne_wrap"`` rounds half to even and ``"rna_wrap"`` half away from zero, then wrap (NaN, ±Inf: 0).

    Source
    ------
    ``rne_clamp``: ONNX ``QuantizeLinear`` (scale 1, zero point 0); ``truncate_wrap``: ml_dtypes
    ``astype(int4)`` and NumPy ``astype(np.int8)`` where defined; ``rne_wrap``: ONNX's int4.md Cast;
    ``rna_wrap``: onnxruntime 1.32.0 CPU Cast to int4; ``specs/cast/int.yaml`` (version 2).

    Encoding
    --------
    ``codes`` is ``uint8`` holding the bit pattern: int8 the byte (-1 -> 0xFF), int4 the low nibble
    (-8 -> 0x8), uint4 the value 0..15.

    Edge cases
    ----------
    ``rne_clamp``: 2.5 -> 2, -8.5 -> -8 (int4), 127.5 -> 127, -0.5 -> 0.  ``truncate_wrap``: 8.0 ->
    0x8 (int4), 255.9 -> 0xFF (int8); magnitudes from ``2**31`` up are multiples of 256 and give 0.

    Raises ``TypeError`` unless ``x`` is a float32, bfloat16 or float16 tensor, ``ValueError`` for an
    unknown ``dtype`` or ``mode`` or a non-contiguous ``x``.
    """
    check_choice("dtype", dtype, INT_DTYPES)
    check_choice("mode", mode, INT_MODES)
    _check_x(x)
    codes = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    if x.numel() > 0:
        if selected_path(x.device) == "triton":
            lowest, highest, code_mask = _INT_RANGES[dtype]
            _launch(
                _cast_int_kernel,
                x,
                [x, codes],
                MODE=INT_MODES.index(mode),
                LOWEST=float(lowest),
                HIGHEST=float(highest),
                CODE_MASK=code_mask,
            )
        else:
            _int_torch(x, codes, dtype, mode)
    return {"codes": codes}


# %% Benchmark


def bench(
    numel: int = 1 << 28,
    *,
    dtype: torch.dtype = torch.float32,
    format: str = "float8_e4m3fn",
    overflow: str = "saturate",
    rounding: str = "rne",
) -> dict[str, float]:
    """Median time of :func:`fp8` on ``numel`` random CUDA elements, beside a device-to-device copy.

    Bytes moved: the input read, the ``uint8`` random bits read (stochastic), one byte written per
    element; the copy counts its read and its write of a buffer as large as the input.  Returns
    ``ms``, ``gb_per_s``, ``copy_gb_per_s`` and ``fraction_of_copy``.  Uses
    ``triton.testing.do_bench`` (CUDA events, L2 flushed).
    """
    from triton.testing import do_bench

    x = (torch.randn(numel, device="cuda") * 64).to(dtype)
    random_bits = None
    if rounding == "stochastic":
        random_bits = torch.randint(0, 256, x.shape, dtype=torch.uint8, device="cuda")
    ms = do_bench(
        lambda: fp8(x, format=format, overflow=overflow, rounding=rounding, random_bits=random_bits),
        return_mode="median",
    )
    dst = torch.empty_like(x)
    copy_ms = do_bench(lambda: dst.copy_(x), return_mode="median")
    gb_per_s = numel * (x.element_size() + 1 + (random_bits is not None)) / ms / 1e6
    copy_gb_per_s = 2 * numel * x.element_size() / copy_ms / 1e6
    return {
        "ms": ms,
        "gb_per_s": gb_per_s,
        "copy_gb_per_s": copy_gb_per_s,
        "fraction_of_copy": gb_per_s / copy_gb_per_s,
    }


# %% Check and time


def _main() -> None:
    """Check the fp8 Triton kernel against the torch path on an irregular shape, then time it on CUDA."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(0)
    patterns = torch.randint(-(2**31), 2**31, (1823, 781), dtype=torch.int64, generator=generator)
    halves = (patterns >> 16).to(torch.int16)
    randoms = patterns.to(torch.int32).view(torch.uint32).to(device)
    for x in (patterns.to(torch.int32).view(torch.float32), halves.view(torch.bfloat16), halves.view(torch.float16)):
        x = x.to(device)
        for format in FP8_FORMATS:
            for rounding, overflow in ((r, o) for r in ROUNDINGS for o in OVERFLOW_POLICIES):
                bits = randoms if rounding == "stochastic" else None
                cast = _FloatCast(
                    FORMATS[format],
                    _ROUNDING_IDS[rounding],
                    FORMATS[format].max_code if overflow == "saturate" else FORMATS[format].nonsaturating_code,
                    FORMATS[format].nan_codes,
                )
                kernel, torch_path = (torch.empty(x.shape, dtype=torch.uint8, device=device) for _ in range(2))
                _float_triton(x, bits, kernel, cast)
                _float_torch(x, bits, torch_path, cast)
                mismatches = int((kernel != torch_path).sum())
                print(f"{x.dtype} {format} {overflow} {rounding}: {mismatches} mismatches of {x.numel()}")
    if device == "cuda":
        for dtype in (torch.float32, torch.bfloat16):
            print(dtype, bench(dtype=dtype))


if __name__ == "__main__":
    _main()
