"""FP8 casts with integer rounding (contract ``cast.fp8``): a Triton kernel for CUDA and a torch path for the rest.

Contract
--------
``cast.fp8``: ``codes = RNE_format(x)`` elementwise (see :func:`fp8`): the exact value of each
float32, bfloat16 or float16 element rounds to the nearest E4M3FN or E5M2 value, ties to the even
code, across normal and subnormal targets; overflow is decided after rounding and resolved by the
``overflow`` policy; NaN gives 0x7F with the input's sign bit.  Spec: ``specs/cast/fp8.yaml``.

How it is computed
------------------
Both paths widen the input to float32 (exact), reinterpret it as an int32 bit pattern and round
with integer arithmetic alone.  Neither Triton's nor torch's own fp8 casts are used: on the GPU
Triton's saturate while torch 2.11's do not, and Triton 3.9's interpreter mis-rounds the ones
whose rounding carries into the exponent (125.8 gives 64 instead of 128).  With ``e`` the float32
exponent field, ``t = e - 127 + bias`` the target's and ``S = 23 - mantissa_bits``:

- normal target (``t >= 1``): rebias the exponent field in place, ``v = |bits| - ((127 - bias) << 23)``,
  and round ``v`` right by ``S`` bits; a carry out of the mantissa moves into the exponent, as it must;
- subnormal target (``t <= 0``): ``v`` is the 24-bit significand, rounded right by ``S + 1 - t`` bits
  (capped at 31; a float32 subnormal input shifts out to zero);
- rounding ``v >> s`` to nearest even is ``(v + 2**(s-1) - 1 + ((v >> s) & 1)) >> s``.

The rounded magnitude code counts on past the largest finite code, so ``min(code, overflow_code)``
applies the policy (every overflow and ±Inf gives a code above the max).  The sign is taken from
the input's own bits, not from the widened float32: widening can drop the sign of a NaN (torch's
CPU float16 widening gives 0x7FFFFFFF for every NaN).

Paths
-----
The Triton kernel ``_cast_fp8_kernel`` runs over the flattened contiguous input, one program per
16 KiB of input, in int32 throughout (launches are split so that offsets fit in int32).  The torch
path does the same integer arithmetic with torch tensor ops, on any device.  Which one runs is
decided at each call by the environment variable ``QCONFORM_FAST_PATH``:

- ``auto`` (default): the Triton kernel for CUDA tensors when Triton is importable, else torch;
- ``triton``: always the kernel; CPU tensors need Triton's interpreter, i.e. ``TRITON_INTERPRET=1``
  set before the kernel is first used in the process (the kernel is decorated lazily, once per
  value of ``TRITON_INTERPRET``), which is how CI checks the kernel on machines without a GPU;
- ``torch``: always the torch path.

This module imports without Triton and queries no device at import time.
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

import torch

try:  # Triton is optional: without it every call takes the torch path.
    import triton
    import triton.language as tl
except ImportError:
    triton = None
    tl = None

__all__ = ["FP8_FORMATS", "OVERFLOW_POLICIES", "PATH_ENV", "bench", "fp8"]

FP8_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
OVERFLOW_POLICIES: tuple[str, ...] = ("saturate", "nonsaturating")
PATH_ENV = "QCONFORM_FAST_PATH"
"""Environment variable choosing the implementation at each call: ``auto``, ``triton`` or ``torch``."""

_PATHS: tuple[str, ...] = ("auto", "triton", "torch")
_INPUT_DTYPES: dict[torch.dtype, int] = {torch.float32: 32, torch.bfloat16: 16, torch.float16: 16}
"""Accepted input dtypes and their width in bits (the kernel reads the sign bit of 16-bit inputs itself)."""
_NAN_CODE = 0x7F
"""Positive NaN code of both formats: every exponent and mantissa bit set."""


class _Fp8Format(NamedTuple):
    """Bit fields of an FP8 format; the special codes are derived from them."""

    exponent_bits: int
    mantissa_bits: int
    bias: int
    has_inf: bool

    @property
    def max_finite_code(self) -> int:
        """0x7E for E4M3FN (only S.1111.111 is NaN), 0x7B for E5M2 (the code below +Inf)."""
        top = ((1 << self.exponent_bits) - 1) << self.mantissa_bits
        return top - 1 if self.has_inf else _NAN_CODE - 1

    def overflow_code(self, overflow: str) -> int:
        """Positive code of finite overflow and ±Inf: max finite, or the next code (+Inf for E5M2, NaN for E4M3FN)."""
        return self.max_finite_code + (overflow == "nonsaturating")


_FORMATS: dict[str, _Fp8Format] = {
    "float8_e4m3fn": _Fp8Format(exponent_bits=4, mantissa_bits=3, bias=7, has_inf=False),
    "float8_e5m2": _Fp8Format(exponent_bits=5, mantissa_bits=2, bias=15, has_inf=True),
}


# %% Compute kernel


def _cast_fp8_kernel(
    # pointers
    x_ptr,
    codes_ptr,
    # sizes
    n_elements,
    # format, policy and input width
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    OVERFLOW_CODE: tl.constexpr,
    NAN_CODE: tl.constexpr,
    INPUT_BITS: tl.constexpr,
    # tiling
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    raw = tl.load(x_ptr + offsets, mask=mask)
    bits = raw.to(tl.float32).to(tl.int32, bitcast=True)
    # The sign comes from the input's own bits (bit 31 of ``signed``): widening may drop a NaN's sign.
    signed = bits if INPUT_BITS == 32 else raw.to(tl.int16, bitcast=True).to(tl.int32)

    # Round |x| to an unsigned code (see the module docstring).
    magnitude = bits & 0x7FFFFFFF
    exponent = magnitude >> 23
    value = tl.where(
        exponent > 127 - BIAS,
        magnitude - ((127 - BIAS) << 23),
        (magnitude & 0x7FFFFF) | 0x800000,
    )
    shift = tl.minimum(tl.maximum((151 - MANTISSA_BITS - BIAS) - exponent, 23 - MANTISSA_BITS), 31)
    code = (value + ((1 << (shift - 1)) - 1) + ((value >> shift) & 1)) >> shift

    # Overflow policy, NaN, sign.
    code = tl.minimum(code, OVERFLOW_CODE)
    code = tl.where(magnitude > 0x7F800000, NAN_CODE, code)
    tl.store(codes_ptr + offsets, (code | ((signed >> 24) & 0x80)).to(tl.uint8), mask=mask)


# %% Launcher

_BLOCK_BYTES = 16384
"""Input bytes per program: 64 per thread at 8 warps, i.e. four 16-byte loads per thread.

