"""Grouped and scaled matrix products (contracts ``group.gemm``, ``gemm.scaled``): a Triton grouped GEMM,
``torch._scaled_mm`` on CUDA, and torch paths for the rest.

Contracts
---------
- ``group.gemm`` (:func:`grouped`, with the group sizes of the spec; :func:`grouped_mm` takes torch's
  cumulative int32 end offsets ``offs`` instead): one bfloat16 matmul per group, float32 accumulation,
  bfloat16 out, in three forms (``FORMS``): ``2d_3d`` ``a [S, K]`` split by rows times ``b [G, K, N]``;
  ``2d_2d`` ``a [M, S] @ b [S, N]`` split along ``K`` into ``[G, M, N]``; ``3d_2d`` ``a [G, M, K]`` times
  ``b [K, S]`` split by columns.  Group ``g`` spans ``[offs[g-1], offs[g])`` (``offs[-1] = 0``); empty
  groups own nothing (``2d_2d``: a zero matrix).  ``fast.group`` exports :func:`grouped` as ``gemm``.
- ``gemm.scaled`` (:func:`scaled`): ``(a * scale_a) @ (b * scale_b).T`` of FP8 operands with float32 dequant
  scales per tensor, row, 1x128 or 128x128 block.
Specs: ``specs/group/gemm.yaml``, ``specs/gemm/scaled.yaml``; both compare within a per-element bound
(``compare: bound``), since an accumulation order is not a contract.

The grouped kernel
------------------
One launch covers every group.  Each group ``g`` is an ordinary GEMM ``out_g [Mg, Ng] = A_g [Mg, Kg] @
B_g [Kg, Ng]`` whose operands start at ``base + g * stride_g + start_g * stride_split`` of each tensor:
the split axis moves the start (rows of ``a`` and ``out``; ``K`` of ``a`` and ``b``; columns of ``b`` and
``out``) and the 3-D operand or output moves by whole groups.  So the kernel takes, per tensor, a group
stride and a split stride (zero where that tensor is not split or not grouped), and the sizes
``Mg``/``Ng``/``Kg`` are the group's size on the split axis and the fixed dims elsewhere.

The grid is one program per output tile, in group order: group ``g`` has ``cdiv(Mg, BLOCK_M) *
cdiv(Ng, BLOCK_N)`` tiles, and the launch takes an upper bound on their sum computed from the total
alone (``sum_g cdiv(x_g, B) <= cdiv(S, B) + G``), so the host never reads ``offs``.  Each program walks
the ``G`` offsets to find its group and tile (a scalar loop, cheap beside the ``K`` loop), orders the
tiles of its group in bands of ``GROUP_M`` row tiles for L2 reuse, and programs past the last tile run
no ``K`` iterations and store nothing.  Loads wrap rows and columns modulo the group's size (rows
outside the tile's group are computed and dropped, never read out of the group; a fixed dim wraps
modulo the kernel argument, whose divisibility Triton knows, so that its loads stay vectorized and
software-pipelined), ``K`` is masked unless every group's ``K`` is a multiple of ``BLOCK_K``, ``tl.dot``
accumulates bfloat16 products in float32 (``wgmma`` on sm90) and the tile is rounded once to bfloat16
(nearest even) and stored under the group's bounds.  Launched with ``enable_fp_fusion=False``, though
nothing outside ``tl.dot`` could fuse.  Loads along a split contiguous axis (``K`` of ``a`` in ``2d_2d``,
columns of ``b`` in ``3d_2d``) start at data-dependent offsets and are not vectorized: those forms are
correct but not tuned.

Triton 3.9's interpreter multiplies bfloat16 tiles in ``tl.dot`` as integers, truncates float32 ->
bfloat16 casts and flushes bfloat16 subnormals, so interpreted (``AS_BITS``) the kernel reads and writes
int16 bit patterns, widens them exactly to float32, multiplies in IEEE float32 (exact products) and
rounds to nearest even with integer arithmetic: the same contract, checked in CI.

Scaled GEMMs
------------
No Triton kernel: on CUDA :func:`scaled` calls ``torch._scaled_mm`` for the scalings the GPU runs
(tensorwise on sm89+; rowwise and the three blockwise pairs with E4M3 operands, blockwise on sm90 with
CUDA >= 12.9, M % 16 == 0 and K % 128 == 0, or K % 512 == 0 with a 128x128 operand, since cuBLASLt on
sm90 refuses M = 1, 3 and misreads 128x128 scales at K = 128; float32 rowwise output on sm90
only), so there it certifies torch's op against the reference, as the ``torch`` backend does.
Everywhere else it dequantizes (``value * scale`` in float32) and multiplies in float32.
Its operands are FP8 values in float32 carriers (cast to FP8 exactly; a value the format cannot hold is an
error).  :func:`scaled_mm` is that dispatch on FP8 codes (``fast.linear`` runs its FP8 GEMMs through it).

Paths
-----
As ``fast.cast``: ``QCONFORM_FAST_PATH`` = ``auto`` (the Triton kernel / ``torch._scaled_mm`` for CUDA
tensors), ``triton`` (CPU tensors need ``TRITON_INTERPRET=1``; the scaled GEMM then dequantizes) or
``torch`` (a float32 matmul per group; the dequantize-then-matmul scaled GEMM).  This module imports
without Triton and queries no device at import time.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from fast._checks import check_choice
from fast._triton import jit, selected_path, tl, triton

__all__ = ["FORMS", "OUT_DTYPES", "SCALED_FORMATS", "SCALINGS", "bench", "empty_grouped_mm", "empty_scaled", "grouped",
           "grouped_mm", "scaled", "scaled_mm"]  # fmt: skip

FORMS: tuple[str, ...] = ("2d_3d", "2d_2d", "3d_2d")
"""Which operand is split into groups (module docstring)."""
SCALINGS: tuple[str, ...] = ("tensorwise", "rowwise", "1x128", "128x128")
SCALED_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
OUT_DTYPES: tuple[str, ...] = ("bfloat16", "float32")
_SPLIT = {"2d_3d": 0, "2d_2d": 1, "3d_2d": 2}
"""The kernel's SPLIT: 0 rows of a and out, 1 K, 2 columns of b and out."""
_RANKS = {"2d_3d": (2, 3), "2d_2d": (2, 2), "3d_2d": (3, 2)}
_SHAPES = {
    "2d_3d": "a [sum(group_sizes), K] and b [groups, K, N]",
    "2d_2d": "a [M, sum(group_sizes)] and b [sum(group_sizes), N]",
    "3d_2d": "a [groups, M, K] and b [K, sum(group_sizes)]",
}


