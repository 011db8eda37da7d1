"""MX quantization: OCP Microscaling block formats with E8M0 scales (contract ``quant.mx``).

A block of 32 elements (1x32 along K, 32x1 along M, or a 32x32 tile) shares one E8M0 scale byte
``s`` (value ``2**(s - 127)``, 0xFF NaN); each element is stored as ``round(x * 2**(127 - s))`` in
an MX element format (FP8 E4M3/E5M2, FP6 E2M3/E3M2, FP4 E2M1).  Everything the sources disagree
on is a parameter; ``specs/quant/mx.yaml`` says which source each value follows.

Scale rules (``scale_rule``), from the block's ``amax`` (float32 bits: exponent field ``E``,
mantissa field ``M``) and the element format's ``emax = floor(log2(max))`` (E4M3 8, E5M2 15,
E2M3 2, E3M2 4, E2M1 2):

- ``floor`` (OCP MX v1.0 §6.3, torchao FLOOR): ``s = E - emax``, i.e. ``2**(floor(log2 amax) - emax)``;
- ``ceil`` (torchao CEIL): ``s = E + (M != 0) - emax``;
- ``even`` (torchao EVEN): ``amax`` is first rounded at mantissa bit ``22 - m`` (``m`` the element's
  mantissa bits: add ``1 << (22 - m)`` and clear the mantissa), then ``floor``;
- ``rceil`` (cuBLAS, TransformerEngine, torchao RCEIL): ``d = fl32(amax * fl32(1 / max))`` rounded up
  to a power of two, ``s = E_d + (M_d != 0)`` (float32 subnormal ``d``: ``M_d > 0x400000``), i.e. PTX
  ``cvt.rp.satfinite.ue8m0x2.f32``.  ``edges="torchao_018"`` is torchao 0.18's eager fallback instead:
  ``s = clamp(ceil(fl32(log2(fl32(amax / max)))), -127, 127) + 127``.  Dividing instead of
  multiplying never moves the rounded-up power of two (checked over every float32 amax), but the float32
  ``log2`` does: a ``d`` just above ``2**j`` has a ``log2`` that rounds to ``j`` itself, so its ``ceil``
  stays at ``j``.  That happens exactly where ``d =
  2**j * (1 + m * 2**-23)`` with ``0 < m <= T(j)``, ``T(j) = floor(2**23 * (2**h(j) - 1))`` and ``h(j)`` half
  the float32 spacing above ``j`` (``T`` is 0 for ``-4 <= j <= 3``, 22 for ``j >= 64`` and ``j <= -65``, e.g.
  E4M3 amaxes up to 39 ulps above ``448 * 2**j``); for ``j = -127`` (subnormal ``d``) the grid is ``2**-22``
  and ``T = 11``.  The reference computes that table (``_log2_slack``); it is the ``ceil`` of the correctly
  rounded ``log2``, which is also the ``ceil`` of torch's (Sleef, not correctly rounded) float32
  ``torch.log2`` on the CPU for every positive float32 ``d`` (checked exhaustively under torch 2.13's
  DEFAULT, AVX2 and AVX512 kernels; ``tests/reference/test_quant_mx_torchao.py`` checks ``to_mx`` itself).

and ``s`` is clamped to ``0 .. 254``: blocks of zeros or of tiny values get 0 (``2**-127``).

Edge handling (``edges``) -- NaN, Inf and the reciprocal of scale 0:

- ``te`` (TransformerEngine kernels): ``amax`` ignores NaN (``fmaxf``); an infinite ``amax`` gives
  254 (``2**127``, the satfinite E8M0 maximum) under every rule; elements are
  ``satfinite_rne(fl32(x * 2**(127 - s)))`` (scale 0: ``2**127``), so Inf saturates to ±max and NaN
  gives the canonical NaN's code (FP8 0x7F, whatever the input's sign, since a GPU multiply returns
  the canonical NaN 0x7FFFFFFF; FP6/FP4 have no NaN: +max, as TE's E2M1 emulation).
- ``torchao`` (torchao at HEAD 36027d8): ``amax`` propagates NaN, and a NaN or Inf anywhere in the
  block gives scale 0xFF (NaN), which makes the whole block NaN: its elements are don't-care.
- ``torchao_018`` (torchao 0.15 -- 0.18): NaN gives 0xFF as above; an infinite ``amax`` goes
  through the rule's arithmetic (``floor``/``ceil``/``even``: ``E = 255``, so ``s = 255 - emax``, e.g.
  247 for E4M3; ``rceil``: 254) and its elements saturate; scale 0 has the reciprocal ``2**126``
  (``floor``/``ceil``/``even``: the float32 scale is clamped to the smallest normal) or ``1.0``
  (``rceil``), not ``2**127``.

Elements of a block whose scale is 0xFF are don't-care (the ``*_dont_care`` outputs mark them);
the reference writes code 0 there, which matters only where a packed FP4 byte mixes such an
element with a valid one.
"""

