"""NVFP4 quantization: E2M1 elements, E4M3 block scales, an fp32 tensor scale (contract ``quant.nvfp4``).

Source: NVIDIA/TransformerEngine@d0067d0 ``common/cast/nvfp4/core_nvfp4.cuh``,
``quantize_transpose_nvfp4.cuh``, ``util/ptx.cuh``, ``pytorch/csrc/quantizer.cpp``,
``pytorch/custom_recipes/reference_nvfp4.py``, ``tests/cpp/operator/test_cast_nvfp4_transpose.cu``;
pytorch/ao@36027d8 ``torchao/prototype/mx_formats/nvfp4_tensor.py`` (``nvfp4_quantize``,
``per_tensor_amax_to_scale``).
A given amax (``amax_source="given"``): TE ``pytorch/csrc/quantizer.cpp``
``NVFP4Quantizer::quantize_with_amax`` and ``quantize_impl`` (``compute_amax=false``, the amax
all-reduce of ``with_amax_reduction``); torchao ``nvfp4_quantize(x, 16, per_tensor_scale)``.

Operands
--------
``x`` is ``[M, K]`` with ``M`` and ``K`` multiples of 16.  The *rowwise* operand is ``x``; the
*columnwise* operand is ``x.T`` (``[K, M]``), or with ``rht=True`` the random Hadamard transform
of ``x.T`` rounded to bfloat16 (below).  Each operand is quantized the same way, along its own
rows, with its own amax:

1. ``amax``: ``max |v|`` over the operand (``amax_scope="tensor"``, shape ``[1]``) or over each
   of its rows (``"row"``, shape ``[rows]``); NaN is ignored (``fmaxf``) and an all-NaN operand
   gives 0.  torchao's rules take ``torch.max`` instead, which propagates NaN.  With
   ``amax_source="given"`` the caller's float32 ``[1]`` value replaces it (``amax`` for the rowwise
   operand, ``columnwise_amax`` for the columnwise one, after the transform when ``rht``), whatever
   the data: the steps below run on its bits unchanged.
2. the tensor scale, from the amax (``fl32`` = one float32 rounding, ``FLT_MAX`` = float32 max):

   - ``te``: ``S_enc = min(fl32(2688 / amax), FLT_MAX)`` (2688 = 448 * 6; ``min`` is ``fminf``,
     which drops a NaN operand, so a NaN amax gives ``FLT_MAX``), replaced by 1 when
     ``amax == 0`` or ``S_enc == 0`` (``amax = Inf``); ``S_dec = fl32(1 / S_enc)`` is the output
     ``tensor_scale``;
   - ``torchao``: ``pts = fl32(amax / 2688)`` (``torchao_cuda``: ``fl32(amax * fl32(1/2688))``,
     torch's CUDA division by a Python scalar), the output ``tensor_scale``; no guard.
3. per block (1x16 along the operand's rows, or one 16x16 tile, whose scale every one of its 16
   rows stores) with block amax ``b`` (NaN ignored as in 1 for ``te``), the E4M3 block scale
   ``sf`` (saturating, round to nearest even) and the element encode scale ``enc``:

   - ``te``: ``sf = e4m3(min(fl32(b * fl32(S_enc * fl32(1/6))), FLT_MAX))``,
     ``enc = min(fl32(1 / fl32(sf * S_dec)), FLT_MAX)``; when ``sf`` rounds to 0 for a nonzero
     block, ``enc`` is ``FLT_MAX`` (``zero_scale="flt_max"``) or 0 (``"zero"``); a block amax
     above the tensor amax (a given one) makes ``b * S_enc / 6`` exceed 448, which the saturating
     conversion (``static_cast<fp8e4m3>``: ``__NV_SATFINITE``) makes 448 (0x7E);
   - ``torchao``: ``sf = e4m3(clamp(fl32(fl32(b / 6) / pts), 2**-6, 448))`` (``torchao_cuda``:
     ``fl32(b * fl32(1/6))``), ``enc = fl32(fl32(1 / pts) / sf)``; the clamp floor keeps every
     block scale nonzero.
4. each element ``q = e2m1(fl32(v * enc))``: round to nearest even (or stochastically with
   explicit random bits, ``cast.fp4``'s rule), saturating to ±6 (``cvt.rn.satfinite``; torchao
   clamps to ±6 first), NaN to +6.

Random Hadamard transform (``rht=True``, columnwise operand only)
-----------------------------------------------------------------
Each row of ``x.T`` is cut into chunks of 16 (along M) and each chunk ``c`` becomes
``bf16(c @ (diag(s) @ H16 / 4))`` with ``H16`` the Sylvester Hadamard matrix
(``H[i, j] = (-1)**popcount(i & j)``) and TE's fixed sign vector ``s`` (mask 0xD7E8: -1 at
i = 3, 5, 6, 7, 8, 9, 10, 12, 14, 15).  Kernel order: the terms ``t_i = fl32(c_i * s_i / 4)``
(exact for bfloat16 and float16 inputs), then the fast Walsh-Hadamard butterflies in float32 with
``h = 1, 2, 4, 8`` (``a, b -> a + b, a - b`` for positions ``i`` and ``i + h``), then one
round to nearest even to bfloat16 (NaN stays NaN).  TE computes the product with tensor-core MMA
(``hadamard_transform.cu``) and its reference with a bfloat16 matmul: their float32 accumulation
order is the hardware's.  Every order gives the exact sum, hence the same bits, whenever the
16 nonzero inputs of a chunk lie within a factor 2**12 of each other (8-bit significands, 16
terms: at most 24 bits); outside that, this contract's order decides.  TE accepts bfloat16 input
only; float32 and float16 inputs follow the same arithmetic here (an extension).

Encoding
--------
``data``: uint8 ``[M, K/2]``, two E2M1 codes per byte, element ``2i`` in the low nibble;
``scales``: uint8 E4M3 codes ``[M, K/16]`` (compact: no padding, no swizzle); ``amax`` and
``tensor_scale``: float32 ``[1]`` or ``[M]``.  The columnwise outputs are the same for the
columnwise operand: ``columnwise_data`` ``[K, M/2]`` (transposed), ``columnwise_scales``
``[K, M/16]``, ``columnwise_amax`` and ``columnwise_tensor_scale`` ``[1]`` or ``[K]``.
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice
from reference.cast import fp4 as cast_fp4
from reference.cast import fp8 as cast_fp8
from reference.formats import get_format
from reference.pack import nibbles

__all__ = [
    "AMAX_SCOPES",
    "AMAX_SOURCES",
    "BLOCKS",
    "RHT_SIGN_MASK",
    "ROUNDINGS",
    "SCALE_RULES",
    "USAGES",
    "ZERO_SCALES",
    "hadamard_16",
    "nvfp4",
    "scaled_operand",
]

USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")
"""Which operands are produced (TE ``rowwise_usage`` / ``columnwise_usage``)."""
BLOCKS: tuple[str, ...] = ("1x16", "16x16")
"""1x16 blocks along each operand's rows, or 16x16 tiles (TE ``with_2d_quantization``, weights)."""
AMAX_SCOPES: tuple[str, ...] = ("tensor", "row")
"""One amax per operand, or one per row of each operand (TE ``row_scaled_nvfp4``)."""
ROUNDINGS: tuple[str, ...] = ("rne", "stochastic")
"""Element rounding: nearest even, or stochastic with explicit random bits (``cast.fp4``'s rule)."""
SCALE_RULES: tuple[str, ...] = ("te", "torchao", "torchao_cuda")
"""Tensor-scale, block-scale and encode-scale arithmetic: TransformerEngine, or torchao eager on
CPU (IEEE divisions) or on CUDA (a division by a Python scalar is a multiplication by its float32
reciprocal)."""
ZERO_SCALES: tuple[str, ...] = ("flt_max", "zero")
"""The encode scale of a block whose E4M3 scale rounds to 0 (``te`` rule only)."""
AMAX_SOURCES: tuple[str, ...] = ("computed", "given")
"""Each operand's per-tensor amax: max |v| of the operand, or the caller's (TE ``quantize_with_amax``,
amax reduction; torchao ``per_tensor_scale``)."""
RHT_SIGN_MASK = 0xD7E8
"""TE's fixed RHT sign vector: bit ``i`` set where ``s_i = -1`` (``get_wgrad_sign_vector``)."""

