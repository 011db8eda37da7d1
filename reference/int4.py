"""tinygemm int4 weights (contract family ``int4``): torch's tensor-core tiled layout and its dequant.

Source: pytorch/pytorch@6112c47:aten/src/ATen/native/cuda/int4mm.cu (``_convert_weight_to_int4pack``,
``_weight_int4pack_mm``; ``matrix_to_m16n8k16_Bint4_layout`` and ``BLayout_TC_int4``), torchao
``pack_tinygemm_scales_and_zeros`` (pytorch/ao@36027d8:torchao/quantization/utils.py) and the removed
``dequantize_tensor_core_tiled_layout`` op (pytorch/ao#415:
pytorch/ao@74846da:torchao/csrc/cuda/tensor_core_tiled_layout/tensor_core_tiled_layout.cu).

Layout
------
A weight ``q`` of ``N`` rows (output features) and ``K`` columns holds values 0..15.  With
``ikt = inner_k_tiles`` (2, 4 or 8), ``packed`` is int32 ``[ceil(N/8), K/(ikt*16), 32, ikt/2]``:
for ``word = packed[nt, kt, t, j]`` (``t`` the mma lane 0..31), with

    n  = nt*8 + t//4
    kb = (kt*ikt + 2*j)*16 + 2*(t%4)

nibble ``i`` of the word (bits ``4i..4i+3``) holds ``q[n, kb + OFFSETS[i]]``,
``OFFSETS = (0, 8, 16, 24, 1, 9, 17, 25)``: nibbles 0-3 are the even ``k`` of four pairs
``(k, k+1)`` at +0, +8 (same 16-wide k-tile), +16, +24 (the next k-tile), nibbles 4-7 their odd
partners, so word ``j`` covers k-tiles ``2j`` and ``2j+1`` of super-tile ``kt``.  Rows from ``N``
up to ``8*ceil(N/8)`` are zero.  torch >= 2.5 takes the weight as uint8 ``[N, K/2]`` with the
even ``k`` in the high nibble (``(q[n, 2c] << 4) | q[n, 2c+1]``); the packed words are the same.

``scales_and_zeros`` is bfloat16 ``[K/group_size, N8, 2]`` (``N8 = 8*ceil(N/8)``): ``[g, n, 0]``
the scale and ``[g, n, 1]`` the zero of the ``group_size`` weights ``q[n, g*gs:(g+1)*gs]``.

Dequantization
--------------
``w = (q - 8) * scale + zero`` in bfloat16.  The kernel turns a nibble into the bfloat16 ``q - 8``
exactly (``0x4300 | q`` is 128 + q, then ``fma(x, 1, -136)``) and calls ``__hfma2`` (PTX
``fma.rn.bf16x2``): one rounding of the exact ``(q - 8) * scale + zero`` to bfloat16 (``fma``).
torchao's Python dequant (``_dequantize_affine_tinygemm``) multiplies and adds as two bfloat16
ops, two roundings (``mul_add``); the two differ on about 12% of random weights.
"""

from __future__ import annotations

import numpy as np

from reference._checks import check_array, check_choice
from reference._opmath import bfloat16_from_float64, is_dtype_value, to_dtype

__all__ = [
    "DEQUANT_ROUNDINGS",
    "GROUP_SIZES",
    "INNER_K_TILES",
    "INPUT_FORMS",
    "NIBBLE_K_OFFSETS",
    "tinygemm_dequant",
    "tinygemm_mm",
    "tinygemm_pack",
    "tinygemm_scales_and_zeros",
    "tinygemm_unpack",
    "tinygemm_unpack_scales_and_zeros",
]

