"""NVFP4 quantization (contract ``quant.nvfp4``): fused Triton kernels for CUDA, torch ops elsewhere.

Contract (``specs/quant/nvfp4.yaml``; the reference is ``reference/quant/nvfp4.py``): ``x [M, K]``
(float32, bfloat16 or float16; ``M`` and ``K`` multiples of 16) gives a rowwise operand ``x`` and a
columnwise operand ``x.T`` (optionally through TE's 16-point random Hadamard transform, rounded to
bfloat16).  Each operand gets an amax (per tensor or per row), a float32 tensor scale, one E4M3 block
scale per 16 elements (1x16 along its rows or 16x16 tiles) and E2M1 codes of ``fl32(v * enc)``, two
per byte, low nibble first.  ``scale_rule`` picks TransformerEngine's or torchao's scale arithmetic.

Layout
------
Rowwise: ``data`` uint8 ``[M, K/2]`` (byte ``[m, j]`` holds elements ``2j`` (low nibble) and ``2j+1``
of row ``m``), ``scales`` uint8 E4M3 ``[M, K/16]`` (compact: no padding, no swizzle; a 16x16 tile's
scale is stored on each of its 16 rows), ``amax`` / ``tensor_scale`` float32 ``[1]`` or ``[M]``.
Columnwise: the same for ``x.T``, i.e. ``columnwise_data [K, M/2]`` (transposed), ``columnwise_scales
[K, M/16]``, ``columnwise_amax`` / ``columnwise_tensor_scale`` ``[1]`` or ``[K]``.  The cuBLAS 128x4
swizzle of the scales is the separate contract ``layout.scale_swizzle``.

Kernels
-------
Two passes over ``x``, the fewest a global amax allows; with ``amax_source="given"`` only the quantize pass runs
(one launch, one read of ``x``: its programs read the caller's amaxes and program 0 copies them into the outputs):

1. ``nvfp4_tensor_amax_kernel`` (``x`` as a flat array) or ``nvfp4_amax_kernel`` (tiles: with RHT, the
   transformed columnwise operand too, or row amaxes): persistent programs keep an elementwise running maximum
   of ``|x|`` with ``max.f32``, which ignores NaN as TE's ``fmaxf`` does (torchao's rules propagate it), reduce
   it once and store its float32 bits per program, which the quantize pass reduces, or ``atomic_max`` them
   (tiles; non-negative floats order like their bits; per row or column, per tile, for the row-scaled
   variant).  The last tiles, 30-45% of L2 (``kept_bytes``), are loaded evict-last and everything else
   evict-first, so that the quantize pass, which starts there, finds them in L2.
2. ``nvfp4_quantize_kernel``: persistent programs over ``[BM, BK]`` tiles of ``x`` (128 x 64 for both
   operands), each tile read once.  The tensor scales come from the amaxes once per program; the
   rowwise part reduces blocks of 16 along ``K``, computes the E4M3 block scales and encode scales,
   rounds ``fl32(v * enc)`` to E2M1 and writes packed data and scales.  The columnwise part works in
   ``x``'s orientation too (no transposed tile): blocks are 16 rows of a column, the Hadamard
   butterflies run down the columns, and a byte is a pair of rows; only the packed bytes and the
   scales are transposed, by their stores, which give each row of ``[K, M/2]`` (``[K, M/16]``)
   ``BM / 2`` (``BM / 16``) contiguous bytes.  The tile is loaded as a 5-D or 6-D view
   (:func:`_column_tile`) that leaves the two rows of a byte and 8 of a block's 16 rows in one
   thread, or all 16 (the columnwise operand alone, and with RHT).  Programs walk the tiles in
   reverse, so the tiles the amax pass read last (still in L2) are read first; with 16 x 16 tiles they
   load two tiles ahead (``Launch.stages``, ``cp.async``).  The rowwise operand
   alone takes ``nvfp4_rowwise_kernel``, which reads ``x`` as words in contiguous 16-byte pieces; the
   columnwise operand alone, from 16-bit input on whole tiles with round to nearest (:func:`_gluon_columnwise`),
   takes the Gluon kernel of ``fast.quant.nvfp4.gluon``, which stores the transposed codes and scales in wider
   pieces than this kernel can.
   Each kernel's tile body is a device function, :func:`quantize_tile` and :func:`rowwise_tile`
   (tile, dims, pointers, scale-row strides, the tensor scales' ``p0, p1``), which ``fast.group``'s
   grouped kernel runs on every member's tiles.

All the float arithmetic is the contract's, in float32: IEEE divisions and reciprocals (``tl.div_rn``,
``rcp.rn.f32``), products that are each rounded once (floating-point contraction is turned off at
launch: an FMA would skip the rounding of a product).  Compiled, round to nearest makes two E2M1 codes
per float16x2 sequence (:func:`e2m1_pairs`: the float32 product rounded to odd at float16's precision,
so that rounding it again is exact) and the E4M3 block scale is the hardware's saturating conversion
(:func:`e4m3_scale`); the 16 x 16 tiles' columnwise bytes pair the nibbles of the rowwise ones anew
(:func:`_store_columns`).  Interpreted, the integer bit arithmetic of :func:`e2m1_rne` (three candidate
roundings by float32 magic-number additions and their minimum) and ``_e4m3_rne`` (bit rounding in place).
Stochastic rounding with uint8 random bits is :func:`e2m1_stochastic` (floors by ``fma.rm`` / ``add.rm``), with
uint32 bits and interpreted ``fast._triton.round_to_code``.  Each of these compiled forms is the one with the
fewest instructions per element that gives the same bytes (``docs/performance.md``).

Paths
-----
``QCONFORM_FAST_PATH`` chooses per call, as in ``fast/cast.py``: ``auto`` (the kernels for CUDA
tensors when Triton is importable, else torch), ``triton`` (CPU tensors need ``TRITON_INTERPRET=1``)
or ``torch``.  The torch path is the same arithmetic with torch tensor ops (tensor-by-tensor
divisions only: torch rewrites a division by a Python number, and ``1 / t``, as multiplications by
a reciprocal) and the casts of ``fast.cast``.  This module imports without Triton and queries no
device at import time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from fast._checks import check_choice
from fast._triton import (
    PATH_ENV,
    selected_path,
)
from fast.quant.nvfp4.column_tiles import quantize_tile
from fast.quant.nvfp4.hadamard import hadamard_16_columns
from fast.quant.nvfp4.launch import quantize_triton
from fast.quant.nvfp4.rounding import e2m1_rne
from fast.quant.nvfp4.settings import (
    AMAX_SCOPES,
    AMAX_SOURCES,
    BLOCKS,
    INPUT_DTYPES,
    RANDOM_DTYPES,
    RHT_SIGN_MASK,
    ROUNDINGS,
    SCALE_RULES,
    USAGES,
    ZERO_SCALES,
    Settings,
)
from fast.quant.nvfp4.tiles import rowwise_tile
from fast.quant.nvfp4.torch_path import quantize_torch

__all__ = [
    "AMAX_SCOPES",
    "AMAX_SOURCES",
    "BLOCKS",
    "PATH_ENV",
    "RHT_SIGN_MASK",
    "ROUNDINGS",
    "SCALE_RULES",
    "USAGES",
    "ZERO_SCALES",
    "bench",
    "e2m1_rne",
    "hadamard_16_columns",
    "nvfp4",
    "quantize_tile",
    "rowwise_tile",
]


# %% Argument checks


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_settings(s: Settings) -> None:
    check_choice("usage", s.usage, USAGES)
    check_choice("block", s.block, BLOCKS)
    check_choice("amax_scope", s.amax_scope, AMAX_SCOPES)
    check_choice("rht", s.rht, (False, True))
    check_choice("rounding", s.rounding, ROUNDINGS)
    check_choice("scale_rule", s.scale_rule, SCALE_RULES)
    check_choice("zero_scale", s.zero_scale, ZERO_SCALES)
    check_choice("amax_source", s.amax_source, AMAX_SOURCES)
    if s.amax_source == "given" and s.amax_scope == "row":
        raise ValueError(
            "Got amax_source='given' and amax_scope='row', but a given amax is per tensor "
            "(TE's quantize_with_amax does not support row-scaled NVFP4); use amax_scope='tensor'"
        )
    if s.amax_scope == "row":
        for name, value, allowed in (
            ("rht", s.rht, False),
            ("block", s.block, "1x16"),
            ("rounding", s.rounding, "rne"),
        ):
            if value != allowed:
                raise ValueError(
                    f"Got amax_scope='row' and {name}={value!r}, but the row-scaled variant needs {name}={allowed!r} "
                    "(TE's row_scaled_nvfp4 supports no RHT, 2D blocks or stochastic rounding)"
                )
        if s.usage == "columnwise":
            raise ValueError(
                "Got amax_scope='row' and usage='columnwise', but the row-scaled variant needs the rowwise operand "
                "(TE's row_scaled_nvfp4); use usage='both'"
            )
    if s.scale_rule != "te":
        for name, value, allowed in (
            ("block", s.block, "1x16"),
            ("rht", s.rht, False),
            ("rounding", s.rounding, "rne"),
            ("amax_scope", s.amax_scope, "tensor"),
            ("zero_scale", s.zero_scale, "flt_max"),
        ):
            if value != allowed:
                raise ValueError(
                    f"Got scale_rule={s.scale_rule!r} and {name}={value!r}, but torchao's nvfp4_quantize has "
                    f"{name}={allowed!r} only"
                )


def _check_x(x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a torch.Tensor")
    if x.dtype not in INPUT_DTYPES:
        allowed = [_dtype_name(d) for d in INPUT_DTYPES]
        raise TypeError(f"Got x.dtype={_dtype_name(x.dtype)}, but x must be one of {allowed}")
    shape = tuple(x.shape)
    if x.dim() != 2:
        raise ValueError(f"Got x.shape={shape}, but x must be 2-D [M, K]; reshape the leading dimensions into M")
    if x.numel() == 0:
        raise ValueError(f"Got x.shape={shape}, but x must not be empty: NVFP4 needs at least one 16x16 tile")
    if shape[0] % 16 or shape[1] % 16:
        raise ValueError(
            f"Got x.shape={shape}, but M and K must be multiples of 16 (TE's NVFP4 quantizer); pad x with zeros"
        )
    return x


def _check_random_bits(
    name: str, bits: object, rounding: str, needed: bool, shape: tuple[int, int], x: torch.Tensor
) -> None:
    if rounding != "stochastic" or not needed:
        if bits is not None:
            why = f"rounding={rounding!r}" if rounding != "stochastic" else "usage, which leaves this operand out"
            raise ValueError(f"Got {name} with {why}, but {name} is only for stochastic rounding of its operand")
        return
    if bits is None:
        raise ValueError(
            f"Got rounding='stochastic' and no {name}, but stochastic rounding needs {name}: "
            f"a uint8 or uint32 tensor of shape {shape}"
        )
    if not isinstance(bits, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(bits).__name__}, but {name} must be a torch.Tensor")
    if bits.dtype not in RANDOM_DTYPES:
        raise TypeError(f"Got {name}.dtype={_dtype_name(bits.dtype)}, but {name} must be uint8 or uint32")
    if tuple(bits.shape) != shape:
        raise ValueError(f"Got {name}.shape={tuple(bits.shape)}, but {name} must have shape {shape}")
    if bits.device != x.device:
        raise ValueError(f"Got {name} on {bits.device}, but {name} must be on x's device ({x.device})")


def _check_amax(name: str, amax: object, amax_source: str, needed: bool, x: torch.Tensor) -> None:
    if amax_source != "given" or not needed:
        if amax is not None:
            why = f"amax_source={amax_source!r}" if amax_source != "given" else "usage, which leaves this operand out"
            raise ValueError(f"Got {name} with {why}, but {name} is only for amax_source='given' and its operand")
        return
    if amax is None:
        raise ValueError(
            f"Got amax_source='given' and no {name}, but a given amax needs {name}: a float32 tensor of shape (1,)"
        )
    if not isinstance(amax, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(amax).__name__}, but {name} must be a torch.Tensor")
    if amax.dtype != torch.float32:
        raise TypeError(f"Got {name}.dtype={_dtype_name(amax.dtype)}, but {name} must be float32")
    if tuple(amax.shape) != (1,):
        raise ValueError(f"Got {name}.shape={tuple(amax.shape)}, but {name} must have shape (1,)")
    if amax.device != x.device:
        raise ValueError(f"Got {name} on {amax.device}, but {name} must be on x's device ({x.device})")


# %% Public function


def nvfp4(
    x: torch.Tensor,
    *,
    usage: str = "both",
    block: str = "1x16",
    amax_scope: str = "tensor",
    rht: bool = False,
    rounding: str = "rne",
    scale_rule: str = "te",
    zero_scale: str = "flt_max",
    amax_source: str = "computed",
    random_bits: torch.Tensor | None = None,
    columnwise_random_bits: torch.Tensor | None = None,
    amax: torch.Tensor | None = None,
    columnwise_amax: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Quantize a float32/bfloat16/float16 matrix to NVFP4: rowwise and/or columnwise operands.

    Contract
    --------
    ``quant.nvfp4`` (``specs/quant/nvfp4.yaml``): per operand (``x``, and ``x.T`` or its random
    Hadamard transform with ``rht``), the amax (NaN ignored under ``te``), the tensor scale
    (``te``: ``S_dec = fl32(1 / S_enc)``, ``S_enc = min(fl32(2688 / amax), FLT_MAX)`` or 1 for amax
    0 / Inf; torchao: ``amax / 2688``), E4M3 block scales over 1x16 blocks or 16x16 tiles, encode
    scales (``zero_scale`` decides a block scale that rounds to 0 under ``te``) and E2M1 codes of
    ``fl32(v * enc)``, rounded to nearest even or stochastically with ``random_bits`` /
    ``columnwise_random_bits``.  ``amax_source="given"``: the per-tensor amaxes are ``amax`` /
    ``columnwise_amax`` (float32 ``[1]`` on ``x``'s device, any value: 0, Inf, NaN, negative follow
    the rule's arithmetic; a block above it saturates its scale to 448 and its elements to ±6), copied
    into the ``amax`` outputs, and the Triton path reads ``x`` once.

    Source
    ------
    TransformerEngine@d0067d0 ``common/cast/nvfp4`` (kernels), ``reference_nvfp4.py``,
    ``test_cast_nvfp4_transpose.cu``, ``NVFP4Quantizer::quantize_with_amax``; torchao
    ``nvfp4_quantize`` (``per_tensor_scale``); see the spec for which value follows which.

    Encoding
    --------
    ``data`` uint8 ``[M, K/2]`` (low nibble first), ``scales`` uint8 E4M3 ``[M, K/16]``, ``amax`` and
    ``tensor_scale`` float32 ``[1]`` (or ``[M]`` for ``amax_scope="row"``); ``columnwise_*`` the
    same for ``x.T`` (``[K, M/2]``, ``[K, M/16]``, ``[1]`` or ``[K]``).  Only the outputs of the
    operands ``usage`` names are returned, on ``x``'s device.

    Edge cases
    ----------
    As ``reference.quant.nvfp4``: amax 0 or Inf gives ``S_enc = 1``; NaN elements give +6 (0x7), ±Inf
    ±6, -0.0 0x8; torchao's rules give NaN scales for amax 0 or NaN.

    The implementation (Triton kernels or torch ops) is chosen per call by ``QCONFORM_FAST_PATH``.
    Raises ``TypeError`` unless ``x`` is a float32, bfloat16 or float16 tensor and random bits are
    uint8 or uint32 tensors; ``ValueError`` for unknown or unsupported parameters (as the
    reference), an ``x`` that is not 2-D, empty or not a multiple of 16 in both dims, random bits
    missing, superfluous, of the wrong shape or on another device, and given amaxes missing,
    superfluous, not of shape ``(1,)`` or on another device (``TypeError`` unless float32 tensors);
    ``RuntimeError`` where a forced Triton path cannot run.
    """
    s = Settings(usage, block, amax_scope, rht, rounding, scale_rule, zero_scale, amax_source)
    _check_settings(s)
    _check_x(x)
    rows, cols = x.shape
    _check_random_bits("random_bits", random_bits, rounding, s.rowwise, (rows, cols), x)
    _check_random_bits("columnwise_random_bits", columnwise_random_bits, rounding, s.columnwise, (cols, rows), x)
    _check_amax("amax", amax, amax_source, s.rowwise, x)
    _check_amax("columnwise_amax", columnwise_amax, amax_source, s.columnwise, x)
    given = [t for t in (amax, columnwise_amax) if t is not None]
    x = x.contiguous()
    if random_bits is not None:
        random_bits = random_bits.contiguous()
    if columnwise_random_bits is not None:
        columnwise_random_bits = columnwise_random_bits.contiguous()
    run: Callable[..., dict[str, torch.Tensor]] = (
        quantize_triton if selected_path(x.device) == "triton" else quantize_torch
    )
    return run(x, s, random_bits, columnwise_random_bits, given)


