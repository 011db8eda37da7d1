"""tinygemm int4 weights (contracts ``int4.*``): Triton kernels for CUDA and torch paths for the rest.

Contracts
---------
- ``int4.tinygemm_pack`` (:func:`tinygemm_pack`): int32 ``[N, K]`` values 0..15, or uint8 ``[N, K/2]``
  (even ``k`` in the high nibble), to torch's tensor-core tiled layout.
- ``int4.tinygemm_unpack`` (:func:`tinygemm_unpack`): the inverse, int32 ``[8*NT, K]``.
- ``int4.tinygemm_scales_and_zeros`` / ``int4.tinygemm_unpack_scales_and_zeros``: the
  ``[..., N, G]`` <-> ``[..., G, N, 2]`` bfloat16 interleave (torch copies; no kernel).
- ``int4.tinygemm_dequant`` (:func:`tinygemm_dequant`): fused unpack + ``(q - 8) * scale + zero`` to
  bfloat16, one rounding (``fma``) or two (``mul_add``).
- ``int4.tinygemm_mm`` (:func:`tinygemm_mm`): the dequantized weight times ``a`` (float64 matmul).
Specs: ``specs/int4/*.yaml``.

The layout
----------
``packed`` is int32 ``[NT, KT, 32, H]`` with ``H = ikt / 2`` (``ikt = inner_k_tiles`` in 2, 4, 8).  The
weight element ``(n, k)`` is nibble ``i`` of word ``[n // 8, k // (16*ikt), 4*(n % 8) + c, j]`` where,
writing ``k = 16*ikt*kt + 32*j + 8*m + 2*c + odd`` (``m, c < 4``, ``odd < 2``), ``i = 4*odd + m``: the
lanes ``t = 4*r + c`` of an mma ``m16n8k16`` B fragment hold, per 32 ``k``, the pairs ``(k, k+1)`` at
``2c``, ``2c + 8``, ``2c + 16``, ``2c + 24`` -- even ``k`` in nibbles 0-3, their odd partners in 4-7 (the
order ``convert_i4x8_to_bf16x2x4`` in ``int4mm.cu`` unpacks: nibbles ``i`` and ``i + 4`` form one
bfloat16x2).  So one ``(nt, kt)`` block of ``32*H`` words is contiguous and covers rows ``8*nt .. 8*nt+7``
times ``16*ikt`` columns; rows past ``N`` are zero.  The torch paths are a reshape of the weight to
``[NT, 8, KT, H, 4, 4, 2]`` (axes ``nt, r, kt, j, m, c, odd``) and a permute to
``[NT, KT, 8, 4, H, 2, 4]`` (``nt, kt, r, c, j, odd, m``); the kernels compute the same index map.


The kernels
-----------
Unpack and dequant are one kernel, ``_tile_kernel`` (MODE 0: int32 values; 1-3: bfloat16 by one of the
dequant formulas), launched over ``(NT, KT / BLOCK_KT)``: the 8 rows of one n-tile times ``BLOCK_KT``
super-tiles.  A *piece* is column ``j`` of the four words ``c`` of one row ``r`` of a block ``(nt,
kt)``: the 32 weights ``32*j .. 32*j + 31`` of that row's ``16*ikt``, which the output holds
contiguously.  Read as pairs of weights ``(k, k + 1)`` (int64 for int32 values, one int32 for a
bfloat16x2), a piece is 16 consecutive pairs ``4*m + c``, and pair ``(m, c)`` is word ``c`` shifted right
by ``4*m``: the even weight in bits 0-3, the odd one in bits 16-19.  So no data moves between threads:
a thread that holds the words ``c`` of a piece writes their pairs for one ``m`` as one 16-byte store.

The tile is 2-D, ``[lines, pairs]``: one line per 16-byte store (4 bfloat16x2 pairs ``c``, or 2 int64
pairs and ``c // 2`` in the line), lines ordered ``(kt, r, j descending, m, c // 2)``, fastest last;
``M_LANES`` lines share a piece (its ``m``), the rest of ``m`` is a static loop.  With ``M_LANES = 4``
at ``inner_k_tiles = 8`` the 32 lines of a warp store the 256 contiguous bytes of two rows of one
super-tile (bfloat16) or the 512 of one row (int32), whole 128-byte lines, and load the words of
those pieces (the lines of one piece the same 4-byte words; one line per load).  No load address
ascends along the lines (``j`` descends, ``m`` is not in the address), so Triton's coalescing gives
the loads one element per thread along the lines and the stores the same lines: the layout change
between them stays in registers.  Compiled for sm_90 by Triton 3.6 and 3.9, no ``inner_k_tiles``
uses shared memory with ``M_LANES`` 2 or 4 (with 1, ``inner_k_tiles = 2`` does; so did earlier
versions of this kernel that ordered the piece axes otherwise, in one Triton or the other).  At
``inner_k_tiles = 8`` with 512 lines, ``M_LANES = 4`` and four warps, the dequant takes 20 4-byte loads
and 4 16-byte stores per thread; the previous kernel gathered one word
and one scale per weight (64 loads per 32 weights) and transposed its result through shared memory.
The tiling was chosen from that analysis; its GPU timing against the alternatives (lines, ``M_LANES``,
warps) is open (issue #5).

Exact single-rounding FMA
-------------------------
``w = (q - 8) * s + z`` must be rounded once to bfloat16.  A float32 FMA followed by a rounding to
bfloat16 can round twice: ``3 * 1.0078125 = 3.0234375`` is a bfloat16 midpoint, and ``- 2**-30``
puts the exact value below it (bfloat16 3.015625), but the float32 result is the midpoint itself,
which ties to even (3.03125).  Compiled for CUDA, the kernel runs tinygemm's own instruction
sequence in inline PTX on a pair of weights (``& 0x000F000F | 0x43004300`` makes the bfloat16x2
``128 + q``, ``fma(x, 1, -136)`` gives ``q - 8``, ``fma.rn.bf16x2`` rounds once: exact by construction;
at sm_90 one ``LOP3`` and two ``HFMA2.BF16_V2`` per pair); in Triton's interpreter, and wherever asked
(the GPU tests and benchmarks run both), it emulates the exact FMA in float32 (about 46 instructions):

1. scale ``s`` and ``z`` by ``2**-4`` (exact: bfloat16 values are 8-bit significands at or above
   ``2**-133``, so ``2**-137`` is still on the float32 grid) so that ``p = (q - 8) * s / 16`` can
   neither overflow (``8 * bfloat16 max / 16 < 2**128``) nor round (12 significant bits);
2. ``r = p + z/16`` (float32) and its exact error ``e`` (TwoSum: six additions; exact without
   overflow, and exact sums in the subnormal range give ``e = 0``);
3. ``v = 16 * r`` (exact) is the float32 rounding of the exact value.  Rounding ``v`` to bfloat16 is
   wrong only where ``v`` sits exactly on a bfloat16 midpoint (low 16 bits ``0x8000``) and ``e != 0``:
   a float32 rounding cannot cross a midpoint (midpoints are float32 values), only land on one.
   There ``v`` moves one float32 ulp toward the exact value (``+1`` on the bit pattern if ``e`` has the
   sign of ``r``, else ``-1``), which then rounds the right way;
4. round the float32 bits to bfloat16, nearest even (``(b + 0x7FFF + ((b >> 16) & 1)) >> 16``; a
   carry into the exponent gives Inf; NaN gives 0x7FC0).

The GPU tests check both against ``_weight_int4pack_mm`` of an identity matrix, bit for bit; CI checks
the emulation (interpreter) against the NumPy reference, whose single rounding comes from a
round-to-odd float64 sum instead.  The kernels are launched with ``enable_fp_fusion=False``, although
contraction would be harmless: every product a compiler could fuse into an FMA is exact.

Paths
-----
As ``fast.cast``: ``QCONFORM_FAST_PATH`` = ``auto`` (Triton on CUDA), ``triton`` (CPU tensors need
``TRITON_INTERPRET=1``) or ``torch``.  The scales-and-zeros copies and ``tinygemm_mm``'s matmul are torch
ops on every path.  This module imports without Triton and queries no device at import time.
"""