from __future__ import annotations

import numpy as np

import reference.cast
from reference._checks import check_choice
from reference.formats import FloatFormat, get_format
from reference.layout import scale_swizzle
from reference.pack import nibbles

__all__ = ["BLOCKS", "BLOCK_SIZE", "EDGES", "MX_FORMATS", "SCALE_LAYOUTS", "SCALE_RULES", "USAGES", "mx", "scale_bytes"]

BLOCK_SIZE = 32
"""Elements per MX block (OCP MX v1.0: k = 32 for every concrete format)."""
MX_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")
"""MX element formats: MXFP8 (E4M3, E5M2), MXFP6 (E2M3, E3M2), MXFP4 (E2M1)."""
SCALE_RULES: tuple[str, ...] = ("floor", "rceil", "ceil", "even")
"""How the E8M0 scale byte follows from the block's amax (module docstring)."""
USAGES: tuple[str, ...] = ("rowwise", "columnwise", "both")
"""Which quantized copies are produced: 1x32 blocks along K, 32x1 blocks along M, or both."""
BLOCKS: tuple[str, ...] = ("1d", "2d")
"""``1d``: one scale per 1x32 (rowwise) or 32x1 (columnwise) block; ``2d``: one per 32x32 tile."""
SCALE_LAYOUTS: tuple[str, ...] = ("compact", "swizzled")
"""``compact``: the padded row-major scale matrix (padding don't-care); ``swizzled``: cuBLAS 128x4 tiles."""
EDGES: tuple[str, ...] = ("te", "torchao", "torchao_018")
"""NaN, Inf and scale-0 handling (module docstring)."""

_F32_INF = 0x7F80_0000
_F32_MAGNITUDE = 0x7FFF_FFFF
_E8M0_NAN = 0xFF
_E8M0_MAX = 0xFE
_SCALE_ROWS_MULTIPLE = 128
_SCALE_COLS_MULTIPLE = 4