Measured on an H100 (torch 2.11, Triton 3.6), 2^28 float32 elements: 0.44 ms, 101% of the
device-to-device copy bandwidth (4 bytes read and 1 written per element); 8 elements per thread
ran as fast, 32 float32 elements per thread a third slower.  bfloat16 inputs reach about 70% of
copy bandwidth: with only 3 bytes per element the kernel is bound by its ~26 integer instructions
per element, not by memory."""
_NUM_WARPS = 8
_MAX_LAUNCH = 1 << 30
"""Elements per launch: keeps ``program_id * BLOCK + arange`` inside int32 (and a multiple of every BLOCK)."""


@functools.cache
def _jit_kernel(interpret_env: str | None) -> Any:
    """``triton.jit(_cast_fp8_kernel)``; decorated again whenever ``TRITON_INTERPRET`` (the key) changes.

    ``triton.jit`` reads ``TRITON_INTERPRET`` when it decorates, so decorating here rather than at
    import lets a process that already imported this module still switch the interpreter on.
    """
    return triton.jit(_cast_fp8_kernel)


def _cast_triton(x: torch.Tensor, codes: torch.Tensor, fmt: _Fp8Format, overflow: str) -> None:
    """Write the codes of contiguous ``x`` into contiguous ``codes`` (same shape) with the Triton kernel."""
    from triton.runtime.interpreter import InterpretedFunction

    kernel = _jit_kernel(os.environ.get("TRITON_INTERPRET"))
    if x.device.type != "cuda" and not isinstance(kernel, InterpretedFunction):
        raise RuntimeError(
            f"Got {PATH_ENV}=triton and x on {x.device}, but the Triton kernel runs CPU tensors only in Triton's "
            "interpreter: set TRITON_INTERPRET=1 before the first call in this process"
        )
    x_flat, codes_flat = x.view(-1), codes.view(-1)
    block = _BLOCK_BYTES // x.element_size()
    for start in range(0, x_flat.numel(), _MAX_LAUNCH):
        n = min(_MAX_LAUNCH, x_flat.numel() - start)
        kernel[(triton.cdiv(n, block),)](
            x_flat[start:],
            codes_flat[start:],
            n,
            MANTISSA_BITS=fmt.mantissa_bits,
            BIAS=fmt.bias,
            OVERFLOW_CODE=fmt.overflow_code(overflow),
            NAN_CODE=_NAN_CODE,
            INPUT_BITS=_INPUT_DTYPES[x.dtype],
            BLOCK=block,
            num_warps=_NUM_WARPS,
        )


# %% Torch path

_CPU_CHUNK = 1 << 18
"""Elements per pass of the torch path on CPU: each int32 temporary of a chunk (1 MiB) stays in cache."""


def _cast_torch(x: torch.Tensor, codes: torch.Tensor, fmt: _Fp8Format, overflow: str) -> None:
    """The kernel's arithmetic with torch int32 ops, in chunks on CPU and in one pass elsewhere."""
    x_flat, codes_flat = x.reshape(-1), codes.view(-1)
    chunk = _CPU_CHUNK if x.device.type == "cpu" else max(x_flat.numel(), 1)
    bias, mantissa_bits = fmt.bias, fmt.mantissa_bits
    for start in range(0, x_flat.numel(), chunk):
        part = x_flat[start : start + chunk]
        bits = part.to(torch.float32).view(torch.int32)  # never written to: it may alias x
        signed = bits if part.dtype == torch.float32 else part.view(torch.int16).to(torch.int32)

        magnitude = bits & 0x7FFFFFFF
        exponent = magnitude >> 23
        value = torch.where(
            exponent > 127 - bias,
            magnitude - ((127 - bias) << 23),
            (magnitude & 0x7FFFFF) | 0x800000,
        )
        shift = ((151 - mantissa_bits - bias) - exponent).clamp_(23 - mantissa_bits, 31)
        code = ((1 << (shift - 1)) - 1).add_(value).add_((value >> shift) & 1).bitwise_right_shift_(shift)

        code.clamp_(max=fmt.overflow_code(overflow))
        code.masked_fill_(magnitude > 0x7F800000, _NAN_CODE)
        codes_flat[start : start + chunk] = code.bitwise_or_((signed >> 24) & 0x80)