INNER_K_TILES: tuple[int, ...] = (2, 4, 8)
"""k-tiles (16 values of k each) packed back to back per lane: 4, 8 or 16-byte loads in the kernel."""
GROUP_SIZES: tuple[int, ...] = (32, 64, 128, 256)
"""Group sizes ``_weight_int4pack_mm`` accepts."""
INPUT_FORMS: tuple[str, ...] = ("int32", "uint8")
"""The weight ``tinygemm_pack`` takes: int32 ``[N, K]`` (torch <= 2.4) or uint8 ``[N, K/2]`` (torch >= 2.5)."""
DEQUANT_ROUNDINGS: tuple[str, ...] = ("fma", "mul_add")
"""One rounding of ``(q - 8) * scale + zero`` (the kernel), or two (torchao's Python dequant)."""
NIBBLE_K_OFFSETS: tuple[int, ...] = (0, 8, 16, 24, 1, 9, 17, 25)
"""``k`` of nibble ``i`` of a packed word, relative to the word's ``kb``."""


def tinygemm_pack(
    q: np.ndarray | None = None, q_uint8: np.ndarray | None = None, *, inner_k_tiles: int, input_form: str = "int32"
) -> dict[str, np.ndarray]:
    """Pack int4 weights into the tinygemm tensor-core layout.

    Contract
    --------
    ``int4.tinygemm_pack``: ``packed[nt, kt, t, j]`` nibble ``i`` = ``q[nt*8 + t//4, kb + OFFSETS[i]]``
    with ``kb = (kt*ikt + 2*j)*16 + 2*(t%4)`` (module docstring); rows past ``N`` are zero.

    Source
    ------
    ``torch.ops.aten._convert_weight_to_int4pack(w, inner_k_tiles)`` on CUDA; the golden vectors
    ``tests/vectors/tinygemm_int4pack_torch211_h100.npz`` are its bytes.

    Encoding
    --------
    ``input_form="int32"``: ``q`` is int32 ``[N, K]``, values 0..15.  ``"uint8"``: ``q_uint8`` is
    uint8 ``[N, K/2]``, byte ``c`` of row ``n`` = ``(q[n, 2c] << 4) | q[n, 2c+1]`` (high nibble first).
    ``packed``: int32 ``[ceil(N/8), K/(ikt*16), 32, ikt/2]``.

    Edge cases
    ----------
    ``N`` not a multiple of 8: zero rows up to the next multiple.  ``N == 0``: an empty ``packed``.

    Raises ``ValueError`` for ``inner_k_tiles`` not in (2, 4, 8), an unknown ``input_form``, the
    weight missing or given in the other form, a value outside 0..15, and ``K`` not a multiple of
    ``inner_k_tiles * 16``; ``TypeError`` for a weight of another dtype.
    """
    check_choice("inner_k_tiles", inner_k_tiles, INNER_K_TILES)
    check_choice("input_form", input_form, INPUT_FORMS)
    weight = _weight(q, q_uint8, input_form)
    rows, k = weight.shape
    _check_k(k, inner_k_tiles)
    n_tiles, k_tiles = -(-rows // 8), k // (inner_k_tiles * 16)
    padded = np.zeros((n_tiles * 8, k), dtype=np.uint32)
    padded[:rows] = weight
    n, kb = _lane_coordinates(n_tiles, k_tiles, inner_k_tiles)
    words = np.zeros(n.shape, dtype=np.uint32)
    for i, offset in enumerate(NIBBLE_K_OFFSETS):
        words |= padded[n, kb + offset] << np.uint32(4 * i)
    return {"packed": words.view(np.int32)}


def tinygemm_unpack(packed: np.ndarray, *, inner_k_tiles: int) -> dict[str, np.ndarray]:
    """Unpack the tinygemm tensor-core layout back to int4 values: the exact inverse of ``tinygemm_pack``.

    Contract
    --------
    ``int4.tinygemm_unpack``: ``q[nt*8 + t//4, kb + OFFSETS[i]]`` = nibble ``i`` of
    ``packed[nt, kt, t, j]`` (module docstring), so ``unpack(pack(q))`` is ``q`` with the padding rows.

    Source
    ------
    torchao ``unpack_tensor_core_tiled_layout`` (CUDA op, torchao 0.4-0.15; pytorch/ao#415).

    Encoding
    --------
    ``packed``: int32 ``[NT, KT, 32, ikt/2]``, every bit pattern valid.  ``q``: int32
    ``[8*NT, KT*ikt*16]``, values 0..15.

    Raises ``ValueError`` for ``inner_k_tiles`` not in (2, 4, 8) or a ``packed`` whose shape is not
    ``[NT, KT, 32, inner_k_tiles/2]``; ``TypeError`` unless ``packed`` is int32.
    """
    check_choice("inner_k_tiles", inner_k_tiles, INNER_K_TILES)
    _check_packed(packed, inner_k_tiles)
    n_tiles, k_tiles = packed.shape[:2]
    q = np.zeros((n_tiles * 8, k_tiles * inner_k_tiles * 16), dtype=np.int32)
    n, kb = _lane_coordinates(n_tiles, k_tiles, inner_k_tiles)
    words = packed.view(np.uint32)
    for i, offset in enumerate(NIBBLE_K_OFFSETS):
        q[n, kb + offset] = (words >> np.uint32(4 * i)) & 0xF
    return {"q": q}


def tinygemm_scales_and_zeros(scales: np.ndarray, zeros: np.ndarray) -> dict[str, np.ndarray]:
    """Interleave per-group scales and zeros into the tinygemm ``scales_and_zeros`` tensor.

    Contract
    --------
    ``int4.tinygemm_scales_and_zeros``: ``out[..., g, n, 0] = scales[..., n, g]`` and
    ``out[..., g, n, 1] = zeros[..., n, g]`` (bit for bit: a copy).

    Source
    ------
    torchao ``pack_tinygemm_scales_and_zeros(scales, zeros, dtype=torch.bfloat16)``:
    ``cat([scales[..., None], zeros[..., None]], -1).transpose(-3, -2)``.

    Encoding
    --------
    ``scales``, ``zeros``: bfloat16 (float32 carriers of bfloat16 values) ``[..., N, G]`` with
    ``G = K / group_size``; the result is bfloat16 ``[..., G, N, 2]`` (leading dims, e.g. the
    experts of an MoE weight, kept).

    Raises ``TypeError`` unless both are float32 arrays of bfloat16 values, ``ValueError`` unless
    they have the same shape of at least 2 dimensions.
    """
    for name, value in (("scales", scales), ("zeros", zeros)):
        _check_bfloat16(name, value, min_ndim=2)
    if scales.shape != zeros.shape:
        raise ValueError(
            f"Got scales.shape={scales.shape} and zeros.shape={zeros.shape}, but they must be the same [..., N, G]"
        )
    pairs = np.stack([scales, zeros], axis=-1)
    return {"scales_and_zeros": np.ascontiguousarray(np.swapaxes(pairs, -3, -2))}


def tinygemm_unpack_scales_and_zeros(scales_and_zeros: np.ndarray) -> dict[str, np.ndarray]:
    """Split a tinygemm ``scales_and_zeros`` tensor back into scales and zeros: the inverse of
    ``tinygemm_scales_and_zeros``.

    Contract
    --------
    ``int4.tinygemm_unpack_scales_and_zeros``: ``scales[..., n, g] = scales_and_zeros[..., g, n, 0]``,
    ``zeros[..., n, g] = scales_and_zeros[..., g, n, 1]``.

    Source
    ------
    torchao ``unpack_tinygemm_scales_and_zeros``: ``transpose(-3, -2)`` then split the last axis.

    Encoding
    --------
    bfloat16 ``[..., G, N, 2]`` in; bfloat16 ``scales`` and ``zeros`` ``[..., N, G]`` out.

    Raises ``TypeError`` unless ``scales_and_zeros`` is a float32 array of bfloat16 values,
    ``ValueError`` unless it has at least 3 dimensions and a last dimension of 2.
    """
    _check_bfloat16("scales_and_zeros", scales_and_zeros, min_ndim=3)
    if scales_and_zeros.shape[-1] != 2:
        raise ValueError(
            f"Got scales_and_zeros.shape={scales_and_zeros.shape}, but its last dimension must be 2 (scale, zero)"
        )
    per_row = np.swapaxes(scales_and_zeros, -3, -2)
    return {"scales": np.ascontiguousarray(per_row[..., 0]), "zeros": np.ascontiguousarray(per_row[..., 1])}


def tinygemm_dequant(
    packed: np.ndarray, scales_and_zeros: np.ndarray, *, inner_k_tiles: int, group_size: int, rounding: str = "fma"
) -> dict[str, np.ndarray]:
    """Dequantize a tinygemm-packed int4 weight to bfloat16 ``[N8, K]``.

    Contract
    --------
    ``int4.tinygemm_dequant``: with ``q = tinygemm_unpack(packed)``, ``s = scales_and_zeros[k // gs, n, 0]``
    and ``z = scales_and_zeros[k // gs, n, 1]``:

    - ``rounding="fma"``: ``w[n, k] = bf16((q - 8) * s + z)``, the exact value rounded once to
      nearest even (the kernel's ``fma.rn.bf16x2``);
    - ``rounding="mul_add"``: ``w[n, k] = bf16(bf16((q - 8) * s) + z)``, two roundings (torchao's
      Python dequant; ``(q - 8) * s`` is exact in float32, and the bfloat16 add is a float32 add
      rounded once more, as torch computes it).

    Source
    ------
    ``int4mm.cu`` ``BLayout_TC_int4::load`` (``__hfma2``), torchao ``dequantize_tensor_core_tiled_layout``
    (pytorch/ao#415, its tests pin it to ``_weight_int4pack_mm(eye(K), ...)`` exactly) and
    ``_dequantize_affine_tinygemm``.

    Kernel order
    ------------
    The exact ``(q - 8) * s + z`` is not a float64 in general (the exponents of the two terms can
    be 260 apart), and rounding float64 to bfloat16 could round twice.  ``p = (q - 8) * s`` is exact
    in float64; ``r = p + z`` rounds to float64, and TwoSum gives its exact error ``e``; where
    ``e != 0`` and ``r`` has an even last bit, ``r`` moves one float64 ulp toward ``e`` (rounding to
    odd).  Rounding to odd at 53 bits and then to nearest at 8 bits equals rounding the exact
    value once (Boldo & Melquiond, IEEE TC 57(4), 2008; 53 >= 8 + 2).

    Encoding
    --------
    ``packed``: int32 ``[NT, KT, 32, ikt/2]``; ``scales_and_zeros``: bfloat16 ``[K/gs, 8*NT, 2]``
    (float32 carriers of bfloat16 values); ``w``: bfloat16 ``[8*NT, K]`` (float32 carrier).

    Edge cases
    ----------
    IEEE single-rounding results: overflow gives ±Inf, subnormals are kept, ``0 * Inf`` and
    ``Inf - Inf`` give NaN (the spec compares NaN as NaN, any payload), exact zeros take the IEEE
    sign of ``p + z`` (``-0`` only when both are ``-0``).

    Raises ``ValueError`` for ``inner_k_tiles`` or ``group_size`` outside their sets, ``K`` not a
    multiple of ``group_size``, an unknown ``rounding`` or a ``scales_and_zeros`` of another shape;
    ``TypeError`` for a ``packed`` that is not int32 or ``scales_and_zeros`` that is not bfloat16.
    """
    check_choice("inner_k_tiles", inner_k_tiles, INNER_K_TILES)
    check_choice("group_size", group_size, GROUP_SIZES)
    check_choice("rounding", rounding, DEQUANT_ROUNDINGS)
    _check_packed(packed, inner_k_tiles)
    n8, k = packed.shape[0] * 8, packed.shape[1] * inner_k_tiles * 16
    _check_scales_and_zeros(scales_and_zeros, n8, k, group_size)
    q = tinygemm_unpack(packed, inner_k_tiles=inner_k_tiles)["q"]
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises the invalid flag; it stays NaN
        scale = np.repeat(scales_and_zeros[..., 0].T, group_size, axis=1).astype(np.float64)
        zero = np.repeat(scales_and_zeros[..., 1].T, group_size, axis=1).astype(np.float64)
        product = (q - 8).astype(np.float64) * scale  # at most 4 + 8 significant bits: exact
    if rounding == "mul_add":
        rounded_product = bfloat16_from_float64(product)
        with np.errstate(invalid="ignore"):
            total = rounded_product + zero.astype(np.float32)
        return {"w": to_dtype(total, "bfloat16")}
    return {"w": bfloat16_from_float64(_sum_rounded_to_odd(product, zero))}


def tinygemm_mm(
    a: np.ndarray, packed: np.ndarray, scales_and_zeros: np.ndarray, *, inner_k_tiles: int, group_size: int
) -> dict[str, np.ndarray]:
    """``a @ dequant(packed).T`` in bfloat16: the product ``_weight_int4pack_mm`` computes.

    Contract
    --------
    ``int4.tinygemm_mm``: ``out = bf16(a @ w.T)`` with ``w = tinygemm_dequant(..., rounding="fma")``,
    the sum taken in float64 (each product of two bfloat16 values is exact; the float64 sum of
    ``K`` terms is off by at most ``K * 2**-53`` of ``sum |a * w|``) and rounded once to bfloat16.
    The kernel accumulates in float32 in its own order, so the spec compares within a tolerance.

    Source
    ------
    ``torch.ops.aten._weight_int4pack_mm(a, packed, group_size, scales_and_zeros)`` (``int4mm.cu``).

    Encoding
    --------
    ``a``: bfloat16 ``[M, K]`` (float32 carrier); ``packed`` and ``scales_and_zeros`` as in
    ``tinygemm_dequant``; ``out``: bfloat16 ``[M, 8*NT]``.

    Raises as ``tinygemm_dequant``, and ``TypeError``/``ValueError`` unless ``a`` is a 2-D array
    of bfloat16 values with ``K`` columns.
    """
    w = tinygemm_dequant(packed, scales_and_zeros, inner_k_tiles=inner_k_tiles, group_size=group_size)["w"]
    _check_bfloat16("a", a, min_ndim=2)
    if a.ndim != 2 or a.shape[1] != w.shape[1]:
        raise ValueError(f"Got a.shape={a.shape}, but a must be [M, K] with K={w.shape[1]} (the packed weight's K)")
    return {"out": bfloat16_from_float64(a.astype(np.float64) @ w.astype(np.float64).T)}


# -- helpers ----------------------------------------------------------------------------------
def _lane_coordinates(n_tiles: int, k_tiles: int, inner_k_tiles: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` and ``kb`` of every packed word, as arrays that broadcast to ``[NT, KT, 32, ikt/2]``."""
    nt = np.arange(n_tiles).reshape(-1, 1, 1, 1)
    kt = np.arange(k_tiles).reshape(1, -1, 1, 1)
    t = np.arange(32).reshape(1, 1, -1, 1)
    j = np.arange(inner_k_tiles // 2).reshape(1, 1, 1, -1)
    n = np.broadcast_to(nt * 8 + t // 4, (n_tiles, k_tiles, 32, inner_k_tiles // 2))
    kb = np.broadcast_to((kt * inner_k_tiles + 2 * j) * 16 + 2 * (t % 4), n.shape)
    return n, kb


def _sum_rounded_to_odd(p: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``p + z`` rounded to odd in float64 (TwoSum's exact error decides the direction)."""
    with np.errstate(invalid="ignore"):
        r = p + z
        z_part = r - p
        error = (p - (r - z_part)) + (z - z_part)
        even = (r.view(np.uint64) & 1) == 0
        inexact = np.isfinite(r) & (error != 0) & even
        toward = np.where(error > 0, np.inf, -np.inf)
    return np.where(inexact, np.nextafter(r, toward), r)


def _weight(q: np.ndarray | None, q_uint8: np.ndarray | None, input_form: str) -> np.ndarray:
    """The weight as uint32 values ``[N, K]``, from the input of ``input_form``."""
    given, other = ("q", "q_uint8") if input_form == "int32" else ("q_uint8", "q")
    chosen, unwanted = (q, q_uint8) if input_form == "int32" else (q_uint8, q)
    if chosen is None or unwanted is not None:
        raise ValueError(f"Got input_form={input_form!r}, so pass the weight as {given}= (and not {other}=)")
    if input_form == "int32":
        check_array("q", q, (np.int32,), min_ndim=2)
        _check_2d("q", chosen)
        bad = (chosen < 0) | (chosen > 15)
        if bad.any():
            index = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ValueError(f"Got q[{index[0]}, {index[1]}]={int(chosen[index])}, but q must hold values 0..15")
        return chosen.astype(np.uint32)
    check_array("q_uint8", chosen, (np.uint8,), min_ndim=2)
    _check_2d("q_uint8", chosen)
    nibbles = np.stack([chosen >> 4, chosen & 0xF], axis=-1)  # high nibble = even k
    return nibbles.reshape(chosen.shape[0], 2 * chosen.shape[1]).astype(np.uint32)


def _check_2d(name: str, value: np.ndarray) -> None:
    if value.ndim != 2:
        raise ValueError(f"Got {name}.shape={value.shape}, but {name} must be 2-D [N, K]")


def _check_k(k: int, inner_k_tiles: int) -> None:
    if k % (inner_k_tiles * 16):
        raise ValueError(
            f"Got K={k}, but K must be a multiple of inner_k_tiles * 16 = {inner_k_tiles * 16} "
            f"(inner_k_tiles={inner_k_tiles})"
        )


def _check_packed(packed: np.ndarray, inner_k_tiles: int) -> None:
    check_array("packed", packed, (np.int32,), min_ndim=0)
    if packed.ndim != 4 or packed.shape[2:] != (32, inner_k_tiles // 2):
        raise ValueError(
            f"Got packed.shape={packed.shape}, but packed must be [N/8, K/(inner_k_tiles*16), 32, inner_k_tiles/2] "
            f"= [NT, KT, 32, {inner_k_tiles // 2}] for inner_k_tiles={inner_k_tiles}"
        )


def _check_bfloat16(name: str, value: np.ndarray, *, min_ndim: int) -> None:
    """``TypeError`` unless ``value`` holds bfloat16 values (in a float32 carrier)."""
    if not isinstance(value, np.ndarray) or value.dtype != np.float32 or not is_dtype_value(value, "bfloat16").all():
        got = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise TypeError(f"Got {name} of dtype {got} with values that are not bfloat16, but {name} must be bfloat16")
    if value.ndim < min_ndim:
        raise ValueError(f"Got {name}.shape={value.shape}, but {name} must have at least {min_ndim} dimensions")


def _check_scales_and_zeros(scales_and_zeros: np.ndarray, n8: int, k: int, group_size: int) -> None:
    if k % group_size:
        raise ValueError(f"Got K={k} and group_size={group_size}, but group_size must divide K")
    _check_bfloat16("scales_and_zeros", scales_and_zeros, min_ndim=0)
    expected = (k // group_size, n8, 2)
    if scales_and_zeros.shape != expected:
        raise ValueError(
            f"Got scales_and_zeros.shape={scales_and_zeros.shape}, but it must be [K/group_size, N, 2] = "
            f"{list(expected)} for K={k}, N={n8}, group_size={group_size}"
        )