# %% Benchmark


def bench(
    shape: tuple[int, int] = (8192, 8192), *, dtype: torch.dtype = torch.bfloat16, usage: str = "rowwise", **params: Any
) -> dict[str, float]:
    """Median time of :func:`nvfp4` on a random CUDA matrix, beside a device-to-device copy.

    Bytes moved: the input read twice (amax pass and quantize pass) plus every output written once.
    Returns ``ms``, ``gb_per_s``, ``copy_gb_per_s`` and ``fraction_of_copy``.
    """
    from triton.testing import do_bench

    x = (torch.randn(shape, device="cuda") * 4).to(dtype)
    out = nvfp4(x, usage=usage, **params)
    ms = do_bench(lambda: nvfp4(x, usage=usage, **params), return_mode="median")
    dst = torch.empty_like(x)
    copy_ms = do_bench(lambda: dst.copy_(x), return_mode="median")
    moved = 2 * x.numel() * x.element_size() + sum(t.numel() * t.element_size() for t in out.values())
    gb_per_s = moved / ms / 1e6
    copy_gb_per_s = 2 * x.numel() * x.element_size() / copy_ms / 1e6
    return {
        "ms": ms,
        "gb_per_s": gb_per_s,
        "copy_gb_per_s": copy_gb_per_s,
        "fraction_of_copy": gb_per_s / copy_gb_per_s,
    }


# %% Check and time


def _main() -> None:
    """Check the Triton kernels against the torch path on an irregular shape, then time them on CUDA."""
    device_ = "cuda" if torch.cuda.is_available() else "cpu"
    if device_ == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn((208, 176), generator=generator) * 3).to(torch.bfloat16).to(device_)
    for usage in USAGES:
        for block in BLOCKS:
            for rht in (False, True):
                os.environ[PATH_ENV] = "triton"
                kernel = nvfp4(x, usage=usage, block=block, rht=rht)
                os.environ[PATH_ENV] = "torch"
                torch_path = nvfp4(x, usage=usage, block=block, rht=rht)
                bad = {k: int((kernel[k].view(torch.uint8) != torch_path[k].view(torch.uint8)).sum()) for k in kernel}
                print(f"usage={usage} block={block} rht={rht}: mismatching bytes {bad}")
    os.environ.pop(PATH_ENV, None)
    if device_ == "cuda":
        for usage in ("rowwise", "both"):
            print(usage, bench(usage=usage))


if __name__ == "__main__":
    _main()