# %% Public function


def fp8(x: torch.Tensor, *, format: str, overflow: str) -> dict[str, torch.Tensor]:
    """Round float32/bfloat16/float16 values to FP8 codes, round-to-nearest-even.

    Contract
    --------
    ``cast.fp8``: ``codes = RNE_format(x)``, elementwise: the exact value of ``x`` rounds to the
    nearest value representable in ``format`` (ties to the code with an even mantissa) across
    normal and subnormal targets, and overflow is decided **after** rounding: a value overflows
    when it rounds to a magnitude above the largest finite one.  ``overflow`` chooses what
    overflow and ±Inf give: ``"saturate"`` ±max finite; ``"nonsaturating"`` ±Inf where the
    format has it (E5M2), else NaN with the sign (E4M3FN).

    Source
    ------
    OCP 8-bit Floating Point Specification (OFP8) rev 1.0 (encodings, conversion, saturation);
    ``specs/cast/fp8.yaml``.  ``"saturate"`` is TransformerEngine's ``cvt.rn.satfinite``;
    ``"nonsaturating"`` is ml_dtypes' ``astype`` and torch <= 2.12 eager ``Tensor.to``.

    Encoding
    --------
    One code per ``uint8``: ``S.EEEE.MMM`` (E4M3FN, bias 7, max 448 = 0x7E, min subnormal 2**-9) or
    ``S.EEEEE.MM`` (E5M2, bias 15, max 57344 = 0x7B, Inf 0x7C, min subnormal 2**-16).  ``codes``
    has the shape of ``x`` and lives on its device.

    Edge cases
    ----------
    - ±0 keep their sign (-0.0 -> 0x80); exactly half the smallest subnormal ties to (even) zero.
    - NaN, any payload -> 0x7F, or 0xFF when the input's sign bit is set, in both formats.
    - E4M3FN 464.0 ties between 448 and 480 and rounds to 448 (0x7E); anything above overflows.
      E5M2 61440.0 ties between 57344 and Inf and overflows.
    - Overflow and ±Inf: ``saturate`` -> 0x7E/0xFE (E4M3FN), 0x7B/0xFB (E5M2); ``nonsaturating``
      -> 0x7F/0xFF (E4M3FN, NaN), 0x7C/0xFC (E5M2, Inf).
    - 0-d and empty tensors are fine; float32 subnormal inputs give ±0.

    The implementation (Triton kernel or torch ops) is chosen per call by ``QCONFORM_FAST_PATH``
    (module docstring).  Raises ``TypeError`` unless ``x`` is a float32, bfloat16 or float16 tensor,
    ``ValueError`` if ``x`` is not contiguous or ``format``/``overflow``/``QCONFORM_FAST_PATH`` is
    unknown, and ``RuntimeError`` if the Triton path is forced where it cannot run.
    """
    if format not in _FORMATS:
        raise ValueError(f"Got format={format!r}, but format must be one of {list(FP8_FORMATS)}")
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"Got overflow={overflow!r}, but overflow must be one of {list(OVERFLOW_POLICIES)}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a torch.Tensor")
    if x.dtype not in _INPUT_DTYPES:
        raise TypeError(f"Got x.dtype={x.dtype}, but x must be one of {[str(d) for d in _INPUT_DTYPES]}")
    if not x.is_contiguous():
        raise ValueError(f"Got x with shape {tuple(x.shape)} and strides {x.stride()}, but x must be contiguous")
    codes = torch.empty(x.shape, dtype=torch.uint8, device=x.device)
    if x.numel() > 0:
        cast = _cast_triton if _selected_path(x.device) == "triton" else _cast_torch
        cast(x, codes, _FORMATS[format], overflow)
    return {"codes": codes}