BLOCK = 16
_FLT_MAX = np.float32(np.finfo(np.float32).max)
_F32_INF_BITS = 0x7F80_0000
_TE_NUMERATOR = np.float32(448.0 * 6.0)
_SIXTH = np.float32(1.0 / 6.0)
"""fl32(1/6) = 0x3E2AAAAB: the double 1/6 is no float32 midpoint, so one rounding of it is fl32."""
_INV_2688 = np.float32(1.0 / 2688.0)
_TORCHAO_FLOOR = np.float32(2.0**-6)
"""torchao's ``E4M3_EPS = torch.finfo(torch.float8_e4m3fn).tiny``, the smallest normal E4M3 value."""
_E4M3_MAX = np.float32(448.0)
_E4M3_VALUES = get_format("float8_e4m3fn").decode_table.astype(np.float32)
_FLOAT_DTYPES = (np.float32, np.float16)
_RANDOM_DTYPES = (np.uint8, np.uint32)
_AMAX_DTYPES = (np.float32,)


def nvfp4(
    x: np.ndarray,
    *,
    usage: str = "both",
    block: str = "1x16",
    amax_scope: str = "tensor",
    rht: bool = False,
    rounding: str = "rne",
    scale_rule: str = "te",
    zero_scale: str = "flt_max",
    amax_source: str = "computed",
    random_bits: np.ndarray | None = None,
    columnwise_random_bits: np.ndarray | None = None,
    amax: np.ndarray | None = None,
    columnwise_amax: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Quantize a float32/bfloat16/float16 matrix to NVFP4 (rowwise and/or columnwise operands).

    Contract
    --------
    ``quant.nvfp4``: the module docstring's steps 1-4 on the rowwise operand ``x`` and on the
    columnwise operand ``x.T`` (after the random Hadamard transform when ``rht``), as ``usage``
    asks.  ``rounding="stochastic"`` rounds each element of the rowwise operand with
    ``random_bits[m, k]`` and of the columnwise one with ``columnwise_random_bits[k, m]``
    (``cast.fp4``: up iff ``floor(d * 2**w / 2**s) + r >= 2**w`` for ``w``-bit ``r``); the block
    scales are always rounded to nearest even.  ``amax_source="given"`` takes each operand's amax
    from ``amax`` / ``columnwise_amax`` (float32 ``[1]``) instead of the data, echoes it in the
    ``amax`` outputs and computes everything else from it by the same rule.

    Source
    ------
    ``scale_rule="te"``: TE kernels ``compute_global_encode_scaling_factor_FP4``,
    ``compute_decoding_scaling_factor`` and the element loop of ``quantize_transpose_nvfp4.cuh``
    (``1.0f / (S_dec_b * S_dec)``, ``fminf``, ``mul`` then ``cvt.rn.satfinite.e2m1x2.f32``); TE's
    Python reference ``_quantize_blockwise_reference`` computes the same scales.
    ``zero_scale="zero"``: TE's C++ test reference (``test_cast_nvfp4_transpose.cu``:
    ``S_dec_b_fp32 == 0.f ? 0.f : ...``).  ``"torchao"`` / ``"torchao_cuda"``: torchao
    ``nvfp4_quantize`` with ``per_tensor_scale = per_tensor_amax_to_scale(torch.max(x.abs()))``
    (eager, v0.17+ reciprocal form).  Stochastic rounding with uint8 bits: TE's software
    ``stochastic_round_fp4_e2m1`` (8 random bits per element).  RHT: TE ``nvfp4_tensor.py`` and
    ``hadamard_transform.cu`` (post-RHT columnwise amax).  A given amax: TE
    ``NVFP4Quantizer::quantize_with_amax`` (copies one amax into both operands' amax buffers, then
    ``quantize_impl`` with ``compute_amax=false``: no amax kernel, the cast kernels read it) and the
    ``with_amax_reduction`` all-reduce (MAX) between the amax and the cast; torchao
    ``nvfp4_quantize(x, 16, per_tensor_scale=per_tensor_amax_to_scale(amax))``.

    Encoding
    --------
    See the module docstring: ``data`` / ``columnwise_data`` uint8 (low nibble first, the
    columnwise operand ``[K, M/2]``), ``scales`` / ``columnwise_scales`` uint8 E4M3 codes,
    ``amax``, ``tensor_scale`` and their columnwise twins float32.  Outputs of an operand that
    ``usage`` leaves out are absent.  ``data_dont_care`` / ``columnwise_data_dont_care`` (bool, the
    shape of the data) mark bytes holding an element whose scaled value is NaN under a torchao
    rule: torchao's E2M1 encoder has no NaN code and turns the NaN's bit pattern into some code.

    Edge cases
    ----------
    - ``te``: amax 0 (all zeros, or all NaN) gives ``S_enc = 1``, ``sf = 0`` everywhere and zero
      codes; amax Inf gives ``S_enc = 1`` and ``sf = 448`` for a block holding the Inf, whose Inf
      saturates to ±6; a tiny amax gives ``S_enc = FLT_MAX`` (2688 / amax overflows).
    - ``te``: a nonzero block whose ``sf`` rounds to 0 (its amax is below ``2**-10 * 6 / S_enc``,
      about 2.2e-6 of the tensor's amax): ``flt_max`` makes its nonzero elements ±6, ``zero``
      makes them ±0.
    - NaN elements give +6 (0x7), whatever their sign (PTX ``satfinite``: NaN -> +MAX_NORM; TE's SR
      emulation likewise); ±Inf elements give ±6; -0.0 gives 0x8.
    - torchao: amax 0 or NaN gives NaN tensor and block scales and NaN scaled values (E4M3
      0x7F/0xFF, compared as any NaN; data don't-care); amax Inf gives ``pts = Inf``, block
      scales ``2**-6`` (0x08) and ±0 codes, except blocks holding an Inf (NaN scale).
    - A given amax below a block's amax: the block scale saturates to 448 (0x7E, every rule) and
      the elements beyond 6 after scaling to ±6.  A given 0 with nonzero data: ``te`` takes
      ``S_enc = 1`` (blocks above 2688 saturate), torchao gives ``pts = 0``, block scales 448 (NaN
      for a zero block) and ±6 (NaN, don't-care, for zeros).  A given NaN: ``te`` takes
      ``S_enc = FLT_MAX`` (nearly every nonzero element becomes ±6), torchao NaN as above.  A given
      negative amax is not checked by TE or torchao and follows their arithmetic: ``te`` gives a
      negative ``S_enc`` and tensor scale and E4M3 block scales with the sign bit set; torchao
      gives block scales ``2**-6`` and elements of the opposite sign.

    Raises ``TypeError`` unless ``x`` is a float32 or float16 ``numpy.ndarray`` (bfloat16 arrives
    as float32) and random bits are uint8 or uint32 arrays; ``ValueError`` for an unknown
    parameter value, an unsupported combination (``amax_scope="row"`` with ``rht``, 16x16 blocks,
    stochastic rounding or ``usage="columnwise"``; a torchao rule with 16x16 blocks, ``rht``,
    stochastic rounding, ``amax_scope="row"`` or ``zero_scale="zero"``; ``amax_source="given"``
    with ``amax_scope="row"``), an ``x`` that is not 2-D or is empty or whose dims are not multiples
    of 16, random bits missing, superfluous or of the wrong shape, and given amaxes missing,
    superfluous or not of shape ``(1,)`` (``TypeError`` unless float32 arrays).
    """
    _check_params(usage, block, amax_scope, rht, rounding, scale_rule, zero_scale, amax_source)
    _check_x(x)
    rows, cols = x.shape
    rowwise, columnwise = usage != "columnwise", usage != "rowwise"
    _check_random_bits("random_bits", random_bits, rounding, rowwise, (rows, cols))
    _check_random_bits("columnwise_random_bits", columnwise_random_bits, rounding, columnwise, (cols, rows))
    _check_amax("amax", amax, amax_source, rowwise)
    _check_amax("columnwise_amax", columnwise_amax, amax_source, columnwise)
    values = np.asarray(x, dtype=np.float32)
    out: dict[str, np.ndarray] = {}
    settings = (block, amax_scope, rounding, scale_rule, zero_scale)
    if rowwise:
        out.update(_quantize_operand(values, random_bits, amax, *settings, prefix=""))
    if columnwise:
        operand = np.ascontiguousarray(values.T)
        if rht:
            operand = hadamard_16(operand)
        out.update(_quantize_operand(operand, columnwise_random_bits, columnwise_amax, *settings, prefix="columnwise_"))
    return out


def hadamard_16(values: np.ndarray) -> np.ndarray:
    """TE's random Hadamard transform of each 16-element chunk of the rows, rounded to bfloat16.

    ``values``: float32 ``[R, C]`` with ``C % 16 == 0``; returns float32 ``[R, C]`` holding
    bfloat16 values.  See the module docstring (sign vector, butterfly order, rounding).
    """
    rows, cols = values.shape
    signs = np.where((RHT_SIGN_MASK >> np.arange(BLOCK)) & 1, np.float32(-0.25), np.float32(0.25))
    with np.errstate(invalid="ignore", over="ignore"):
        v = values.reshape(rows, cols // BLOCK, BLOCK) * signs  # exact for bfloat16 and float16 values
        for h in (1, 2, 4, 8):
            pairs = v.reshape(rows, cols // BLOCK, BLOCK // (2 * h), 2, h)
            a, b = pairs[..., 0, :], pairs[..., 1, :]
            v = np.stack([a + b, a - b], axis=-2)
    return _round_to_bfloat16(v.reshape(rows, cols))


def scaled_operand(
    values: np.ndarray,
    *,
    block: str,
    amax_scope: str,
    scale_rule: str,
    zero_scale: str,
    given_amax: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Steps 1-3 and the product of step 4 for one operand (float32 ``[R, C]``), before rounding;
    ``given_amax`` (float32 ``[1]``) replaces the operand's amax.

    Returns ``scaled`` (float32 ``fl32(v * enc)``, ``[R, C]``), ``scales`` (uint8 E4M3 codes,
    ``[R, C/16]``), ``amax`` and ``tensor_scale`` (float32, ``[1]`` or ``[R]``).  Shared with
    ``stochastic.nvfp4``, which rounds ``scaled`` many times.
    """
    rows, cols = values.shape
    propagate_nan = scale_rule != "te"
    magnitude = _magnitude_bits(values, propagate_nan)
    if given_amax is not None:
        amax = given_amax.astype(np.float32).reshape(1)
    elif amax_scope == "row":
        amax = magnitude.max(axis=1).view(np.float32)
    else:
        amax = magnitude.max(keepdims=True).reshape(1).view(np.float32)
    blocks = magnitude.reshape(rows, cols // BLOCK, BLOCK).max(axis=2)
    if block == "16x16":
        tiles = blocks.reshape(rows // BLOCK, BLOCK, cols // BLOCK).max(axis=1)
        blocks = np.repeat(tiles, BLOCK, axis=0)
    block_amax = blocks.view(np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if scale_rule == "te":
            # np.fmin is TE's fminf, which drops a NaN operand (a given NaN amax; 0 * -Inf of a negative one).
            encode = np.fmin(_TE_NUMERATOR / amax, _FLT_MAX)
            encode = np.where((amax == 0) | (encode == 0), np.float32(1.0), encode)
            tensor_scale = np.float32(1.0) / encode
            scaled_amax = block_amax * (encode * _SIXTH).reshape(-1, 1)
            codes = cast_fp8(np.fmin(scaled_amax, _FLT_MAX), format="float8_e4m3fn", overflow="saturate")["codes"]
            block_scale = _E4M3_VALUES[codes]
            enc = np.fmin(np.float32(1.0) / (block_scale * tensor_scale.reshape(-1, 1)), _FLT_MAX)
            if zero_scale == "zero":
                enc = np.where(block_scale == 0, np.float32(0.0), enc)
        else:
            if scale_rule == "torchao":
                tensor_scale, block_scaled = amax / _TE_NUMERATOR, block_amax / np.float32(6.0)
            else:
                tensor_scale, block_scaled = amax * _INV_2688, block_amax * _SIXTH
            ratio = block_scaled / tensor_scale.reshape(-1, 1)
            clamped = np.clip(ratio, _TORCHAO_FLOOR, _E4M3_MAX)  # NaN stays NaN, as torch.clamp
            codes = cast_fp8(clamped, format="float8_e4m3fn", overflow="saturate")["codes"]
            block_scale = _E4M3_VALUES[codes]
            enc = (np.float32(1.0) / tensor_scale).reshape(-1, 1) / block_scale
        scaled = values.reshape(rows, cols // BLOCK, BLOCK) * enc.astype(np.float32)[:, :, None]
    return {
        "scaled": scaled.reshape(rows, cols).astype(np.float32),
        "scales": codes,
        "amax": amax.astype(np.float32),
        "tensor_scale": np.asarray(tensor_scale, dtype=np.float32).reshape(amax.shape),
    }


def _quantize_operand(
    values: np.ndarray,
    random_bits: np.ndarray | None,
    given_amax: np.ndarray | None,
    block: str,
    amax_scope: str,
    rounding: str,
    scale_rule: str,
    zero_scale: str,
    *,
    prefix: str,
) -> dict[str, np.ndarray]:
    """The four outputs (and the don't-care mask) of one operand, names prefixed."""
    parts = scaled_operand(
        values, block=block, amax_scope=amax_scope, scale_rule=scale_rule, zero_scale=zero_scale, given_amax=given_amax
    )
    scaled = parts["scaled"]
    codes = cast_fp4(scaled, format="float4_e2m1fn", rounding=rounding, nan="max", random_bits=random_bits)["codes"]
    rows, cols = scaled.shape
    dont_care = np.isnan(scaled).reshape(rows, cols // 2, 2).any(axis=2) & (scale_rule != "te")
    return {
        f"{prefix}data": nibbles(codes, order="low_first")["packed"],
        f"{prefix}scales": parts["scales"],
        f"{prefix}amax": parts["amax"],
        f"{prefix}tensor_scale": parts["tensor_scale"],
        f"{prefix}data_dont_care": dont_care,
    }


def _magnitude_bits(values: np.ndarray, propagate_nan: bool) -> np.ndarray:
    """``|v|`` as uint32 float32 bit patterns (they order like the values); NaN -> 0 unless propagated."""
    magnitude = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32) & np.uint32(0x7FFF_FFFF)
    if not propagate_nan:
        magnitude = np.where(magnitude > _F32_INF_BITS, np.uint32(0), magnitude)
    return magnitude


def _round_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest even bfloat16 (as float32); NaN stays NaN, overflow gives ±Inf."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF_0000
    nan = (bits & 0x7FFF_FFFF) > _F32_INF_BITS
    quiet = (bits | 0x0040_0000) & 0xFFFF_0000
    return np.where(nan, quiet, rounded).astype(np.uint32).view(np.float32)


# -- argument checks ---------------------------------------------------------------------------------
def _check_params(
    usage: str,
    block: str,
    amax_scope: str,
    rht: object,
    rounding: str,
    scale_rule: str,
    zero_scale: str,
    amax_source: str,
) -> None:
    check_choice("usage", usage, USAGES)
    check_choice("block", block, BLOCKS)
    check_choice("amax_scope", amax_scope, AMAX_SCOPES)
    check_choice("rht", rht, (False, True))
    check_choice("rounding", rounding, ROUNDINGS)
    check_choice("scale_rule", scale_rule, SCALE_RULES)
    check_choice("zero_scale", zero_scale, ZERO_SCALES)
    check_choice("amax_source", amax_source, AMAX_SOURCES)
    if amax_source == "given" and amax_scope == "row":
        raise ValueError(
            "Got amax_source='given' and amax_scope='row', but a given amax is per tensor "
            "(TE's quantize_with_amax does not support row-scaled NVFP4); use amax_scope='tensor'"
        )
    if amax_scope == "row":
        for name, value, allowed in (
            ("rht", rht, False),
            ("block", block, "1x16"),
            ("rounding", rounding, "rne"),
        ):
            if value != allowed:
                raise ValueError(
                    f"Got amax_scope='row' and {name}={value!r}, but the row-scaled variant needs {name}={allowed!r} "
                    "(TE's row_scaled_nvfp4 supports no RHT, 2D blocks or stochastic rounding)"
                )
        if usage == "columnwise":
            raise ValueError(
                "Got amax_scope='row' and usage='columnwise', but the row-scaled variant needs the rowwise operand "
                "(TE's row_scaled_nvfp4); use usage='both'"
            )
    if scale_rule != "te":
        for name, value, allowed in (
            ("block", block, "1x16"),
            ("rht", rht, False),
            ("rounding", rounding, "rne"),
            ("amax_scope", amax_scope, "tensor"),
            ("zero_scale", zero_scale, "flt_max"),
        ):
            if value != allowed:
                raise ValueError(
                    f"Got scale_rule={scale_rule!r} and {name}={value!r}, but torchao's nvfp4_quantize has "
                    f"{name}={allowed!r} only"
                )


def _check_x(x: object) -> None:
    check_array("x", x, _FLOAT_DTYPES)
    assert isinstance(x, np.ndarray)
    if x.ndim != 2:
        raise ValueError(f"Got x.shape={x.shape}, but x must be 2-D [M, K]; reshape the leading dimensions into M")
    if x.size == 0:
        raise ValueError(f"Got x.shape={x.shape}, but x must not be empty: NVFP4 needs at least one 16x16 tile")
    if x.shape[0] % BLOCK or x.shape[1] % BLOCK:
        raise ValueError(
            f"Got x.shape={x.shape}, but M and K must be multiples of 16 (TE's NVFP4 quantizer); pad x with zeros"
        )


def _check_random_bits(name: str, bits: np.ndarray | None, rounding: str, needed: bool, shape: tuple[int, int]) -> None:
    if rounding != "stochastic" or not needed:
        if bits is not None:
            why = f"rounding={rounding!r}" if rounding != "stochastic" else "usage, which leaves this operand out"
            raise ValueError(f"Got {name} with {why}, but {name} is only for stochastic rounding of its operand")
        return
    if bits is None:
        raise ValueError(
            f"Got rounding='stochastic' and no {name}, but stochastic rounding needs {name}: "
            f"a uint8 or uint32 array of shape {shape}"
        )
    check_array(name, bits, _RANDOM_DTYPES)
    if bits.shape != shape:
        raise ValueError(f"Got {name}.shape={bits.shape}, but {name} must have shape {shape}")


def _check_amax(name: str, amax: np.ndarray | None, amax_source: str, needed: bool) -> None:
    if amax_source != "given" or not needed:
        if amax is not None:
            why = f"amax_source={amax_source!r}" if amax_source != "given" else "usage, which leaves this operand out"
            raise ValueError(f"Got {name} with {why}, but {name} is only for amax_source='given' and its operand")
        return
    if amax is None:
        raise ValueError(
            f"Got amax_source='given' and no {name}, but a given amax needs {name}: a float32 array of shape (1,)"
        )
    check_array(name, amax, _AMAX_DTYPES)
    if amax.shape != (1,):
        raise ValueError(f"Got {name}.shape={amax.shape}, but {name} must have shape (1,)")
