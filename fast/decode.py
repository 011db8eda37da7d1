"""Decoding of narrow float codes to float32 values (contracts ``decode.fp8``, ``decode.fp6``,
``decode.fp4``, ``decode.e8m0``): a Triton kernel for CUDA and a table gather for the rest.

The torch path builds a table per format from the format's bit fields with torch integer ops (no
torch float8 dtype is involved), once per format and device, and gathers ``table[codes.long()]``.
On CUDA that gather runs at a fifth of the copy bandwidth (int64 indices), so CUDA tensors take a
Triton kernel that builds each float32 bit pattern from the code's fields instead: normal codes
rebias the exponent and shift the mantissa into place, subnormal codes are ``M * 2**(1 - bias - m)``
(an exact float32 product), and the format's specials (Inf, NaN) are masked in.  The path is chosen
by ``QCONFORM_FAST_PATH`` (``fast._triton.selected_path``).  fp6 and fp4 codes are checked for bits
above their width: every offending byte writes 1 into a flag as the kernel decodes (a plain
predicated store, no atomic), so valid input costs no extra pass.
"""

from __future__ import annotations

import functools

import torch

from fast._triton import LaunchCache, jit, selected_path, tl, triton
from fast.formats import FORMATS, FloatFormat

__all__ = ["FP4_FORMATS", "FP6_FORMATS", "FP8_FORMATS", "e8m0", "fp4", "fp6", "fp8"]

FP8_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
FP6_FORMATS: tuple[str, ...] = ("float6_e2m3fn", "float6_e3m2fn")
FP4_FORMATS: tuple[str, ...] = ("float4_e2m1fn",)

_F32_QUIET_NAN = 0x7FC00000
_F32_INF = 0x7F800000
_SPECIALS: dict[str, int] = {"ieee": 0, "fn": 1, "fnuz": 2, "finite": 3, "e8m0": 4}
"""The kernel's SPECIALS id of each ``FloatFormat.specials`` (``e8m0``: the scale bytes)."""
_BLOCK = 4096
"""Codes per program (8 warps: 16 per thread, 16-byte loads and four 16-byte stores each)."""


def fp8(codes: torch.Tensor, *, format: str) -> dict[str, torch.Tensor]:
    """Exact float32 value of every FP8 code.

    Contract
    --------
    ``decode.fp8``: ``values = table[codes]`` elementwise, where ``table`` holds the value of each
    of the 256 codes of ``format``: ``(-1)**S * 2**(E - bias) * 1.M`` for normal codes and
    ``(-1)**S * 2**(1 - bias) * 0.M`` for subnormal ones.  Every FP8 value is exact in float32.

    Source
    ------
    OCP 8-bit Floating Point Specification (OFP8) rev 1.0 (E4M3FN and E5M2); ml_dtypes
    ``float8_e4m3fnuz`` / ``float8_e5m2fnuz``; ``specs/decode/fp8.yaml``.

    Encoding
    --------
    ``codes`` is ``uint8``, one code per element: ``S.EEEE.MMM`` (E4M3FN bias 7, E4M3FNUZ bias 8) or
    ``S.EEEEE.MM`` (E5M2 bias 15, E5M2FNUZ bias 16).  ``values`` is float32 with the shape of
    ``codes``, on its device.

    Edge cases
    ----------
    - 0x00 -> +0.0; 0x80 -> -0.0 (E4M3FN, E5M2) or NaN (fnuz: their only NaN, and they have no -0).
    - NaN codes (E4M3FN 0x7F/0xFF; E5M2 0x7D-0x7F/0xFD-0xFF; fnuz 0x80) -> a float32 NaN (here the
      quiet NaN with the code's sign; the contract leaves payload and sign free).
    - E5M2 0x7C/0xFC -> ±Inf; the other formats have no infinity (fnuz 0x7F is 240 / 57344).

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` tensor, ``ValueError`` for an unknown ``format``.
    """
    _check_codes(codes)
    _check_format(format, FP8_FORMATS)
    return {"values": _decode(codes, format)}


def fp6(codes: torch.Tensor, *, format: str) -> dict[str, torch.Tensor]:
    """Exact float32 value of every FP6 code (MX E2M3 or E3M2).

    Contract
    --------
    ``decode.fp6``: ``values = table[codes]`` over the 64 codes of ``format``, as :func:`fp8`; every
    code is a finite number (0x20 is -0.0; 0x1F is 7.5 for E2M3, 28.0 for E3M2).

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.3 (E2M3 bias 1, E3M2 bias 3); ``specs/decode/fp6.yaml``.

    Encoding
    --------
    ``codes`` is ``uint8``, one code per element in the low 6 bits (``S.EE.MMM`` or ``S.EEE.MM``).

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` tensor, ``ValueError`` for an unknown
    ``format`` or a byte above 63 (naming the first one: it is not a code).
    """
    _check_codes(codes)
    _check_format(format, FP6_FORMATS)
    return {"values": _decode(codes, format, 6)}