def _selected_path(device: torch.device) -> str:
    """``"triton"`` or ``"torch"``, from ``QCONFORM_FAST_PATH`` and the device."""
    choice = os.environ.get(PATH_ENV, "auto")
    if choice not in _PATHS:
        raise ValueError(f"Got {PATH_ENV}={choice!r}, but {PATH_ENV} must be one of {list(_PATHS)}")
    if choice == "auto":
        return "triton" if device.type == "cuda" and triton is not None else "torch"
    if choice == "triton" and triton is None:
        raise RuntimeError(f"Got {PATH_ENV}=triton, but triton is not installed")
    return choice


# %% Benchmark


def bench(
    numel: int = 1 << 28,
    *,
    dtype: torch.dtype = torch.float32,
    format: str = "float8_e4m3fn",
    overflow: str = "saturate",
) -> dict[str, float]:
    """Median time of :func:`fp8` on ``numel`` random CUDA elements, beside a device-to-device copy.

    Bytes moved: the input read plus one byte written per element; the copy counts its read and
    its write of a buffer as large as the input.  Returns ``ms``, ``gb_per_s``, ``copy_gb_per_s``
    and ``fraction_of_copy``.  Uses ``triton.testing.do_bench`` (CUDA events, L2 flushed).
    """
    from triton.testing import do_bench

    x = (torch.randn(numel, device="cuda") * 64).to(dtype)
    ms = do_bench(lambda: fp8(x, format=format, overflow=overflow), return_mode="median")
    dst = torch.empty_like(x)
    copy_ms = do_bench(lambda: dst.copy_(x), return_mode="median")
    gb_per_s = numel * (x.element_size() + 1) / ms / 1e6
    copy_gb_per_s = 2 * numel * x.element_size() / copy_ms / 1e6
    return {
        "ms": ms,
        "gb_per_s": gb_per_s,
        "copy_gb_per_s": copy_gb_per_s,
        "fraction_of_copy": gb_per_s / copy_gb_per_s,
    }


# %% Check and time


def _main() -> None:
    """Check the Triton kernel against the torch path on an irregular shape, then time it on CUDA."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(0)
    patterns = torch.randint(-(2**31), 2**31, (1823, 781), dtype=torch.int64, generator=generator)
    halves = (patterns >> 16).to(torch.int16)
    for x in (patterns.to(torch.int32).view(torch.float32), halves.view(torch.bfloat16), halves.view(torch.float16)):
        x = x.to(device)
        for format in FP8_FORMATS:
            for overflow in OVERFLOW_POLICIES:
                kernel, torch_path = (torch.empty(x.shape, dtype=torch.uint8, device=device) for _ in range(2))
                _cast_triton(x, kernel, _FORMATS[format], overflow)
                _cast_torch(x, torch_path, _FORMATS[format], overflow)
                mismatches = int((kernel != torch_path).sum())
                print(f"{x.dtype} {format} {overflow}: {mismatches} mismatches of {x.numel()}")
    if device == "cuda":
        for dtype in (torch.float32, torch.bfloat16):
            print(dtype, bench(dtype=dtype))


if __name__ == "__main__":
    _main()