from __future__ import annotations

import os

import torch

from fast._checks import check_choice
from fast._triton import PATH_ENV, device, jit, selected_path, tl, triton

__all__ = [
    "DEQUANT_ROUNDINGS",
    "GROUP_SIZES",
    "INNER_K_TILES",
    "INPUT_FORMS",
    "bench",
    "tinygemm_dequant",
    "tinygemm_mm",
    "tinygemm_pack",
    "tinygemm_scales_and_zeros",
    "tinygemm_unpack",
    "tinygemm_unpack_scales_and_zeros",
]

INNER_K_TILES: tuple[int, ...] = (2, 4, 8)
GROUP_SIZES: tuple[int, ...] = (32, 64, 128, 256)
INPUT_FORMS: tuple[str, ...] = ("int32", "uint8")
DEQUANT_ROUNDINGS: tuple[str, ...] = ("fma", "mul_add")

_MODES = {"unpack": 0, "fma": 1, "mul_add": 2, "fma_hardware": 3}
"""What the tile kernel writes: the int32 values, or bfloat16 by one of three dequant formulas."""


# %% Compute kernels


@device
def _bf16_bits(bits):
    """float32 bit patterns (int32) rounded to bfloat16 bit patterns (int32 in 0..0xFFFF), nearest even."""
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return tl.where((bits & 0x7FFFFFFF) > 0x7F800000, 0x7FC0, rounded)