def fp4(codes: torch.Tensor, *, format: str) -> dict[str, torch.Tensor]:
    """Exact float32 value of every FP4 E2M1 code.

    Contract
    --------
    ``decode.fp4``: ``values = table[codes]`` over the 16 codes of ``float4_e2m1fn``: 0, 0.5, 1, 1.5,
    2, 3, 4, 6 for codes 0..7 and their negatives for 8..15 (0x8 is -0.0).

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.3 (E2M1 bias 1); ``specs/decode/fp4.yaml``.

    Encoding
    --------
    ``codes`` is ``uint8``, one code per element in the low 4 bits; two packed codes per byte go
    through ``unpack.nibbles`` first.

    Raises as :func:`fp6`, for bytes above 15.
    """
    _check_codes(codes)
    _check_format(format, FP4_FORMATS)
    return {"values": _decode(codes, format, 4)}


def e8m0(codes: torch.Tensor) -> dict[str, torch.Tensor]:
    """Float32 value of every E8M0 scale byte: ``2**(b - 127)``, NaN for 0xFF.

    Contract
    --------
    ``decode.e8m0``: ``values = 2**(codes - 127)`` for bytes 0..254 (0x00 is ``2**-127``, the float32
    subnormal 0x00400000; 0x7F is 1.0; 0xFE is ``2**127``) and NaN for 0xFF.

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 §5.4; ``specs/decode/e8m0.yaml``.

    Raises ``TypeError`` unless ``codes`` is a ``uint8`` tensor.
    """
    _check_codes(codes)
    return {"values": _decode(codes, "float8_e8m0fnu")}


def _decode(codes: torch.Tensor, format: str, width: int = 8) -> torch.Tensor:
    """The selected path: the Triton kernel or the table gather (format ``float8_e8m0fnu``: scale bytes).

    Codes narrower than a byte (``width`` 6 or 4) are checked: the kernel flags any byte with bits
    above ``width`` as it decodes (only an offending byte stores to the flag), and only then is the
    first one located.
    """
    if selected_path(codes.device) == "torch":
        if width < 8:
            _check_width(codes, width)
        table = _e8m0_table(codes.device) if format == "float8_e8m0fnu" else _table(format, codes.device)
        return table[codes.long()]
    values = torch.empty(codes.shape, dtype=torch.float32, device=codes.device)
    if codes.numel() == 0:
        return values
    flat = codes.contiguous().view(-1)
    flag = torch.zeros(1, dtype=torch.int32, device=codes.device)
    fmt = FORMATS.get(format, FloatFormat(8, 0, 127, "e8m0"))
    args = (flat, values.view(-1), flag, flat.numel())
    key = (format, width, flat.numel(), codes.device, flat.data_ptr() % 16)
    if codes.device.type != "cuda" or not _LAUNCHES.launch(key, args):
        meta = {
            "WIDTH": width,
            "EXPONENT_BITS": fmt.exponent_bits,
            "MANTISSA_BITS": fmt.mantissa_bits,
            "BIAS": fmt.bias,
            "SIGN_SHIFT": fmt.exponent_bits + fmt.mantissa_bits,
            "SUBNORMAL_UNIT": 2.0 ** (1 - fmt.bias - fmt.mantissa_bits),
            "SPECIALS": _SPECIALS[fmt.specials],
            "BLOCK": _BLOCK,
        }
        grid = triton.cdiv(flat.numel(), _BLOCK)
        compiled = jit(_decode_kernel)[(grid,)](*args, **meta, num_warps=8)
        if codes.device.type == "cuda":
            _LAUNCHES.store(key, compiled, grid, meta)
    if width < 8 and int(flag.item()) != 0:
        _check_width(codes, width)
    return values