# %% Kernel


def _grouped_mm_kernel(
    # pointers
    a_ptr,
    b_ptr,
    out_ptr,
    offs_ptr,
    # sizes: G groups; M, N, K the fixed dims (the split one is ignored)
    G,
    M,
    N,
    K,
    # strides in elements: per group (3-D tensors) and along the split axis, then the matrix strides
    stride_ag,
    stride_as,
    stride_am,
    stride_ak,
    stride_bg,
    stride_bs,
    stride_bk,
    stride_bn,
    stride_og,
    stride_os,
    stride_om,
    stride_on,
    # meta
    SPLIT: tl.constexpr,
    EVEN_K: tl.constexpr,
    AS_BITS: tl.constexpr,  # a, b and out as int16 bit patterns (Triton's interpreter: see the launcher)
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """One output tile of one group (module docstring: "The grouped kernel")."""
    pid = tl.program_id(0)
    # -- find this program's group: walk the end offsets, counting tiles
    group = -1
    start = 0
    size = 0
    first_tile = 0
    tiles_before = 0
    previous_end = 0
    for g in range(0, G):
        end = tl.load(offs_ptr + g)
        rows = end - previous_end if SPLIT == 0 else M
        cols = end - previous_end if SPLIT == 2 else N
        tiles = tl.cdiv(rows, BLOCK_M) * tl.cdiv(cols, BLOCK_N)
        hit = (pid >= tiles_before) & (pid < tiles_before + tiles)
        group = tl.where(hit, g, group)
        start = tl.where(hit, previous_end, start)
        size = tl.where(hit, end - previous_end, size)
        first_tile = tl.where(hit, tiles_before, first_tile)
        tiles_before += tiles
        previous_end = end
    valid = group >= 0
    m_size = size if SPLIT == 0 else M
    n_size = size if SPLIT == 2 else N
    k_size = size if SPLIT == 1 else K
    # -- the tile within the group, in bands of GROUP_M row tiles
    local = pid - first_tile
    tiles_m = tl.cdiv(m_size, BLOCK_M)
    band = tl.maximum(GROUP_M * tl.cdiv(n_size, BLOCK_N), 1)
    first_m = (local // band) * GROUP_M
    band_rows = tl.maximum(tl.minimum(tiles_m - first_m, GROUP_M), 1)
    pid_m = first_m + (local % band) % band_rows
    pid_n = (local % band) // band_rows
    # -- operand and output bases of the group
    g64 = tl.maximum(group, 0).to(tl.int64)
    s64 = start.to(tl.int64)
    a_base = a_ptr + g64 * stride_ag + s64 * stride_as
    b_base = b_ptr + g64 * stride_bg + s64 * stride_bs
    out_base = out_ptr + g64 * stride_og + s64 * stride_os
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # rows and columns past the group repeat in-group ones (computed, then dropped); a fixed dim wraps modulo the
    # argument itself, whose divisibility Triton knows, so that loads along it stay vectorized
    rm_in = (rm % (tl.maximum(m_size, 1) if SPLIT == 0 else M)).to(tl.int64)
    rn_in = (rn % (tl.maximum(n_size, 1) if SPLIT == 2 else N)).to(tl.int64)
    a_ptrs = a_base + rm_in[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_base + rk[:, None] * stride_bk + rn_in[None, :] * stride_bn
    # -- the K loop: bfloat16 products, float32 accumulation
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_steps = tl.where(valid, tl.cdiv(k_size, BLOCK_K), 0)
    for step in range(0, k_steps):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = k_size - step * BLOCK_K
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0)
        if AS_BITS:  # bits (int16) widened exactly to float32, multiplied in IEEE float32 (exact products)
            a = (a.to(tl.int32) << 16).to(tl.float32, bitcast=True)
            b = (b.to(tl.int32) << 16).to(tl.float32, bitcast=True)
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # -- one rounding to bfloat16, stored under the group's bounds
    out_ptrs = out_base + rm.to(tl.int64)[:, None] * stride_om + rn.to(tl.int64)[None, :] * stride_on
    m_stored = tl.where(valid, m_size, 0)  # a program past the last tile stores nothing
    inside = (rm[:, None] < m_stored) & (rn[None, :] < n_size)
    if AS_BITS:  # to bfloat16 bits, nearest even (NaN to 0x7FC0)
        bits = acc.to(tl.int32, bitcast=True)
        rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF
        tl.store(out_ptrs, tl.where((bits & 0x7FFFFFFF) > 0x7F800000, 0x7FC0, rounded).to(tl.int16), mask=inside)
    else:
        tl.store(out_ptrs, acc.to(tl.bfloat16), mask=inside)


# %% Tile configurations


class _Tile(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int


def _autotune_configs() -> list[_Tile]:
    """Tiles tried on CUDA (Hopper-sized: 128-256 wide, 64-128 deep, 3-4 stages of shared memory)."""
    return [
        _Tile(128, 256, 64, 8, 8, 3),
        _Tile(256, 128, 64, 8, 8, 3),
        _Tile(128, 128, 64, 8, 4, 4),
        _Tile(128, 128, 128, 8, 8, 3),
        _Tile(64, 128, 64, 8, 4, 4),
        _Tile(128, 64, 64, 8, 4, 4),
    ]


_INTERPRETER_TILE = _Tile(16, 16, 16, 2, 1, 1)
"""The interpreter's tile: small, so that CI's shapes span several tiles and bands."""
_SMALL_TILE = _autotune_configs()[4]
"""The tile of compiled problems below ``_AUTOTUNE_MIN_FLOPS`` (one of the tuned configurations, 64x128x64)."""
_AUTOTUNE_MIN_FLOPS = 2**30
"""Smaller problems skip the autotuner: timing six tiles costs more than it saves, once per new shape."""


@functools.cache
def _tuned_kernel(interpret: str | None) -> Any:
    """The kernel autotuned over :func:`_autotune_configs`, keyed on the fixed dims and the form."""
    configs = [
        triton.Config(
            {"BLOCK_M": t.block_m, "BLOCK_N": t.block_n, "BLOCK_K": t.block_k, "GROUP_M": t.group_m},
            num_warps=t.num_warps,
            num_stages=t.num_stages,
        )
        for t in _autotune_configs()
    ]
    even = triton.heuristics({"EVEN_K": lambda args: args["SPLIT"] != 1 and args["K"] % args["BLOCK_K"] == 0})
    return triton.autotune(configs=configs, key=["G", "M", "N", "K", "SPLIT"])(even(jit(_grouped_mm_kernel)))


# %% Launcher


def _grouped_triton(
    a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out: torch.Tensor, form: str, tile: _Tile | None = None
) -> None:
    """Fill ``out`` with the grouped product (shapes checked by the caller; ``offs`` on ``a``'s device).

    Compiled, the kernel is autotuned over :func:`_autotune_configs` unless ``tile`` fixes one (the GPU
    tests run every configuration) or the problem is below ``_AUTOTUNE_MIN_FLOPS`` (``_SMALL_TILE``);
    interpreted, it runs ``_INTERPRETER_TILE``.
    """
    interpret = os.environ.get("TRITON_INTERPRET")
    if a.device.type != "cuda" and interpret != "1":
        raise RuntimeError(
            f"Got QCONFORM_FAST_PATH=triton and tensors on {a.device}, but the Triton kernel runs CPU tensors only "
            "in Triton's interpreter: set TRITON_INTERPRET=1 before the first call in this process"
        )
    split, groups = _SPLIT[form], offs.numel()
    if out.numel() == 0 or groups == 0:
        return
    if form == "2d_3d":  # a [S, K] rows split, b [G, K, N], out [S, N] rows split
        total, m, n, k = a.shape[0], 0, b.shape[2], a.shape[1]
        a_strides = (0, a.stride(0), a.stride(0), a.stride(1))
        b_strides = (b.stride(0), 0, b.stride(1), b.stride(2))
        o_strides = (0, out.stride(0), out.stride(0), out.stride(1))
    elif form == "2d_2d":  # a [M, S] and b [S, N] split along K, out [G, M, N]
        total, m, n, k = a.shape[1], a.shape[0], b.shape[1], 0
        a_strides = (0, a.stride(1), a.stride(0), a.stride(1))
        b_strides = (0, b.stride(0), b.stride(0), b.stride(1))
        o_strides = (out.stride(0), 0, out.stride(1), out.stride(2))
    else:  # a [G, M, K], b [K, S] columns split, out [M, S] columns split
        total, m, n, k = b.shape[1], a.shape[1], 0, a.shape[2]
        a_strides = (a.stride(0), 0, a.stride(1), a.stride(2))
        b_strides = (0, b.stride(1), b.stride(0), b.stride(1))
        o_strides = (0, out.stride(1), out.stride(0), out.stride(1))
    operands = (a, b, out) if interpret != "1" else (a.view(torch.int16), b.view(torch.int16), out.view(torch.int16))
    args = (*operands, offs, groups, m, n, k, *a_strides, *b_strides, *o_strides)

    def tiles(meta: dict[str, Any]) -> tuple[int]:
        bm, bn = meta["BLOCK_M"], meta["BLOCK_N"]
        if split == 0:
            return ((triton.cdiv(total, bm) + groups) * triton.cdiv(n, bn),)
        if split == 1:
            return (groups * triton.cdiv(m, bm) * triton.cdiv(n, bn),)
        return (triton.cdiv(m, bm) * (triton.cdiv(total, bn) + groups),)

    flops = 2 * out.numel() * (k or total)  # an upper bound (2d_2d: each group sums its share of `total` only)
    if interpret != "1" and tile is None and flops >= _AUTOTUNE_MIN_FLOPS:
        _tuned_kernel(interpret)[tiles](*args, SPLIT=split, AS_BITS=False, enable_fp_fusion=False)
        return
    t = tile if tile is not None else (_INTERPRETER_TILE if interpret == "1" else _SMALL_TILE)
    meta = {"BLOCK_M": t.block_m, "BLOCK_N": t.block_n, "BLOCK_K": t.block_k, "GROUP_M": t.group_m}
    kernel = jit(_grouped_mm_kernel)[tiles(meta)]
    even = split != 1 and k % t.block_k == 0
    if interpret != "1":
        kernel(*args, SPLIT=split, EVEN_K=even, AS_BITS=False, **meta, num_warps=t.num_warps, num_stages=t.num_stages,
               enable_fp_fusion=False)  # fmt: skip
        return
    import numpy as np  # the interpreter computes in NumPy: Inf and NaN inputs must not raise warnings there

    with np.errstate(all="ignore"):
        kernel(*args, SPLIT=split, EVEN_K=even, AS_BITS=True, **meta, num_warps=t.num_warps, enable_fp_fusion=False)


# %% Torch path


def _grouped_torch(a: torch.Tensor, b: torch.Tensor, ends: Sequence[int], out: torch.Tensor, form: str) -> None:
    """Fill ``out`` with one float32 matmul per group (bfloat16 products are exact in float32), rounded once."""
    start = 0
    for g, end in enumerate(ends):
        if form == "2d_3d":
            out[start:end] = (a[start:end].float() @ b[g].float()).to(torch.bfloat16)
        elif form == "2d_2d":
            out[g] = (a[:, start:end].float() @ b[start:end].float()).to(torch.bfloat16)
        else:
            out[:, start:end] = (a[g].float() @ b[:, start:end].float()).to(torch.bfloat16)
        start = end


# %% Argument checks


def _check_tensor(name: str, value: object, dtype: torch.dtype) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"Got {name} of type {type(value).__name__}, but {name} must be a torch.Tensor")
    if value.dtype != dtype:
        expected = str(dtype).removeprefix("torch.")
        raise TypeError(f"Got {name}.dtype={str(value.dtype).removeprefix('torch.')}, but {name} must be {expected}")
    return value


def _check_operands(a: object, b: object, form: str) -> tuple[torch.Tensor, torch.Tensor]:
    """bfloat16 tensors of the form's ranks, on one device."""
    check_choice("form", form, FORMS)
    a = _check_tensor("a", a, torch.bfloat16)
    b = _check_tensor("b", b, torch.bfloat16)
    ranks = _RANKS[form]
    if (a.dim(), b.dim()) != ranks:
        raise ValueError(
            f"Got a.shape={tuple(a.shape)} and b.shape={tuple(b.shape)}, but form={form!r} takes {_SHAPES[form]} "
            f"({ranks[0]}-D and {ranks[1]}-D)"
        )
    if a.device != b.device:
        raise ValueError(f"Got a on {a.device} and b on {b.device}, but they must be on one device")
    return a, b


def _check_sizes(a: torch.Tensor, b: torch.Tensor, form: str, groups: int, total: int | None, total_name: str) -> None:
    """``ValueError`` naming the first axis that disagrees with the form, ``groups`` and ``total`` (if known)."""
    if form == "2d_3d":
        checks = [("a.shape[0]", a.shape[0], total, total_name), ("b.shape[0]", b.shape[0], groups, "groups"),
                  ("a.shape[1]", a.shape[1], b.shape[1], "b.shape[1] (K)")]  # fmt: skip
    elif form == "2d_2d":
        checks = [("a.shape[1]", a.shape[1], total, total_name), ("b.shape[0]", b.shape[0], total, total_name),
                  ("a.shape[1]", a.shape[1], b.shape[0], "b.shape[0] (K)")]  # fmt: skip
    else:
        checks = [("b.shape[1]", b.shape[1], total, total_name), ("a.shape[0]", a.shape[0], groups, "groups"),
                  ("a.shape[2]", a.shape[2], b.shape[0], "b.shape[0] (K)")]  # fmt: skip
    for axis, got, want, meaning in checks:
        if want is not None and got != want:
            raise ValueError(
                f"Got a.shape={tuple(a.shape)} and b.shape={tuple(b.shape)}: {axis}={got}, but it must be "
                f"{meaning} = {want}; form={form!r} takes {_SHAPES[form]}"
            )


def _check_offsets(ends: Sequence[int], total: int, form: str) -> None:
    """Offsets non-decreasing from 0 and ending at the total of the split axis."""
    previous = 0
    for g, end in enumerate(ends):
        if end < previous:
            before = f"offs[{g - 1}]={previous}" if g else "0"
            raise ValueError(
                f"Got offs[{g}]={end} < {before}, but offs must be non-decreasing cumulative end offsets from 0: "
                f"group {g} would have {end - previous} members"
            )
        previous = end
    if previous != total:
        axis = {"2d_3d": "a.shape[0] (rows)", "2d_2d": "a.shape[1] (K)", "3d_2d": "b.shape[1] (columns)"}[form]
        raise ValueError(f"Got offs[-1]={previous}, but it must equal the total {axis} = {total} (form={form!r})")


def _output(a: torch.Tensor, b: torch.Tensor, form: str, groups: int) -> torch.Tensor:
    shape: tuple[int, ...]
    if form == "2d_3d":
        shape = (a.shape[0], b.shape[2])
    elif form == "2d_2d":
        shape = (groups, a.shape[0], b.shape[1])
    else:
        shape = (a.shape[1], b.shape[1])
    return torch.empty(shape, dtype=torch.bfloat16, device=a.device)


def _run_grouped(
    a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, ends: Sequence[int] | None, form: str
) -> torch.Tensor:
    """The product on the selected path (``ends``: the offsets on the host, or None when not read)."""
    out = _output(a, b, form, offs.numel())
    if selected_path(a.device) == "triton":
        _grouped_triton(a, b, offs, out, form)
    else:
        _grouped_torch(a, b, offs.tolist() if ends is None else ends, out, form)
    return out


def _check_grouped_mm(a: object, b: object, offs: object, form: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`grouped_mm`'s checks that read no data (``offs``' values are checked by the caller)."""
    a, b = _check_operands(a, b, form)
    offs = _check_tensor("offs", offs, torch.int32)
    if offs.dim() != 1 or offs.device != a.device:
        raise ValueError(f"Got offs of shape {tuple(offs.shape)} on {offs.device}, but offs must be 1-D on {a.device}")
    _check_sizes(a, b, form, offs.numel(), None, "offs[-1]")
    return a, b, offs


# %% Public functions


def empty_grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, *, form: str) -> torch.Tensor:
    """An uninitialized tensor of :func:`grouped_mm`'s output (shape, dtype, strides, device), reading no data.

    The output's shape depends on the operands' shapes, ``len(offs)`` and ``form`` alone, never on the
    offsets' values (group sizes are data): bfloat16 contiguous ``[S, N]``, ``[G, M, N]`` or ``[M, S]``.
    Raises as :func:`grouped_mm` does for everything but the offsets' values.  ``fast.ops``' fake
    implementation returns it.
    """
    a, b, offs = _check_grouped_mm(a, b, offs, form)
    return _output(a, b, form, offs.numel())


def grouped_mm(
    a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, *, form: str, check_offsets: bool = True
) -> torch.Tensor:
    """One bfloat16 matmul per group, groups given by torch's cumulative int32 end offsets ``offs``.

    The ``torch._grouped_mm(a, b, offs=offs)`` interface (module docstring for the forms): ``offs`` is
    int32 ``[G]`` on ``a``'s device, group ``g`` spanning ``[offs[g-1], offs[g])`` of the split axis.
    Returns bfloat16 ``[S, N]``, ``[G, M, N]`` or ``[M, S]``.  ``check_offsets=True`` reads ``offs`` to
    the host (one device synchronization) and checks that it is non-decreasing and ends at the split
    axis' size; ``False`` skips that (for timing or CUDA graphs), and invalid offsets then leave rows
    unwritten or read out of bounds.

    Raises ``ValueError`` for an unknown ``form``, operands of other ranks, sizes that disagree, ``offs``
    not 1-D on ``a``'s device, or (checked) offsets that decrease or miss the total; ``TypeError``
    unless ``a`` and ``b`` are bfloat16 and ``offs`` int32.
    """
    a, b, offs = _check_grouped_mm(a, b, offs, form)
    ends = None
    if check_offsets:
        ends = offs.tolist()
        total = {"2d_3d": a.shape[0], "2d_2d": a.shape[1], "3d_2d": b.shape[1]}[form]
        _check_offsets(ends, total, form)
    return _run_grouped(a.contiguous(), b.contiguous(), offs.contiguous(), ends, form)


def grouped(
    a: torch.Tensor, b: torch.Tensor, *, form: str, groups: int, group_sizes: Sequence[int]
) -> dict[str, torch.Tensor]:
    """``group.gemm`` from the group sizes: :func:`grouped_mm` with ``offs = cumsum(group_sizes)``.

    Returns ``{"out": ...}``.  Raises ``ValueError`` for ``groups`` < 1, ``group_sizes`` of another
    length or with a negative size (naming the group), and operand shapes that disagree with the form,
    ``groups`` or ``sum(group_sizes)`` (naming the axis); otherwise as :func:`grouped_mm`.
    """
    a, b = _check_operands(a, b, form)
    if type(groups) is not int or groups < 1:
        raise ValueError(f"Got groups={groups!r}, but groups must be an int >= 1")
    sizes = list(group_sizes)
    if len(sizes) != groups:
        raise ValueError(f"Got group_sizes={tuple(sizes)} ({len(sizes)} sizes), but groups={groups} needs {groups}")
    ends, total = [], 0
    for g, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(
                f"Got group_sizes[{g}]={size!r}, but group {g}'s size must be an int >= 0 "
                "(the end offsets cumsum(group_sizes) must not decrease)"
            )
        total += size
        ends.append(total)
    _check_sizes(a, b, form, groups, total, "sum(group_sizes)")
    offs = torch.tensor(ends, dtype=torch.int32, device=a.device)
    return {"out": _run_grouped(a.contiguous(), b.contiguous(), offs, ends, form)}


_FP8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
_FP8_NAMES = {dtype: name for name, dtype in _FP8.items()}
_BLOCK = 128
_TORCH_PAIRS = {("tensorwise", "tensorwise"), ("rowwise", "rowwise"), ("1x128", "128x128"), ("1x128", "1x128"),
                ("128x128", "1x128")}  # fmt: skip
"""The scaling pairs ``torch._scaled_mm`` has kernels for."""


def _scale_shape(scaling: str, rows: int, k: int) -> tuple[int, int]:
    k_blocks = -(-k // _BLOCK)
    return {
        "tensorwise": (1, 1),
        "rowwise": (rows, 1),
        "1x128": (rows, k_blocks),
        "128x128": (-(-rows // _BLOCK), k_blocks),
    }[scaling]


def _dequantize(values: torch.Tensor, scale: torch.Tensor, scaling: str) -> torch.Tensor:
    """float32 ``value * scale`` of each element's block."""
    rows, k = values.shape
    row_block = {"tensorwise": max(rows, 1), "rowwise": 1, "1x128": 1, "128x128": _BLOCK}[scaling]
    k_block = max(k, 1) if scaling in ("tensorwise", "rowwise") else _BLOCK
    row_index = torch.arange(rows, device=values.device) // row_block
    k_index = torch.arange(k, device=values.device) // k_block
    return values * scale[row_index[:, None], k_index[None, :]]


def _to_fp8(name: str, values: torch.Tensor, fmt: str) -> torch.Tensor:
    """``values`` cast to ``fmt``, exactly: ``ValueError`` naming the first value the format cannot hold."""
    cast = values.to(_FP8[fmt])
    outside = (cast.float() != values) & ~values.isnan()
    if bool(outside.any()):
        index = [int(i) for i in outside.nonzero()[0]]
        raise ValueError(f"Got {name}{index}={float(values[tuple(index)])!r}, but {name} must hold {fmt} values")
    return cast


def _scaled_mm_runs(
    a: torch.Tensor, b: torch.Tensor, scalings: tuple[str, str], formats: tuple[str, str], out_dtype: str
) -> bool:
    """Whether ``torch._scaled_mm`` has a kernel for this case on ``a``'s CUDA device (module docstring)."""
    if a.device.type != "cuda" or getattr(torch.version, "hip", None) or scalings not in _TORCH_PAIRS:
        return False
    capability = torch.cuda.get_device_capability(a.device)
    if capability < (8, 9) or a.shape[1] % 16 or b.shape[0] % 16:
        return False
    if scalings == ("tensorwise", "tensorwise"):
        return True
    if formats != ("float8_e4m3fn", "float8_e4m3fn"):
        return False
    if scalings == ("rowwise", "rowwise"):
        return out_dtype == "bfloat16" or capability == (9, 0)
    cuda = tuple(int(part) for part in str(torch.version.cuda or "0.0").split(".")[:2])
    # Seen with torch 2.11 (CUDA 13.0, sm_90): cuBLASLt answers CUBLAS_STATUS_NOT_SUPPORTED for a 1x128 operand of
    # M = 1 or 3 rows, and a 128x128 operand with K / 128 = 1 and several blocks of rows gives wrong outputs
    # past the first block (cuBLASLt seemingly reads its scales with rows padded to 4 blocks, as TE's GEMM-ready
    # layout stores them, while torch passes them compact): so M % 16 == 0, and K % 512 == 0 with 128x128.
    k_multiple = 4 * _BLOCK if "128x128" in scalings else _BLOCK
    return capability == (9, 0) and cuda >= (12, 9) and a.shape[1] % k_multiple == 0 and a.shape[0] % 16 == 0


def _torch_scales(scale: torch.Tensor, scaling: str, operand: str) -> torch.Tensor:
    """A scale tensor in the layout ``torch._scaled_mm`` wants for operand ``a`` or ``b`` (passed as ``b.t()``)."""
    if scaling == "tensorwise":  # a fresh 16-byte-aligned scalar: a view into a buffer of scalars may not be
        return scale.reshape(()).clone()
    if operand == "a":
        return scale.t().contiguous().t() if scaling == "1x128" else scale.contiguous()  # 1x128: outer-dim-major
    if scaling == "rowwise":
        return scale.reshape(1, -1).contiguous()
    return scale.t().contiguous() if scaling == "1x128" else scale.contiguous().t()


def scaled_mm(
    a8: torch.Tensor,
    b8: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    *,
    scaling_a: str,
    scaling_b: str,
    out_dtype: torch.dtype,
) -> torch.Tensor | None:
    """``torch._scaled_mm`` of FP8 tensors ``a8`` ``[M, K]`` and ``b8`` ``[N, K]``, or None where it has no kernel.

    The scales are float32 in :func:`scaled`'s layout (``[ceil(rows/R), ceil(K/C)]`` of each operand's blocks);
    returns ``out_dtype`` ``[M, N]``, or None on the torch path and wherever torch has no kernel for the
    scalings, formats, output dtype and shapes on this device (module docstring), for the caller to
    dequantize and multiply instead.  Shapes and scales are the caller's to check.
    """
    formats = (_FP8_NAMES[a8.dtype], _FP8_NAMES[b8.dtype])
    out_name = "bfloat16" if out_dtype == torch.bfloat16 else "float32"
    if selected_path(a8.device) == "torch" or not _scaled_mm_runs(a8, b8, (scaling_a, scaling_b), formats, out_name):
        return None
    return torch._scaled_mm(
        a8,
        b8.t(),
        _torch_scales(scale_a, scaling_a, "a"),
        _torch_scales(scale_b, scaling_b, "b"),
        out_dtype=out_dtype,
        use_fast_accum=False,
    )


def _check_scaled(a: object, b: object, scale_a: object, scale_b: object, choices: tuple[str, ...]) -> None:
    """:func:`scaled`'s checks that read no data (``choices``: the scalings, formats and ``out_dtype``)."""
    names = ("scaling_a", "scaling_b", "format_a", "format_b", "out_dtype")
    allowed_values = (SCALINGS, SCALINGS, SCALED_FORMATS, SCALED_FORMATS, OUT_DTYPES)
    for name, value, allowed in zip(names, choices, allowed_values, strict=True):
        check_choice(name, value, allowed)
    a = _check_tensor("a", a, torch.float32)
    b = _check_tensor("b", b, torch.float32)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(
            f"Got a.shape={tuple(a.shape)} and b.shape={tuple(b.shape)}, but they must be [M, K] and [N, K]"
        )
    for name, given, values, scaling in (("a", scale_a, a, choices[0]), ("b", scale_b, b, choices[1])):
        scale = _check_tensor(f"scale_{name}", given, torch.float32)
        expected = _scale_shape(scaling, values.shape[0], values.shape[1])
        if tuple(scale.shape) != expected:
            raise ValueError(
                f"Got scale_{name}.shape={tuple(scale.shape)}, but scaling_{name}={scaling!r} needs "
                f"{list(expected)} for {name}.shape={tuple(values.shape)}"
            )


def empty_scaled(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    *,
    scaling_a: str,
    scaling_b: str,
    format_a: str = "float8_e4m3fn",
    format_b: str = "float8_e4m3fn",
    out_dtype: str = "bfloat16",
) -> torch.Tensor:
    """An uninitialized tensor of :func:`scaled`'s ``out`` (float32 contiguous ``[M, N]`` on ``a``'s device).

    Reads no data: raises as :func:`scaled` does for everything but operand values outside their format.
    ``fast.ops``' fake implementation returns it.
    """
    _check_scaled(a, b, scale_a, scale_b, (scaling_a, scaling_b, format_a, format_b, out_dtype))
    return torch.empty((a.shape[0], b.shape[0]), dtype=torch.float32, device=a.device)


def scaled(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    *,
    scaling_a: str,
    scaling_b: str,
    format_a: str = "float8_e4m3fn",
    format_b: str = "float8_e4m3fn",
    out_dtype: str = "bfloat16",
) -> dict[str, torch.Tensor]:
    """``(a * scale_a) @ (b * scale_b).T`` of FP8 operands (``gemm.scaled``): float32 holding ``out_dtype`` values.

    ``a`` ``[M, K]`` and ``b`` ``[N, K]`` hold values of ``format_a``/``format_b`` in float32 (cast to FP8
    exactly; the spec draws values so that no NaN code poisons a whole row); ``scale_a``
    float32 ``[1, 1]``, ``[M, 1]``, ``[M, ceil(K/128)]`` or ``[ceil(M/128), ceil(K/128)]`` for
    ``scaling_a`` = ``tensorwise``, ``rowwise``, ``1x128``, ``128x128`` (``scale_b`` alike with ``N``).
    On CUDA ``torch._scaled_mm`` where it has a kernel, else dequantize-then-matmul in float32 (module
    docstring).  Returns ``{"out": float32 [M, N]}``.

    Raises ``ValueError`` for an unknown scaling, format or ``out_dtype``, operands that are not 2-D
    with one ``K``, operand values outside their format (naming the first), or scales of another shape;
    ``TypeError`` unless the operands and scales are float32 tensors.
    """
    _check_scaled(a, b, scale_a, scale_b, (scaling_a, scaling_b, format_a, format_b, out_dtype))
    a8, b8 = _to_fp8("a", a, format_a), _to_fp8("b", b, format_b)
    dtype = torch.bfloat16 if out_dtype == "bfloat16" else torch.float32
    out = scaled_mm(a8, b8, scale_a, scale_b, scaling_a=scaling_a, scaling_b=scaling_b, out_dtype=dtype)
    if out is not None:
        return {"out": out.float()}
    product = _dequantize(a, scale_a, scaling_a) @ _dequantize(b, scale_b, scaling_b).t()
    return {"out": product.to(dtype).float()}


# %% Benchmark


def bench(groups: int = 8, rows: int = 16384, n: int = 4096, k: int = 4096) -> dict[str, float]:
    """Median CUDA times (ms) of the grouped GEMM ``2d_3d`` (equal groups) beside ``torch._grouped_mm``.

    Uses ``triton.testing.do_bench``; TFLOP/s = ``2 * rows * n * k / time``.
    """
    from triton.testing import do_bench

    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((rows, k), device="cuda", generator=generator).to(torch.bfloat16)
    b = torch.randn((groups, k, n), device="cuda", generator=generator).to(torch.bfloat16)
    offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * (rows // groups)
    times = {
        "triton_ms": do_bench(lambda: grouped_mm(a, b, offs, form="2d_3d", check_offsets=False), return_mode="median"),
        "torch_grouped_mm_ms": do_bench(lambda: torch._grouped_mm(a, b, offs=offs), return_mode="median"),
    }
    flops = 2 * rows * n * k
    return {**times, **{name.replace("_ms", "_tflops"): flops / (ms * 1e-3) / 1e12 for name, ms in times.items()}}


# %% Check and time


def _main() -> None:
    """Check the kernel against the torch path on ragged groups (interpreter on CPU), then time it on CUDA."""
    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ["TRITON_INTERPRET"] = "1"
    device = "cuda" if cuda else "cpu"
    generator = torch.Generator().manual_seed(0)
    sizes = [37, 0, 5, 64]
    cases = {
        "2d_3d": ((sum(sizes), 48), (len(sizes), 48, 40)),
        "2d_2d": ((19, sum(sizes)), (sum(sizes), 40)),
        "3d_2d": ((len(sizes), 19, 48), (48, sum(sizes))),
    }
    for form, (a_shape, b_shape) in cases.items():
        a = torch.randn(a_shape, generator=generator).to(torch.bfloat16).to(device)
        b = torch.randn(b_shape, generator=generator).to(torch.bfloat16).to(device)
        results = []
        for path in ("triton", "torch"):
            os.environ["QCONFORM_FAST_PATH"] = path
            results.append(grouped(a, b, form=form, groups=len(sizes), group_sizes=sizes)["out"].float())
        print(f"{form}: max |triton - torch| = {float((results[0] - results[1]).abs().max()):.3g}")
    os.environ.pop("QCONFORM_FAST_PATH")
    if cuda:
        print(bench())


if __name__ == "__main__":
    _main()