def mx(
    x: np.ndarray,
    *,
    format: str,
    scale_rule: str,
    usage: str = "rowwise",
    blocks: str = "1d",
    scale_layout: str = "compact",
    edges: str = "te",
) -> dict[str, np.ndarray]:
    """Quantize ``x`` to MX: E8M0 block scales and FP8/FP6/FP4 element codes.

    Contract
    --------
    ``quant.mx``: ``x`` is viewed as ``[M, K]`` (leading dimensions flattened into ``M``).  For each
    block (rowwise: ``x[r, 32j : 32j+32]``; columnwise: ``x[32i : 32i+32, c]``; ``blocks="2d"``: the
    tile ``x[32i :, 32j :]``, shared by both directions), ``amax`` is the largest ``|x|`` of the block
    (``edges`` decides about NaN), ``s = scale_bytes(amax)`` (``scale_rule``, clamped to 0..254; NaN
    and Inf per ``edges``), and every element of the block is ``cast(fl32(x * 2**(127 - s)))`` with
    the saturating round-to-nearest-even cast of ``format`` (``cast.fp8`` ``overflow="saturate"``,
    ``cast.fp6`` / ``cast.fp4``).  Dequantized, an element is ``decode(code) * 2**(s - 127)``.

    Source
    ------
    OCP Microscaling Formats (MX) v1.0 (block 32, E8M0 scales, the ``floor`` rule of §6.3);
    TransformerEngine ``common/cast/mxfp8/quantize_mxfp8.cuh`` (``rceil``: ``amax *
    Quantized_Limits::max_norm_rcp``, ``float_to_e8m0`` = ``cvt.rp.satfinite.ue8m0x2.f32``,
    ``exp2f_rcp``; shapes from ``MXFP8Quantizer::get_scale_shape``; 2D from ``compute_ref_2d_quantize``)
    at d0067d0; torchao ``prototype/mx_formats/mx_tensor.py`` ``to_mx`` at 36027d8 and v0.18.0
    (``ScaleCalculationMode`` FLOOR, CEIL, EVEN, RCEIL).

    Encoding
    --------
    ``x``: float32 or float16 ``numpy.ndarray`` (bfloat16 values as float32), at least 2-D, non-empty.
    Outputs, per ``usage`` (``rowwise`` / ``columnwise`` / ``both``):

    - ``data_rowwise`` / ``data_columnwise``: ``uint8`` codes in ``x``'s shape, *not* transposed
      (TransformerEngine MXFP8); FP6 one code per byte (low 6 bits); FP4 packed two per byte along
      the last axis, element ``2i`` in the low nibble (``pack.nibbles`` ``low_first``), so the last
      dimension is ``K / 2``.
    - ``scale_rowwise``: ``uint8 [round_up(M, 128), round_up(K / 32, 4)]``; ``scale_columnwise``:
      ``uint8 [round_up(M / 32, 4), round_up(K, 128)]`` (TransformerEngine's padded shapes).
      ``scale_layout="compact"``: row-major, ``scale[r, j]`` for the block ``j`` of row ``r``
      (columnwise: ``scale[i, c]`` for the block ``i`` of column ``c``); the padding is don't-care
      (zero here).  ``"swizzled"``: the same bytes in the cuBLAS 128x4 layout
      (``layout.scale_swizzle`` of the unpadded matrix; the columnwise one of its transpose, ``[K, M
      / 32]``, as TransformerEngine does), the padding zero; the shape stays as above.
    - ``*_dont_care``: boolean masks of the same shapes, True where a byte is don't-care (compact
      padding; bytes whose elements all lie in blocks with scale 0xFF).

    Edge cases
    ----------
    - A block of zeros (and ±0, tiny values): ``s = 0``, codes 0 with the elements' signs (-0.0 -> 0x80).
    - One large outlier: it sets the scale; ``floor`` lets the block's max land in ``[2**emax,
      2**(emax + 1))``, which saturates above ``max`` (E4M3 480 -> 448), and so may ``even`` (E4M3 480 stays
      at scale 2**0); ``rceil`` and ``ceil`` keep ``|x * 2**(127 - s)|`` at or below ``max``.
    - NaN / Inf in a block: per ``edges`` (module docstring).
    - Ragged ``M`` (rowwise) or ``K`` (columnwise): the scale matrices are padded to 128x4 tiles.

    Raises ``TypeError`` unless ``x`` is a float32 or float16 ``numpy.ndarray``; ``ValueError`` for an
    unknown parameter value, ``x`` with fewer than 2 dimensions or no elements, ``K`` not a multiple
    of 32 for rowwise or 2d blocks, ``M`` not a multiple of 32 for columnwise or 2d blocks, and an odd
    ``K`` for FP4.
    """
    fmt = _check_params(format, scale_rule, usage, blocks, scale_layout, edges)
    x2 = _check_x(x, fmt, usage, blocks)
    rows, cols = x2.shape
    magnitude = x2.view(np.uint32).astype(np.int64) & _F32_MAGNITUDE
    if edges == "te":
        magnitude = np.where(magnitude > _F32_INF, 0, magnitude)  # fmaxf: NaN never wins

    out: dict[str, np.ndarray] = {}
    tile_scale = None
    if blocks == "2d":
        tiles = magnitude.reshape(rows // BLOCK_SIZE, BLOCK_SIZE, cols // BLOCK_SIZE, BLOCK_SIZE).max(axis=(1, 3))
        tile_scale = scale_bytes(tiles, format=format, scale_rule=scale_rule, edges=edges)
    if usage in ("rowwise", "both"):
        if tile_scale is None:
            amax = magnitude.reshape(rows, cols // BLOCK_SIZE, BLOCK_SIZE).max(axis=2)
            scale = scale_bytes(amax, format=format, scale_rule=scale_rule, edges=edges)
        else:
            scale = np.repeat(tile_scale, BLOCK_SIZE, axis=0)
        element_scale = np.repeat(scale, BLOCK_SIZE, axis=1)
        out.update(_direction("rowwise", x, x2, element_scale, scale, fmt, scale_rule, edges, scale_layout))
    if usage in ("columnwise", "both"):
        if tile_scale is None:
            amax = magnitude.reshape(rows // BLOCK_SIZE, BLOCK_SIZE, cols).max(axis=1)
            scale = scale_bytes(amax, format=format, scale_rule=scale_rule, edges=edges)
        else:
            scale = np.repeat(tile_scale, BLOCK_SIZE, axis=1)
        element_scale = np.repeat(scale, BLOCK_SIZE, axis=0)
        out.update(_direction("columnwise", x, x2, element_scale, scale, fmt, scale_rule, edges, scale_layout))
    return out


def scale_bytes(amax: np.ndarray, *, format: str, scale_rule: str, edges: str) -> np.ndarray:
    """E8M0 scale bytes (``uint8``) of block maxima given as float32 bit patterns of ``|amax|``.

    ``amax`` holds non-negative float32 patterns as integers (a NaN pattern where the block's amax
    is NaN); the rules and the NaN/Inf handling are the module docstring's.
    """
    fmt = get_format(format)
    emax = _emax(fmt)
    amax = np.asarray(amax, dtype=np.int64)
    nan, inf = amax > _F32_INF, amax == _F32_INF
    if scale_rule == "rceil":
        with np.errstate(invalid="ignore", over="ignore"):
            value = amax.astype(np.uint32).view(np.float32)
            if edges == "torchao_018":
                descale = value / np.float32(fmt.max_finite)
            else:
                descale = value * (np.float32(1.0) / np.float32(fmt.max_finite))
        bits = descale.view(np.uint32).astype(np.int64) & _F32_MAGNITUDE
        exponent, mantissa = bits >> 23, bits & 0x7F_FFFF
        byte = exponent + np.where(exponent == 0, mantissa > 0x40_0000, mantissa != 0)
        if edges == "torchao_018":
            byte = byte - _log2_rounds_to_power(exponent, mantissa)
    else:
        if scale_rule == "even":
            amax = (amax + (1 << (22 - fmt.mantissa_bits))) & _F32_INF
        exponent = amax >> 23
        if scale_rule == "ceil":
            exponent = exponent + ((amax & 0x7F_FFFF) != 0)
        byte = exponent - emax
    byte = np.clip(byte, 0, _E8M0_MAX)
    if edges == "te":
        byte = np.where(inf, _E8M0_MAX, byte)
    elif edges == "torchao":
        byte = np.where(nan | inf, _E8M0_NAN, byte)
    else:
        byte = np.where(nan, _E8M0_NAN, byte)
    return byte.astype(np.uint8)


# -- pieces ---------------------------------------------------------------------------------------
def _emax(fmt: FloatFormat) -> int:
    """``floor(log2(max finite))`` of an element format: torchao's ``target_max_pow2``."""
    return int(np.floor(np.log2(fmt.max_finite)))


def _log2_slack() -> np.ndarray:
    """``T`` per float32 exponent field ``E`` of ``d``: the largest ``m`` with ``RN32(log2 d) == j`` (module docstring).

    Row ``E`` is ``j = E - 127`` on the grid ``2**-23`` (``d = 2**j * (1 + m * 2**-23)``); row 0 is ``j = -127``,
    the subnormal ``d = 2**-127 * (1 + m * 2**-22)`` (mantissa field ``0x400000 + m``).  ``RN32(log2 d) == j``
    iff ``log2(1 + f) < h(j)``, ``f = m / grid``, ``h(j)`` half the float32 spacing above ``j``: ``m < grid *
    expm1(h * ln 2)``.  In float64 the bound is within 1e-15 of its exact value, whose fractional part is at least
    0.09 (or, for ``j = 0``, the bound is below 1e-30), so ``floor`` is exact (``tests/reference`` checks every row
    against 60-digit ``decimal`` arithmetic).
    """
    j = np.arange(-127, 128).astype(np.float32)
    half_spacing = (np.nextafter(j, np.float32(np.inf)) - j).astype(np.float64) / 2
    grid = np.where(j == -127, 2.0**22, 2.0**23)
    return np.floor(grid * np.expm1(half_spacing * np.log(2.0))).astype(np.int64)


_LOG2_SLACK = _log2_slack()


def _log2_rounds_to_power(exponent: np.ndarray, mantissa: np.ndarray) -> np.ndarray:
    """True where a finite ``d > 2**j`` (float32 fields) has ``RN32(log2 d) == j``: torchao 0.18's ``ceil`` stays."""
    offset = np.where(exponent == 0, mantissa - 0x40_0000, mantissa)
    slack = _LOG2_SLACK[np.minimum(exponent, _LOG2_SLACK.size - 1)]
    return (exponent < _LOG2_SLACK.size) & (offset > 0) & (offset <= slack)


def _reciprocal(scale: np.ndarray, scale_rule: str, edges: str) -> np.ndarray:
    """float32 ``2**(127 - s)`` per scale byte (``s = 254``: ``2**-127``; ``s = 255``: NaN; ``s = 0`` per ``edges``)."""
    s = scale.astype(np.int64)
    bits = np.where(s == _E8M0_MAX, 0x0040_0000, (_E8M0_MAX - s) << 23)
    if edges == "torchao_018":
        bits = np.where(s == 0, (127 << 23) if scale_rule == "rceil" else (253 << 23), bits)
    bits = np.where(s == _E8M0_NAN, 0x7FC0_0000, bits)
    return bits.astype(np.uint32).view(np.float32)


def _codes(scaled: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Saturating RNE codes of ``scaled``; NaN gives the canonical NaN's code (FP8 0x7F, FP6/FP4 +max)."""
    if fmt.bits == 8:
        codes = reference.cast.fp8(scaled, format=fmt.name, overflow="saturate")["codes"]
        return np.where(np.isnan(scaled), fmt.magnitude_mask, codes).astype(np.uint8)
    cast = reference.cast.fp6 if fmt.bits == 6 else reference.cast.fp4
    return cast(scaled, format=fmt.name, nan="max")["codes"]


def _direction(
    name: str,
    x: np.ndarray,
    x2: np.ndarray,
    element_scale: np.ndarray,
    scale: np.ndarray,
    fmt: FloatFormat,
    scale_rule: str,
    edges: str,
    scale_layout: str,
) -> dict[str, np.ndarray]:
    """Data, scale and don't-care masks of one direction (``element_scale``: each element's byte)."""
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = x2 * _reciprocal(element_scale, scale_rule, edges)
    invalid = element_scale == _E8M0_NAN
    codes = np.where(invalid, 0, _codes(scaled, fmt)).astype(np.uint8)
    if fmt.bits == 4:
        codes = nibbles(codes, order="low_first")["packed"]
        invalid = invalid[:, 0::2] & invalid[:, 1::2]
    data_shape = (*x.shape[:-1], codes.shape[-1])

    rows, cols = scale.shape
    if name == "rowwise":
        padded_shape = (_round_up(rows, _SCALE_ROWS_MULTIPLE), _round_up(cols, _SCALE_COLS_MULTIPLE))
        swizzle_source = scale
    else:
        padded_shape = (_round_up(rows, _SCALE_COLS_MULTIPLE), _round_up(cols, _SCALE_ROWS_MULTIPLE))
        swizzle_source = scale.T
    padding = np.ones(padded_shape, dtype=bool)
    padding[:rows, :cols] = False
    if scale_layout == "swizzled":
        stored = scale_swizzle(np.ascontiguousarray(swizzle_source))["swizzled"].reshape(padded_shape)
        scale_dont_care = np.zeros(padded_shape, dtype=bool)
    else:
        stored = np.zeros(padded_shape, dtype=np.uint8)
        stored[:rows, :cols] = scale
        scale_dont_care = padding
    return {
        f"data_{name}": codes.reshape(data_shape),
        f"scale_{name}": stored,
        f"data_{name}_dont_care": invalid.reshape(data_shape),
        f"scale_{name}_dont_care": scale_dont_care,
    }


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _check_params(format: str, scale_rule: str, usage: str, blocks: str, scale_layout: str, edges: str) -> FloatFormat:
    check_choice("format", format, MX_FORMATS)
    check_choice("scale_rule", scale_rule, SCALE_RULES)
    check_choice("usage", usage, USAGES)
    check_choice("blocks", blocks, BLOCKS)
    check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    check_choice("edges", edges, EDGES)
    return get_format(format)


def _check_x(x: np.ndarray, fmt: FloatFormat, usage: str, blocks: str) -> np.ndarray:
    """``x`` as a contiguous float32 ``[M, K]`` after the dtype and shape checks."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a numpy.ndarray of dtype float32 or float16")
    if x.dtype not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise TypeError(
            f"Got x.dtype={x.dtype}, but x must be float32 or float16 (pass bfloat16 values as float32); "
            "float64 is refused: narrowing it through float32 would round twice"
        )
    if x.ndim < 2:
        raise ValueError(
            f"Got x.shape={x.shape}, but x must have at least 2 dimensions [..., M, K] (MX blocks run along K, "
            "or along M for columnwise usage); reshape a vector to [1, K]"
        )
    if x.size == 0:
        raise ValueError(f"Got x.shape={x.shape}, but x must not be empty")
    rows, cols = int(np.prod(x.shape[:-1])), x.shape[-1]
    along_k = usage != "columnwise" or blocks == "2d"
    along_m = usage != "rowwise" or blocks == "2d"
    what = "2d blocks" if blocks == "2d" else f"usage={usage!r}"
    if along_k and cols % BLOCK_SIZE:
        raise ValueError(
            f"Got x.shape={x.shape}, but {what} needs K % 32 == 0 (K = x.shape[-1] = {cols}): blocks of 32 run along K"
        )
    if along_m and rows % BLOCK_SIZE:
        raise ValueError(
            f"Got x.shape={x.shape}, but {what} needs M % 32 == 0 (M = {rows}, the product of the leading "
            "dimensions): columnwise blocks of 32 run along M"
        )
    if fmt.bits == 4 and cols % 2:
        raise ValueError(f"Got x.shape={x.shape}, but FP4 packs two codes per byte along K: K must be even")
    return np.ascontiguousarray(x, dtype=np.float32).reshape(rows, cols)