def _decode_kernel(
    codes_ptr,
    values_ptr,
    flag_ptr,
    n_elements,
    WIDTH: tl.constexpr,
    EXPONENT_BITS: tl.constexpr,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SUBNORMAL_UNIT: tl.constexpr,
    SPECIALS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    code = tl.load(codes_ptr + offsets, mask=mask).to(tl.int32)
    if WIDTH < 8:  # bytes that are not WIDTH-bit codes set the flag (the caller then names the first one)
        tl.store(flag_ptr + offsets * 0, 1, mask=mask & ((code >> WIDTH) != 0))
    if SPECIALS == 4:  # e8m0: 2**(b - 127); 0x00 is the float32 subnormal 2**-127; 0xFF is NaN
        bits = tl.where(code == 0, 0x00400000, tl.where(code == 0xFF, 0x7FC00000, code << 23))
    else:
        magnitude = code & ((1 << SIGN_SHIFT) - 1)
        exponent = magnitude >> MANTISSA_BITS
        mantissa = magnitude & ((1 << MANTISSA_BITS) - 1)
        normal = ((exponent + (127 - BIAS)) << 23) | (mantissa << (23 - MANTISSA_BITS))
        # Subnormal (and zero) codes: M * 2**(1 - bias - m), exact in float32 (the unit is a normal power of two).
        tiny = (mantissa.to(tl.float32) * SUBNORMAL_UNIT).to(tl.int32, bitcast=True)
        bits = tl.where(exponent == 0, tiny, normal)
        if SPECIALS == 0:  # ieee: the all-ones exponent is Inf (M == 0) or NaN
            top = exponent == (1 << EXPONENT_BITS) - 1
            bits = tl.where(top, tl.where(mantissa == 0, 0x7F800000, 0x7FC00000), bits)
        elif SPECIALS == 1:  # fn: only the all-ones magnitude is NaN
            bits = tl.where(magnitude == (1 << SIGN_SHIFT) - 1, 0x7FC00000, bits)
        elif SPECIALS == 2:  # fnuz: the negative-zero pattern is the only NaN
            bits = tl.where(code == 1 << SIGN_SHIFT, 0x7FC00000, bits)
        bits = bits | ((code >> SIGN_SHIFT) << 31)
    tl.store(values_ptr + offsets, bits.to(tl.float32, bitcast=True), mask=mask)


_LAUNCHES = LaunchCache(_decode_kernel, runtime_args=4)
"""Compiled launches by format, width, size, device and alignment (``fast._triton.LaunchCache``)."""


def _check_codes(codes: object) -> None:
    if not isinstance(codes, torch.Tensor):
        raise TypeError(f"Got codes of type {type(codes).__name__}, but codes must be a torch.Tensor of dtype uint8")
    if codes.dtype != torch.uint8:
        raise TypeError(f"Got codes.dtype={str(codes.dtype).removeprefix('torch.')}, but codes must be uint8")


def _check_format(format: object, allowed: tuple[str, ...]) -> None:
    if format not in allowed:
        raise ValueError(f"Got format={format!r}, but format must be one of {list(allowed)}")


def _check_width(codes: torch.Tensor, bits: int) -> None:
    """``ValueError`` naming the first byte of ``codes`` that is not a ``bits``-bit code."""
    above = (codes >> bits) != 0
    if bool(above.any()):
        index = tuple(int(i) for i in above.nonzero()[0])
        where = f"codes[{', '.join(map(str, index))}]" if index else "codes"
        raise ValueError(f"Got {where}={int(codes[index])}, but codes must hold {bits}-bit codes 0..{(1 << bits) - 1}")


@functools.cache
def _table(format: str, device: torch.device) -> torch.Tensor:
    """The float32 values of every code of ``format`` on ``device``, built from the bit fields in int32."""
    fmt = FORMATS[format]
    mantissa_mask = (1 << fmt.mantissa_bits) - 1
    exponent_all_ones = (1 << fmt.exponent_bits) - 1
    sign_shift = fmt.bits - 1
    code = torch.arange(1 << fmt.bits, dtype=torch.int32)
    sign = (code >> sign_shift) << 31
    magnitude = code & ((1 << sign_shift) - 1)
    exponent = magnitude >> fmt.mantissa_bits
    mantissa = code & mantissa_mask
    zero = magnitude == 0
    special = exponent == exponent_all_ones
    nan = {
        "ieee": special & (mantissa != 0),
        "fn": magnitude == (1 << sign_shift) - 1,
        "fnuz": code == 1 << sign_shift,
        "finite": torch.zeros_like(zero),
    }[fmt.specials]
    infinity = special & (mantissa == 0) if fmt.specials == "ieee" else torch.zeros_like(zero)

    # Subnormal codes (E = 0, M != 0) are float32 normals: shift M up to its leading one (at most
    # mantissa_bits steps), lowering the exponent by one per step from the subnormal exponent 1 - bias.
    subnormal = (exponent == 0) & ~zero
    exponent = torch.where(subnormal, 1, exponent)
    for _ in range(fmt.mantissa_bits):
        unnormalized = subnormal & (mantissa <= mantissa_mask)
        mantissa = torch.where(unnormalized, mantissa << 1, mantissa)
        exponent = torch.where(unnormalized, exponent - 1, exponent)

    bits = ((exponent + (127 - fmt.bias)) << 23) | ((mantissa & mantissa_mask) << (23 - fmt.mantissa_bits))
    bits = bits.masked_fill(zero, 0).masked_fill(infinity, _F32_INF).masked_fill(nan, _F32_QUIET_NAN)
    return (bits | sign).view(torch.float32).to(device)


@functools.cache
def _e8m0_table(device: torch.device) -> torch.Tensor:
    """``2**(b - 127)`` for every byte ``b`` (0: the float32 subnormal 0x00400000) and NaN for 0xFF."""
    bits = torch.arange(256, dtype=torch.int32) << 23
    bits[0] = 0x00400000
    bits[255] = _F32_QUIET_NAN
    return bits.view(torch.float32).to(device)