@device
def _fma_bf16_bits(kf, s, z):
    """Bits of ``kf * s + z`` rounded once to bfloat16 (module docstring: scaled TwoSum, midpoint fix)."""
    s16 = s * 0.0625
    z16 = z * 0.0625
    p = kf * s16
    r = p + z16
    z_part = r - p
    p_part = r - z_part
    error = (p - p_part) + (z16 - z_part)
    bits = (r * 16.0).to(tl.int32, bitcast=True)
    fix = ((bits & 0xFFFF) == 0x8000) & ((bits & 0x7F800000) != 0x7F800000) & (error != 0.0)
    toward = tl.where((error > 0.0) == (r > 0.0), 1, -1)
    return _bf16_bits(tl.where(fix, bits + toward, bits))


@device
def _mul_add_bf16_bits(kf, s, z):
    """Bits of ``bf16(bf16(kf * s) + z)``: the product is exact in float32, the sum a float32 add."""
    product = (_bf16_bits((kf * s).to(tl.int32, bitcast=True)) << 16).to(tl.float32, bitcast=True)
    return _bf16_bits((product + z).to(tl.int32, bitcast=True))


_DEQUANT_ASM_TEXT = """
{
.reg .b32 q2, v2, one2, bias2;
mov.b32 one2, 0x3F803F80;
mov.b32 bias2, 0xC308C308;
and.b32 q2, $1, 0x000F000F;
or.b32 q2, q2, 0x43004300;
fma.rn.bf16x2 v2, q2, one2, bias2;
fma.rn.bf16x2 $0, v2, $2, $3;
}
"""
"""Two weights per call: ``$1`` holds their nibbles in bits 0-3 and 16-19 (other bits ignored), ``$2`` / ``$3``
the scale / zero twice (bfloat16x2); ``$0`` the two bfloat16 results, in the same halves."""
_HARDWARE_DEQUANT_ASM = tl.constexpr(_DEQUANT_ASM_TEXT) if tl is not None else _DEQUANT_ASM_TEXT


def _tile_kernel(
    # pointers
    packed_ptr,
    sz_ptr,
    out_ptr,
    # sizes
    n_rows,
    k_tiles,
    # layout, what to write, tiling
    INNER_K_TILES: tl.constexpr,
    GROUP_SIZE: tl.constexpr,
    MODE: tl.constexpr,
    WIDE: tl.constexpr,
    BLOCK_KT: tl.constexpr,
    M_LANES: tl.constexpr,
):
    """n-tile ``program_id(0)``, super-tiles ``BLOCK_KT * program_id(1)`` + ``0 .. BLOCK_KT - 1`` of the unpacked
    (MODE 0) or dequantized (MODE 1-3) weight (module docstring, "The kernels").

    ``out_ptr`` is the output read as pairs of weights ``(k, k + 1)``: int64 (MODE 0) or int32 (bfloat16x2).
    """
    H: tl.constexpr = INNER_K_TILES // 2
    PAIRS: tl.constexpr = 2 if MODE == 0 else 4  # pairs per 16-byte store
    SPLIT: tl.constexpr = 4 // PAIRS
    # One line per 16-byte store; line = ((((kt, r), j descending), lane), c // PAIRS), fastest last.
    line = tl.arange(0, BLOCK_KT * 8 * H * M_LANES * SPLIT)
    nt = tl.program_id(0)
    if WIDE:
        line, nt = line.to(tl.int64), nt.to(tl.int64)
    lane = (line // SPLIT) % M_LANES
    j = H - 1 - (line // (SPLIT * M_LANES)) % H
    r = (line // (SPLIT * M_LANES * H)) % 8
    kt = tl.program_id(1) * BLOCK_KT + line // (SPLIT * M_LANES * H * 8)
    valid = (kt < k_tiles)[:, None]
    chunk = (nt * k_tiles + kt) * 8 + r  # the row's block of 4 * H words
    n = nt * 8 + r
    first = (n * (k_tiles * 16 * H) + kt * (16 * H) + 16 * j)[:, None]  # the piece's first pair in out_ptr
    c = (line % SPLIT)[:, None] * PAIRS + tl.arange(0, PAIRS)[None, :]
    words = tl.load(packed_ptr + (chunk * (4 * H) + j)[:, None] + c * H, mask=valid, other=0)
    if MODE != 0:
        # scales_and_zeros [K / gs, n_rows, 2] bfloat16 as int32 (scale low, zero high): one per piece.
        group = (kt * (32 * H) + 32 * j) // GROUP_SIZE
        pair = tl.load(sz_ptr + (group * n_rows + n)[:, None], mask=valid, other=0)
        if MODE == 3:
            scale2 = (pair & 0xFFFF) | (pair << 16)
            zero2 = (pair & -65536) | ((pair >> 16) & 0xFFFF)
        else:
            s = (pair << 16).to(tl.float32, bitcast=True)
            z = (pair & -65536).to(tl.float32, bitcast=True)
    for step in tl.static_range(4 // M_LANES):
        m = (step * M_LANES + lane)[:, None]
        both = words >> (4 * m)  # pair (32 j + 8 m + 2 c, + 1) in bits 0-3 and 16-19
        if MODE == 0:
            value = (both & 0xF).to(tl.int64) | (((both >> 16) & 0xF).to(tl.int64) << 32)
        elif MODE == 3:  # tinygemm's own instructions on the bfloat16x2 pair (module docstring)
            value = tl.inline_asm_elementwise(
                _HARDWARE_DEQUANT_ASM, "=r,r,r,r", [both, scale2, zero2], dtype=tl.int32, is_pure=True, pack=1
            )
        else:
            even = ((both & 0xF) - 8).to(tl.float32)
            odd = (((both >> 16) & 0xF) - 8).to(tl.float32)
            if MODE == 1:
                value = _fma_bf16_bits(even, s, z) | (_fma_bf16_bits(odd, s, z) << 16)
            else:
                value = _mul_add_bf16_bits(even, s, z) | (_mul_add_bf16_bits(odd, s, z) << 16)
        tl.store(out_ptr + first + 4 * m + c, value, mask=valid)


def _pack_kernel(
    # pointers
    src_ptr,
    out_ptr,
    # sizes
    n_rows,
    src_cols,
    n_tiles,
    k_tiles,
    # layout, input form, tiling
    INNER_K_TILES: tl.constexpr,
    UINT8: tl.constexpr,
    WIDE: tl.constexpr,
    BLOCK_NT: tl.constexpr,
):
    """The words of ``BLOCK_NT`` n-tiles of super-tile ``program_id(1)``: ``[BLOCK_NT, 32 * H]``."""
    H: tl.constexpr = INNER_K_TILES // 2
    nt = tl.program_id(0) * BLOCK_NT + tl.arange(0, BLOCK_NT)[:, None]
    kt = tl.program_id(1)
    lane_word = tl.arange(0, 32 * H)[None, :]  # t * H + j
    t = lane_word // H
    j = lane_word % H
    n = nt * 8 + t // 4
    if WIDE:
        n = n.to(tl.int64)
    valid = n < n_rows
    kb = (kt * INNER_K_TILES + 2 * j) * 16 + 2 * (t % 4)
    word = t * 0  # int32 zeros; broadcast against [BLOCK_NT, 32 * H] below (tl.zeros is a jit helper)
    for m in tl.static_range(4):
        # nibble m holds k = kb + 8m (even), nibble m + 4 its odd partner k + 1
        if UINT8:
            byte = tl.load(src_ptr + n * src_cols + (kb + 8 * m) // 2, mask=valid, other=0).to(tl.int32)
            word = word | ((byte >> 4) << (4 * m)) | ((byte & 0xF) << (4 * m + 16))
        else:
            even = tl.load(src_ptr + n * src_cols + kb + 8 * m, mask=valid, other=0)
            odd = tl.load(src_ptr + n * src_cols + kb + 8 * m + 1, mask=valid, other=0)
            word = word | ((even & 0xF) << (4 * m)) | ((odd & 0xF) << (4 * m + 16))
    offsets = (nt * k_tiles + kt) * (32 * H) + lane_word
    if WIDE:
        offsets = offsets.to(tl.int64)
    tl.store(out_ptr + offsets, word, mask=nt < n_tiles)


# %% Launchers

_BLOCK_LINES = 512
_M_LANES = 4
_NUM_WARPS = 4
"""Tiling of the unpack / dequant kernel: lines (16-byte stores) per program, lines per piece, warps (module
docstring).  ``BLOCK_KT`` follows from the lines: a super-tile has ``8 * H * M_LANES`` lines (twice as many for
the unpack)."""
_BLOCK_NT = 8
"""n-tiles per program of the pack kernel: 8 x 32*H words."""
_INT32_LIMIT = 1 << 31


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _tile_triton(
    packed: torch.Tensor,
    scales_and_zeros: torch.Tensor | None,
    out: torch.Tensor,
    inner_k_tiles: int,
    group_size: int,
    mode: str,
    tiling: tuple[int, int, int] = (_BLOCK_LINES, _M_LANES, _NUM_WARPS),
) -> None:
    """Fill ``out`` ([8*NT, K], int32 or bfloat16) from ``packed`` with the tile kernel."""
    n_tiles, k_tiles = packed.shape[:2]
    if out.numel() == 0:
        return
    block_lines, m_lanes, num_warps = tiling
    lines_per_super_tile = 8 * (inner_k_tiles // 2) * m_lanes * (2 if mode == "unpack" else 1)
    block_kt = min(max(block_lines // lines_per_super_tile, 1), triton.next_power_of_2(k_tiles))
    jit(_tile_kernel)[(n_tiles, triton.cdiv(k_tiles, block_kt))](
        packed,
        packed if scales_and_zeros is None else scales_and_zeros.view(torch.int32),
        out.view(torch.int64 if mode == "unpack" else torch.int32),
        out.shape[0],
        k_tiles,
        INNER_K_TILES=inner_k_tiles,
        GROUP_SIZE=group_size,
        MODE=_MODES[mode],
        WIDE=out.numel() >= _INT32_LIMIT,
        BLOCK_KT=block_kt,
        M_LANES=m_lanes,
        num_warps=num_warps,
        enable_fp_fusion=False,  # the float32 emulation is written op by op (and Triton 3.9 warns when unset)
    )


def _pack_triton(source: torch.Tensor, out: torch.Tensor, inner_k_tiles: int) -> None:
    """Fill ``out`` ([NT, KT, 32, H] int32) from the int32 or uint8 weight ``source``."""
    n_tiles, k_tiles = out.shape[:2]
    if out.numel() == 0:
        return
    kernel = jit(_pack_kernel)
    grid = (triton.cdiv(n_tiles, _BLOCK_NT), k_tiles)
    kernel[grid](
        source,
        out,
        source.shape[0],
        source.shape[1],
        n_tiles,
        k_tiles,
        INNER_K_TILES=inner_k_tiles,
        UINT8=source.dtype == torch.uint8,
        WIDE=max(source.numel(), out.numel()) >= _INT32_LIMIT,
        BLOCK_NT=_BLOCK_NT,
        num_warps=_NUM_WARPS,
        enable_fp_fusion=False,
    )


# %% Torch paths

_TO_TILES = (0, 2, 1, 5, 3, 6, 4)
"""[NT, 8, KT, H, 4, 4, 2] (nt, r, kt, j, m, c, odd) -> [NT, KT, 8, 4, H, 2, 4] (nt, kt, r, c, j, odd, m)."""
_FROM_TILES = (0, 2, 1, 4, 6, 3, 5)
"""The inverse permutation."""


def _pack_torch(q: torch.Tensor, inner_k_tiles: int) -> torch.Tensor:
    """int32 words from int32 values ``q`` [N, K] (0..15) by reshape and permute."""
    rows, k = q.shape
    h, n_tiles, k_tiles = inner_k_tiles // 2, -(-rows // 8), k // (16 * inner_k_tiles)
    padded = torch.zeros((n_tiles * 8, k), dtype=torch.int64, device=q.device)
    padded[:rows] = q
    nibbles = padded.view(n_tiles, 8, k_tiles, h, 4, 4, 2).permute(_TO_TILES).reshape(n_tiles, k_tiles, 32, h, 8)
    shifts = torch.arange(0, 32, 4, device=q.device, dtype=torch.int64)
    words = (nibbles << shifts).sum(dim=-1)
    return torch.where(words >= _INT32_LIMIT, words - (1 << 32), words).to(torch.int32)


def _unpack_torch(packed: torch.Tensor, inner_k_tiles: int) -> torch.Tensor:
    """int32 values [8*NT, K] from the words, by the inverse permute."""
    n_tiles, k_tiles, _, h = packed.shape
    shifts = torch.arange(0, 32, 4, device=packed.device, dtype=torch.int32)
    nibbles = (packed.unsqueeze(-1) >> shifts) & 0xF
    tiles = nibbles.view(n_tiles, k_tiles, 8, 4, h, 2, 4).permute(_FROM_TILES)
    return tiles.reshape(n_tiles * 8, k_tiles * 16 * inner_k_tiles).contiguous()


def _bf16_bits_torch(bits: torch.Tensor) -> torch.Tensor:
    """int32 float32 patterns -> int32 bfloat16 patterns, nearest even (NaN -> 0x7FC0)."""
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
    return torch.where((bits & 0x7FFFFFFF) > 0x7F800000, 0x7FC0, rounded)


def _as_float(bits: torch.Tensor) -> torch.Tensor:
    return bits.view(torch.float32)


def _dequant_torch(
    packed: torch.Tensor, scales_and_zeros: torch.Tensor, inner_k_tiles: int, group_size: int, rounding: str
) -> torch.Tensor:
    """The kernel's arithmetic with torch ops (float32, integer bit patterns)."""
    kf = (_unpack_torch(packed, inner_k_tiles) - 8).to(torch.float32)
    pairs = scales_and_zeros.view(torch.int32)[..., 0].t().repeat_interleave(group_size, dim=1)  # [N8, K]
    s, z = _as_float(pairs << 16), _as_float(pairs & -65536)
    if rounding == "mul_add":
        product = _as_float(_bf16_bits_torch((kf * s).view(torch.int32)) << 16)
        bits = _bf16_bits_torch((product + z).view(torch.int32))
    else:
        s16, z16 = s * 0.0625, z * 0.0625
        p = kf * s16
        r = p + z16
        z_part = r - p
        error = (p - (r - z_part)) + (z16 - z_part)
        raw = (r * 16.0).view(torch.int32)
        fix = ((raw & 0xFFFF) == 0x8000) & ((raw & 0x7F800000) != 0x7F800000) & (error != 0)
        toward = torch.where((error > 0) == (r > 0), 1, -1).to(torch.int32)
        bits = _bf16_bits_torch(torch.where(fix, raw + toward, raw))
    return bits.to(torch.int16).view(torch.bfloat16)


# %% Argument checks


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_tensor(name: str, value: object, dtype: torch.dtype) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(value).__name__}, but {name} must be a torch.Tensor")
    if value.dtype != dtype:
        raise TypeError(f"Got {name}.dtype={_dtype_name(value.dtype)}, but {name} must be {_dtype_name(dtype)}")
    return value


def _check_packed(packed: object, inner_k_tiles: int) -> torch.Tensor:
    packed = _check_tensor("packed", packed, torch.int32)
    if packed.dim() != 4 or tuple(packed.shape[2:]) != (32, inner_k_tiles // 2):
        raise ValueError(
            f"Got packed.shape={tuple(packed.shape)}, but packed must be [N/8, K/(inner_k_tiles*16), 32, "
            f"inner_k_tiles/2] = [NT, KT, 32, {inner_k_tiles // 2}] for inner_k_tiles={inner_k_tiles}"
        )
    return packed.contiguous()


def _check_scales_and_zeros(scales_and_zeros: object, n8: int, k: int, group_size: int) -> torch.Tensor:
    if k % group_size:
        raise ValueError(f"Got K={k} and group_size={group_size}, but group_size must divide K")
    sz = _check_tensor("scales_and_zeros", scales_and_zeros, torch.bfloat16)
    expected = (k // group_size, n8, 2)
    if tuple(sz.shape) != expected:
        raise ValueError(
            f"Got scales_and_zeros.shape={tuple(sz.shape)}, but it must be [K/group_size, N, 2] = "
            f"{list(expected)} for K={k}, N={n8}, group_size={group_size}"
        )
    return sz.contiguous()


# %% Public functions


def tinygemm_pack(
    q: torch.Tensor | None = None,
    q_uint8: torch.Tensor | None = None,
    *,
    inner_k_tiles: int,
    input_form: str = "int32",
) -> dict[str, torch.Tensor]:
    """Pack an int4 weight into the tinygemm tensor-core layout (``int4.tinygemm_pack``).

    ``input_form="int32"``: ``q`` int32 ``[N, K]``, values 0..15 (checked).  ``"uint8"``: ``q_uint8``
    uint8 ``[N, K/2]``, byte ``c`` = ``q[n, 2c] << 4 | q[n, 2c+1]`` (torch >= 2.5's input; every byte
    is valid, so nothing is checked).  Returns ``packed`` int32 ``[ceil(N/8), K/(ikt*16), 32, ikt/2]``
    on the weight's device; rows past ``N`` are zero (module docstring).

    Raises ``ValueError`` for ``inner_k_tiles`` not in (2, 4, 8), an unknown ``input_form``, the weight
    missing or passed in the other form, a non-2-D weight, a value outside 0..15, or ``K`` not a
    multiple of ``inner_k_tiles * 16``; ``TypeError`` for a weight of another dtype.
    """
    check_choice("inner_k_tiles", inner_k_tiles, INNER_K_TILES)
    check_choice("input_form", input_form, INPUT_FORMS)
    given, other = ("q", "q_uint8") if input_form == "int32" else ("q_uint8", "q")
    chosen, unwanted = (q, q_uint8) if input_form == "int32" else (q_uint8, q)
    if chosen is None or unwanted is not None:
        raise ValueError(f"Got input_form={input_form!r}, so pass the weight as {given}= (and not {other}=)")
    weight = _check_tensor(given, chosen, torch.int32 if input_form == "int32" else torch.uint8)
    if weight.dim() != 2:
        raise ValueError(f"Got {given}.shape={tuple(weight.shape)}, but {given} must be 2-D [N, K]")
    rows, k = weight.shape[0], weight.shape[1] * (1 if input_form == "int32" else 2)
    if k % (inner_k_tiles * 16):
        raise ValueError(
            f"Got K={k}, but K must be a multiple of inner_k_tiles * 16 = {inner_k_tiles * 16} "
            f"(inner_k_tiles={inner_k_tiles})"
        )
    if input_form == "int32":
        bad = (weight < 0) | (weight > 15)
        if bool(bad.any()):
            n, col = (int(i) for i in bad.nonzero()[0])
            raise ValueError(f"Got q[{n}, {col}]={int(weight[n, col])}, but q must hold values 0..15")
    weight = weight.contiguous()
    n_tiles, k_tiles = -(-rows // 8), k // (16 * inner_k_tiles)
    if selected_path(weight.device) == "triton":
        packed = torch.empty((n_tiles, k_tiles, 32, inner_k_tiles // 2), dtype=torch.int32, device=weight.device)
        _pack_triton(weight, packed, inner_k_tiles)
        return {"packed": packed}
    if input_form == "uint8":
        weight = torch.stack([weight >> 4, weight & 0xF], dim=-1).reshape(rows, k)
    return {"packed": _pack_torch(weight.to(torch.int32), inner_k_tiles)}


def tinygemm_unpack(packed: torch.Tensor, *, inner_k_tiles: int) -> dict[str, torch.Tensor]:
    """Unpack the tinygemm layout to int32 values ``q`` ``[8*NT, K]`` (``int4.tinygemm_unpack``).

    The exact inverse of :func:`tinygemm_pack` (padding rows included); every word is valid.  Raises
    ``ValueError`` for ``inner_k_tiles`` not in (2, 4, 8) or a ``packed`` that is not
    ``[NT, KT, 32, inner_k_tiles/2]``, ``TypeError`` unless ``packed`` is int32.
    """
    check_choice("inner_k_tiles", inner_k_tiles, INNER_K_TILES)
    packed = _check_packed(packed, inner_k_tiles)
    n_tiles, k_tiles = packed.shape[:2]
    if selected_path(packed.device) == "torch":
        return {"q": _unpack_torch(packed, inner_k_tiles)}
    q = torch.empty((8 * n_tiles, 16 * inner_k_tiles * k_tiles), dtype=torch.int32, device=packed.device)
    _tile_triton(packed, None, q, inner_k_tiles, GROUP_SIZES[0], "unpack")
    return {"q": q}


def tinygemm_scales_and_zeros(scales: torch.Tensor, zeros: torch.Tensor) -> dict[str, torch.Tensor]:
    """bfloat16 ``scales``, ``zeros`` ``[..., N, G]`` -> ``scales_and_zeros`` ``[..., G, N, 2]`` (a copy).

    Raises ``TypeError`` unless both are bfloat16 tensors, ``ValueError`` unless they have the same
    shape of at least 2 dimensions.
    """
    for name, value in (("scales", scales), ("zeros", zeros)):
        tensor = _check_tensor(name, value, torch.bfloat16)
        if tensor.dim() < 2:
            raise ValueError(f"Got {name}.shape={tuple(tensor.shape)}, but {name} must have at least 2 dimensions")
    if scales.shape != zeros.shape:
        raise ValueError(
            f"Got scales.shape={tuple(scales.shape)} and zeros.shape={tuple(zeros.shape)}, "
            "but they must be the same [..., N, G]"
        )
    return {"scales_and_zeros": torch.stack([scales, zeros], dim=-1).transpose(-3, -2).contiguous()}


def tinygemm_unpack_scales_and_zeros(scales_and_zeros: torch.Tensor) -> dict[str, torch.Tensor]:
    """bfloat16 ``scales_and_zeros`` ``[..., G, N, 2]`` -> ``scales``, ``zeros`` ``[..., N, G]`` (copies).

    Raises ``TypeError`` unless it is a bfloat16 tensor, ``ValueError`` unless it has at least 3
    dimensions and a last dimension of 2.
    """
    sz = _check_tensor("scales_and_zeros", scales_and_zeros, torch.bfloat16)
    if sz.dim() < 3:
        raise ValueError(f"Got scales_and_zeros.shape={tuple(sz.shape)}, but it must have at least 3 dimensions")
    if sz.shape[-1] != 2:
        raise ValueError(
            f"Got scales_and_zeros.shape={tuple(sz.shape)}, but its last dimension must be 2 (scale, zero)"
        )
    per_row = sz.transpose(-3, -2)
    return {"scales": per_row[..., 0].contiguous(), "zeros": per_row[..., 1].contiguous()}


def tinygemm_dequant(
    packed: torch.Tensor,
    scales_and_zeros: torch.Tensor,
    *,
    inner_k_tiles: int,
    group_size: int,
    rounding: str = "fma",
) -> dict[str, torch.Tensor]:
    """Fused unpack and dequantize to bfloat16 ``w`` ``[8*NT, K]`` (``int4.tinygemm_dequant``).

    ``rounding="fma"``: ``w = bf16((q - 8) * s + z)`` rounded once (the tinygemm kernel; on CUDA the
    kernel uses ``fma.rn.bf16x2`` itself, elsewhere the exact emulation of the module docstring);
    ``"mul_add"``: ``bf16(bf16((q - 8) * s) + z)`` (torchao's Python dequant).  ``s`` and ``z`` are
    ``scales_and_zeros[k // group_size, n]``.

    Raises ``ValueError`` for ``inner_k_tiles`` or ``group_size`` outside their sets, an unknown
    ``rounding``, a ``packed`` of another shape, ``group_size`` not dividing ``K`` or
    ``scales_and_zeros`` not ``[K/group_size, 8*NT, 2]``; ``TypeError`` unless ``packed`` is int32 and
    ``scales_and_zeros`` bfloat16.
    """
    check_choice("inner_k_tiles", inner_k_tiles, INNER_K_TILES)
    check_choice("group_size", group_size, GROUP_SIZES)
    check_choice("rounding", rounding, DEQUANT_ROUNDINGS)
    packed = _check_packed(packed, inner_k_tiles)
    n8, k = 8 * packed.shape[0], packed.shape[1] * 16 * inner_k_tiles
    sz = _check_scales_and_zeros(scales_and_zeros, n8, k, group_size)
    if selected_path(packed.device) == "torch":
        return {"w": _dequant_torch(packed, sz, inner_k_tiles, group_size, rounding)}
    w = torch.empty((n8, k), dtype=torch.bfloat16, device=packed.device)
    hardware = rounding == "fma" and packed.device.type == "cuda" and not _interpreted()
    _tile_triton(packed, sz, w, inner_k_tiles, group_size, "fma_hardware" if hardware else rounding)
    return {"w": w}


def tinygemm_mm(
    a: torch.Tensor, packed: torch.Tensor, scales_and_zeros: torch.Tensor, *, inner_k_tiles: int, group_size: int
) -> dict[str, torch.Tensor]:
    """``a @ w.T`` with ``w`` = :func:`tinygemm_dequant` (``fma``): bfloat16 ``[M, 8*NT]`` (``int4.tinygemm_mm``).

    The product is a float64 matmul of the bfloat16 values (exact products, a float64 sum), rounded
    to float32 and then to bfloat16: within the spec's tolerance on any device, and free of TF32 and
    reduced-precision reductions.  Raises as :func:`tinygemm_dequant`, and ``TypeError`` /
    ``ValueError`` unless ``a`` is a bfloat16 ``[M, K]`` tensor.
    """
    w = tinygemm_dequant(packed, scales_and_zeros, inner_k_tiles=inner_k_tiles, group_size=group_size)["w"]
    a = _check_tensor("a", a, torch.bfloat16)
    if a.dim() != 2 or a.shape[1] != w.shape[1]:
        raise ValueError(
            f"Got a.shape={tuple(a.shape)}, but a must be [M, K] with K={w.shape[1]} (the packed weight's K)"
        )
    return {"out": (a.double() @ w.double().t()).float().to(torch.bfloat16)}


# %% Benchmark


def bench(n: int = 8192, k: int = 8192, *, inner_k_tiles: int = 8, group_size: int = 128) -> dict[str, float]:
    """Median CUDA times (ms) of the Triton unpack, dequant and pack beside torch's pack op and a copy.

    Uses ``triton.testing.do_bench``.  Bytes moved: unpack ``NK/2 + 4NK``; dequant ``NK/2 + 4NK/gs + 2NK``;
    pack (uint8 form) ``NK/2 + NK/2``; the copy reads and writes as many bytes as the dequant output.
    """
    from triton.testing import do_bench

    generator = torch.Generator(device="cuda").manual_seed(0)
    q_uint8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda", generator=generator)
    packed = tinygemm_pack(q_uint8=q_uint8, inner_k_tiles=inner_k_tiles, input_form="uint8")["packed"]
    sz = torch.randn((k // group_size, n, 2), device="cuda", generator=generator).to(torch.bfloat16)
    out, source = (torch.empty((n, k), dtype=torch.bfloat16, device="cuda") for _ in range(2))
    times = {
        "unpack_ms": do_bench(lambda: tinygemm_unpack(packed, inner_k_tiles=inner_k_tiles), return_mode="median"),
        "dequant_ms": do_bench(
            lambda: tinygemm_dequant(packed, sz, inner_k_tiles=inner_k_tiles, group_size=group_size),
            return_mode="median",
        ),
        "pack_ms": do_bench(
            lambda: tinygemm_pack(q_uint8=q_uint8, inner_k_tiles=inner_k_tiles, input_form="uint8"),
            return_mode="median",
        ),
        "torch_pack_ms": do_bench(
            lambda: torch.ops.aten._convert_weight_to_int4pack(q_uint8, inner_k_tiles), return_mode="median"
        ),
        "copy_ms": do_bench(lambda: out.copy_(source), return_mode="median"),
    }
    return times


# %% Check and time


def _main() -> None:
    """Check the kernels against the torch paths on an irregular shape (interpreter on CPU), then time them."""
    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ["TRITON_INTERPRET"] = "1"
    dev = "cuda" if cuda else "cpu"
    generator = torch.Generator().manual_seed(0)
    n, k, ikt, gs = 83, 512, 4, 64
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=generator).to(dev)
    sz = (torch.randn((k // gs, 8 * -(-n // 8), 2), generator=generator) * 0.1).to(torch.bfloat16).to(dev)
    results = {}
    for path in ("triton", "torch"):
        os.environ[PATH_ENV] = path
        packed = tinygemm_pack(q, inner_k_tiles=ikt)["packed"]
        results[path] = (
            packed,
            tinygemm_unpack(packed, inner_k_tiles=ikt)["q"],
            tinygemm_dequant(packed, sz, inner_k_tiles=ikt, group_size=gs)["w"].view(torch.int16),
            tinygemm_dequant(packed, sz, inner_k_tiles=ikt, group_size=gs, rounding="mul_add")["w"].view(torch.int16),
        )
    for name, kernel, torch_path in zip(("pack", "unpack", "fma", "mul_add"), *results.values(), strict=True):
        print(f"{name}: {int((kernel != torch_path).sum())} mismatches of {kernel.numel()}")
    os.environ.pop(PATH_ENV)
    if cuda:
        print(bench())


if __name__ == "__main__":
    _main()
