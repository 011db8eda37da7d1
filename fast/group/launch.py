"""Grouped quantization on the Triton path: member and tile tables, the grouped amax pass, and one launcher per
recipe (:func:`fp8_tensor_grouped`, :func:`mxfp8_grouped`, :func:`fp8_block_grouped`, :func:`nvfp4_grouped`), each
with the single quantizer's tiling and cache policy, imported from its public launch names."""

from __future__ import annotations

import math
import os
from typing import Any

import torch

from fast._triton import jit, triton
from fast.group.kernels import (
    grouped_amax_kernel,
    grouped_cast_kernel,
    grouped_fp8_block_kernel,
    grouped_mx_kernel,
    grouped_nvfp4_kernel,
    grouped_unstage_kernel,
)
from fast.group.members import BLOCK_NAMES, EMPTY_MEMBER, cumulative_offsets, member_scale_shapes
from fast.quant.fp8 import CAST_TILES, DTYPE_MAX, F32_MAX, FORMAT_META, INPUT_IDS, quiet_interpreter, rounding_core
from fast.quant.fp8_block.launch import TILES as BLOCK_TILES
from fast.quant.mx.launch import Tile as MxTile
from fast.quant.mx.launch import dependent_launch, unstaged_tiles
from fast.quant.mx.launch import kernel_constants as mx_kernel_constants
from fast.quant.mx.launch import stages_row_scales as mx_stages_row_scales
from fast.quant.mx.plan import make_plan as make_mx_plan
from fast.quant.nvfp4.launch import Launch as Nvfp4Launch
from fast.quant.nvfp4.launch import kept_bytes as nvfp4_kept_bytes
from fast.quant.nvfp4.launch import launch_options as nvfp4_launch_options
from fast.quant.nvfp4.launch import near_l2 as nvfp4_near_l2
from fast.quant.nvfp4.launch import program_count as nvfp4_program_count
from fast.quant.nvfp4.launch import select_tiling as nvfp4_tiling
from fast.quant.nvfp4.launch import store_eviction as nvfp4_store_eviction
from fast.quant.nvfp4.settings import Settings as Nvfp4Settings

# %% Grouped kernels (Triton): FP8 current scaling, MXFP8, FP8 blockwise and NVFP4, one launch per pass for all members

AMAX_CHUNK: tuple[int, int, int] = (8192, 8, 4)
"""(elements per chunk, num_warps, programs per SM) of the grouped amax kernel: persistent programs stride over
every member's chunks (``fast.quant.nvfp4``'s flat amax pass: 4096 words, 8 warps, 4 per SM)."""


def _member_table(columns: list[list[int]], device: torch.device) -> tuple[torch.Tensor, int]:
    """The members' table the kernels read (one row per list, ``MEMBERS`` wide: a power of two) and ``MEMBERS``.

    Copied to the device with ``non_blocking``: a blocking host-to-device copy synchronises the stream, so
    the host would wait for all queued work on every call (the driver stages pageable memory before the
    asynchronous copy returns, so the host tensor may go at once).
    """
    members = triton.next_power_of_2(max(len(column) for column in columns))
    table = torch.tensor([row + [0] * (members - len(row)) for row in columns], dtype=torch.int64)
    return table.to(device, non_blocking=True), members


def _tile_table(
    recipe: str,
    block: str,
    shapes: list[tuple[int, int]],
    offsets: list[int],
    block_m: int,
    block_k: int,
    device: torch.device,
) -> tuple[list[int], list[tuple[tuple[int, ...], tuple[int, ...]]], list[list[int]], torch.Tensor, int]:
    """For one program per ``block_m x block_k`` tile: each member's tiles, scale shapes, the table's columns (0
    element offsets, 1 first tiles, 2 M, 3 K, 4 and 5 rowwise and columnwise scale offsets), the table and its
    width ``MEMBERS``."""
    tiles = [triton.cdiv(m, block_m) * triton.cdiv(k, block_k) if m * k else 0 for m, k in shapes]
    scale_shapes = [member_scale_shapes(recipe, block, m, k) for m, k in shapes]
    columns = [offsets, cumulative_offsets(tiles), [m for m, _ in shapes], [k for _, k in shapes]]
    columns += [cumulative_offsets([math.prod(s[side]) for s in scale_shapes]) for side in (0, 1)]
    table, members = _member_table(columns, device)
    return tiles, scale_shapes, columns, table, members


def _alignment(shapes: list[tuple[int, int]]) -> int:
    """The largest power of two up to 16 that divides every member's M and K (so every element offset): the
    kernels' ``ALIGN``, which tells the compiler that rows start at multiples of ALIGN elements (vector loads)."""
    dims = math.gcd(*(d for shape in shapes for d in shape))
    return math.gcd(dims, 16) if dims else 16


def _amax_chunks(shapes: list[tuple[int, int]]) -> list[int]:
    """Each member's chunks of the grouped amax kernel (table row 1, cumulated)."""
    return [triton.cdiv(m * k, AMAX_CHUNK[0]) for m, k in shapes]


def _launch_grouped_amax(
    data: torch.Tensor,
    amax_bits: torch.Tensor,
    table: torch.Tensor,
    members: int,
    shapes: list[tuple[int, int]],
    align: int,
    kept_bytes: int,
) -> None:
    """Each member's ``max|x|`` (NaN ignored) as int32 bits into ``amax_bits[:n]`` (table rows 0 and 1: element
    offsets and cumulative :func:`_amax_chunks`).  The single quantizer's cache policy: with ``kept_bytes``
    (NVFP4's rowwise operand alone: 45% of L2, ``nvfp4_kept_bytes``, for its quantize pass, which reads those tiles
    first) the last chunks are loaded evict-last and the rest evict-first; without (FP8, NVFP4 with a columnwise
    operand), every chunk with the default policy."""
    block, num_warps, per_sm = AMAX_CHUNK
    sizes = [m * k for m, k in shapes]
    chunks = sum(_amax_chunks(shapes))
    jit(grouped_amax_kernel)[(nvfp4_program_count(data, chunks, per_sm),)](
        data, amax_bits, table, chunks, min(chunks, kept_bytes // (block * data.element_size())),
        INPUT=INPUT_IDS[data.dtype], BLOCK=block, MEMBERS=members, ALIGN=align,
        EVEN=all(size % block == 0 for size in sizes), STREAM="evict_first" if kept_bytes else "", num_warps=num_warps,
    )  # fmt: skip


def fp8_tensor_grouped(
    data: torch.Tensor, shapes: list[tuple[int, int]], offsets: list[int], usage: str, block: str
) -> dict[str, torch.Tensor]:
    """``group.quantize`` of ``fp8_tensor`` in two kernel launches for all members (no per-member calls).

    The grouped amax kernel gives each member's ``max|x|`` (NaN ignored) by one atomic per program and member
    (:func:`_launch_grouped_amax`, nothing kept in L2: the cast reads the tiles in ``fast.quant.fp8``'s order);
    the grouped cast kernel is ``fast.quant.fp8``'s cast (``scale_from_amax``, ``reciprocal``, ``fp8_code``,
    its tiles) with every tile looking up its member in a table (:func:`_member_of`), reading the member's
    amax and writing the member's codes (and their transpose) at the member's offset; its program 0 writes
    every member's amax, scale and scale_inv (an empty member's amax stays 0: scale 1).  Each program
    derives its scale before it loads its tile: with the tile's values live across the scale's float64
    division the kernel needed twice the registers.  Same bits as
    ``fast.quant.fp8_tensor`` on each member alone: the same device functions on the same values.
    """
    n, device, align = len(shapes), data.device, _alignment(shapes)
    block_m, block_k, cast_warps = CAST_TILES[usage]
    tiles = [triton.cdiv(m, block_m) * triton.cdiv(k, block_k) if m * k else 0 for m, k in shapes]
    columns = [
        offsets,
        cumulative_offsets(_amax_chunks(shapes)),
        [m for m, _ in shapes],
        [k for _, k in shapes],
        cumulative_offsets(tiles),
    ]
    table, members = _member_table(columns, device)
    if sum(tiles):
        out = {name: torch.empty(n, dtype=torch.float32, device=device) for name in ("amax", "scale", "scale_inv")}
    else:  # no launch: every member is empty
        out = {
            name: torch.full((n,), EMPTY_MEMBER[name], dtype=torch.float32, device=device)
            for name in ("amax", "scale", "scale_inv")
        }
    copies = {"data": usage != "columnwise", "columnwise_data": usage != "rowwise"}
    for name, wanted in copies.items():
        if wanted:
            out[name] = torch.empty(offsets[-1], dtype=torch.uint8, device=device)
    codes = out.get("data", out.get("columnwise_data"))
    amax_bits = torch.zeros(n, dtype=torch.int32, device=device)
    with quiet_interpreter(device):
        if sum(tiles):
            _launch_grouped_amax(data, amax_bits, table, members, shapes, align, 0)
            jit(grouped_cast_kernel)[(sum(tiles),)](
                data, out.get("data", codes), out.get("columnwise_data", codes), amax_bits, out["amax"], out["scale"],
                out["scale_inv"], table, n, 0.0, F32_MAX, **FORMAT_META["float8_e4m3fn"],
                CORE=rounding_core(device), ROWWISE=copies["data"], COLWISE=copies["columnwise_data"],
                INPUT=INPUT_IDS[data.dtype], BLOCK_M=block_m, BLOCK_K=block_k, MEMBERS=members, ALIGN=align,
                num_warps=cast_warps,
            )  # fmt: skip
    return out


def nvfp4_grouped(
    data: torch.Tensor, shapes: list[tuple[int, int]], offsets: list[int], usage: str, block: str
) -> dict[str, torch.Tensor]:
    """``group.quantize`` of ``nvfp4`` in two kernel launches for all members (no per-member calls).

    The grouped amax kernel (as for ``fp8_tensor``) gives each member's amax, TE's NaN-ignoring
    ``max|x|``, which is also the amax of its transpose (no Hadamard transform here).  The grouped
    quantize kernel runs ``fast.quant.nvfp4``'s tile bodies (:func:`~fast.quant.nvfp4.quantize_tile` for
    both operands or the columnwise one, :func:`~fast.quant.nvfp4.rowwise_tile` for the rowwise one alone)
    on that module's tiles, with persistent programs that cross members: each tile gets its member's
    input, byte and scale offsets, dims, padded scale strides (``round_up(K / 16, 4)`` and
    ``round_up(M / 16, 4)`` bytes between scale rows) and tensor scales (``nvfp4_global_scales`` of its amax).
    Same bits as ``fast.quant.nvfp4`` on each member alone: the same device functions on the same values.  The
    stores take the single quantizer's L2 hint for the whole buffer (``nvfp4_store_eviction``), and a member's tiles of
    a columnwise operand run M first (both were faster on grouped expert shapes, ``docs/performance.md``).  Since
    M-first tiles start in the last member's rows rather than at the buffer's end, above 4 x the L2 the amax pass
    keeps nothing there for a columnwise operand (:func:`_grouped_kept_bytes`); smaller buffers keep the single
    quantizer's share, which stayed faster for them.
    """
    n, device = len(shapes), data.device
    rowwise, columnwise = usage != "columnwise", usage != "rowwise"
    settings = Nvfp4Settings(usage, "16x16" if block == "2d" else "1x16", "tensor", False, "rne", "te", "flt_max")
    largest = max(shapes, key=lambda shape: shape[0])
    launch = nvfp4_tiling(settings, device, largest, data.dtype, grouped=True).quantize
    rows, cols = launch.rows, launch.cols
    # EVEN: every tile whole (empty members have none)
    if columnwise:
        tiles = [triton.cdiv(m, rows) * triton.cdiv(k, cols) for m, k in shapes]
        even = all(m % rows == 0 and k % cols == 0 for m, k in shapes if m * k)
    else:  # tiles of rows x cols elements, in blocks of 16
        tiles = [triton.cdiv(m, rows) * triton.cdiv(k // 16, cols // 16) for m, k in shapes]
        even = all(m % rows == 0 and (k // 16) % (cols // 16) == 0 for m, k in shapes if m * k)
    scale_shapes = [member_scale_shapes("nvfp4", block, m, k) for m, k in shapes]
    columns = [
        offsets,
        cumulative_offsets(_amax_chunks(shapes)),
        [m for m, _ in shapes],
        [k for _, k in shapes],
        cumulative_offsets(tiles),
    ]
    columns += [cumulative_offsets([math.prod(s[side]) for s in scale_shapes]) for side in (0, 1)]
    table, members = _member_table(columns, device)
    # int32 amax bits of the members: the rowwise operand's, then (both copies) the columnwise one's copy
    amax_bits = torch.zeros((1 + (rowwise and columnwise)) * n, dtype=torch.int32, device=device)
    out: dict[str, torch.Tensor] = {}
    for prefix, wanted, side in (("", rowwise, 0), ("columnwise_", columnwise, 1)):
        if wanted:
            out[f"{prefix}fp4_data"] = torch.empty(offsets[-1] // 2, dtype=torch.uint8, device=device)
            out[f"{prefix}scales"] = torch.empty(columns[5 + side][-1], dtype=torch.uint8, device=device)
            out[f"{prefix}amax"] = amax_bits[-n:] if prefix else amax_bits[:n]
    dummy = amax_bits
    with quiet_interpreter(device):
        if sum(tiles):
            _launch_grouped_amax(data, amax_bits, table, members, shapes, 16, _grouped_kept_bytes(data, columnwise))
            words = data if data.storage_offset() % 2 == 0 else data.clone()
            words = words.view({1: torch.int16, 2: torch.int32, 4: torch.int64}[data.element_size()])
            jit(grouped_nvfp4_kernel)[(nvfp4_program_count(data, sum(tiles), launch.programs_per_sm),)](
                data, words, out.get("fp4_data", dummy), out.get("scales", dummy),
                out.get("columnwise_fp4_data", dummy), out.get("columnwise_scales", dummy), amax_bits, table, n,
                sum(tiles), INPUT=INPUT_IDS[data.dtype],
                ROWWISE=rowwise, COLUMNWISE=columnwise, TILE_2D=block == "2d", BM=rows, BK=cols,
                V=8 // data.element_size(), EVEN=even, SANITIZE=device.type != "cuda", MEMBERS=members,
                STORE_EVICTION=nvfp4_store_eviction(data, settings),
                **_resident_options(data, launch, usage, block, even),
            )  # fmt: skip
    return {name: value.view(torch.float32) if name.endswith("amax") else value for name, value in out.items()}


def _grouped_kept_bytes(data: torch.Tensor, columnwise: bool) -> int:
    """What the grouped NVFP4 amax pass keeps of the buffer's end in L2 (``fast.quant.nvfp4.launch.kept_bytes``),
    except nothing for a columnwise operand above 4 times the L2: its tiles run M first, so the first ones span the
    last member's rows rather than the buffer's end (see :func:`nvfp4_grouped`)."""
    if columnwise and data.device.type == "cuda" and not nvfp4_near_l2(data):
        return 0
    return nvfp4_kept_bytes(data, columnwise)


def _resident_options(data: torch.Tensor, launch: Nvfp4Launch, usage: str, block: str, even: bool) -> dict[str, Any]:
    """``fast.quant.nvfp4``'s launch options, with its register cap that keeps every launched program resident
    (``resident``: 65536 registers an SM for ``programs_per_sm * num_warps * 32`` threads) where the grouped kernel
    needs it.  The rowwise operand alone in 1x16 blocks: the member state that the grouped programs carry costs
    registers the single kernel does not spend, so uncapped fewer programs than planned fit an SM (capped, without
    spills, it was faster).  Ragged members of the other usages: the edge tiles' masked copy of the tile body
    (:func:`~fast.quant.nvfp4.quantize_tile`; under the cap without spills).  Not for the 16x16 rowwise tile
    (16 x 2048), which spills even uncapped."""
    resident = (usage == "rowwise" and block == "1d") or (usage != "rowwise" and not even)
    return nvfp4_launch_options(data, launch, resident=resident)


def fp8_block_grouped(
    data: torch.Tensor, shapes: list[tuple[int, int]], offsets: list[int], usage: str, block: str
) -> dict[str, torch.Tensor]:
    """``group.quantize`` of ``fp8_block`` in one kernel launch for all members (no per-member calls, no copies).

    ``fast.quant.fp8_block``'s kernel body on its tiles (``TILES``), every tile looking up its member in a
    table: the member's tile of the input, its block maxima (``_amax``), scales (``scale_from_amax``,
    ``reciprocal``) and codes (``fp8_code``), stored at the member's element offset and into its scale
    matrices (TE's GEMM-ready shapes, at the member's scale offsets).  Same bits as ``fast.quant.fp8_block``
    on each member alone: the same device functions on the same values.
    """
    n, device, align = len(shapes), data.device, _alignment(shapes)
    block_m, block_k, num_warps = BLOCK_TILES[BLOCK_NAMES[block], usage]
    tiles, _, columns, table, members = _tile_table("fp8_block", block, shapes, offsets, block_m, block_k, device)
    out: dict[str, torch.Tensor] = {}
    for prefix, wanted, side in (("", usage != "columnwise", 4), ("columnwise_", usage != "rowwise", 5)):
        if wanted:
            out[f"{prefix}data"] = torch.empty(offsets[-1], dtype=torch.uint8, device=device)
            out[f"{prefix}scale_inv"] = torch.empty(columns[side][-1], dtype=torch.float32, device=device)
    dummy = next(iter(out.values()))
    value_for_inf = DTYPE_MAX[str(data.dtype).removeprefix("torch.")]
    if sum(tiles):
        with quiet_interpreter(device):
            jit(grouped_fp8_block_kernel)[(sum(tiles),)](
                data, out.get("data", dummy), out.get("scale_inv", dummy), out.get("columnwise_data", dummy),
                out.get("columnwise_scale_inv", dummy), table, n, 0.0, value_for_inf,
                POW2=True, **FORMAT_META["float8_e4m3fn"], CORE=rounding_core(device), TWO_D=block == "2d",
                ROWWISE=usage != "columnwise", COLWISE=usage != "rowwise", INPUT=INPUT_IDS[data.dtype],
                BLOCK_M=block_m, BLOCK_K=block_k, EVEN=all(m % block_m == 0 and k % block_k == 0 for m, k in shapes),
                MEMBERS=members, ALIGN=align, num_warps=num_warps,
            )  # fmt: skip
    return out


MX_TILES: dict[tuple[str, str], MxTile] = {
    ("1d", "rowwise"): MxTile(8, 512, 4),
    ("1d", "columnwise"): MxTile(32, 128, 2),
    ("1d", "both"): MxTile(32, 128, 2),
    ("2d", "rowwise"): MxTile(32, 256, 8),
    ("2d", "columnwise"): MxTile(32, 256, 8),
    ("2d", "both"): MxTile(32, 256, 8),
}
"""The grouped MXFP8 kernel's tile per (block, usage), from ``fast.quant.mx``'s autotuned set: at most 32 rows,
so that members (multiples of 32 rows) are whole tiles in M.  The 1d tiles are the fastest of a sweep on expert
shapes (``docs/performance.md``), the 2d ones the single kernel's first.  ``QCONFORM_MX_TILE`` overrides them as it
does the single kernel's tile (benchmarks)."""


def mxfp8_grouped(
    data: torch.Tensor, shapes: list[tuple[int, int]], offsets: list[int], usage: str, block: str, scale_layout: str
) -> dict[str, torch.Tensor]:
    """``group.quantize`` of ``mxfp8`` in one kernel launch for all members (no per-member calls, no copies).

    ``fast.quant.mx``'s tile body (:func:`~fast.quant.mx.tiles.quantize_tile`: E4M3, ``rceil``, TE edges) on every
    member's tiles, each program looking up its member in a table: the member's element offset (rowwise and
    columnwise data keep the input's layout), its dims and scale offsets, its padded scale strides
    (``round_up(K / 32, 4)`` and ``round_up(K, 128)`` bytes between compact scale rows; in the swizzled layout
    the 128x4 tiles across, ``round_up(K / 32, 4) / 4`` and ``round_up(M / 32, 4) / 4``).  Swizzled scale
    buffers with padding start zeroed; compact padding, don't-care, is left unwritten, as the other grouped
    recipes leave theirs (``fast.quant.mx`` zeroes its own: its outputs are a custom op's, which ``opcheck`` runs
    twice and compares byte for byte); zeroing would take a memset of the whole scale buffer.  Same bits as
    ``fast.quant.mx`` on each member alone: the same device functions on the same values.  One program per tile,
    not persistent programs that step from member to member as the NVFP4 kernel's: MX tiles are small and many
    programs fit an SM, and the persistent form was slower.  Where ``fast.quant.mx`` stages its rowwise scales
    (both usages, compact, every non-empty member's K a multiple of 128), so does this kernel, and
    :func:`_unstage_mx_row_scales` copies them for all members in one more launch.
    """
    n, device, align = len(shapes), data.device, _alignment(shapes)
    fixed = os.environ.get("QCONFORM_MX_TILE")
    tile = MxTile(*(int(part) for part in fixed.split("x"))) if fixed else MX_TILES[block, usage]
    tiles, scale_shapes, columns, table, members = _tile_table(
        "mxfp8", block, shapes, offsets, tile.block_m, tile.block_k, device
    )
    out: dict[str, torch.Tensor] = {}
    for prefix, wanted, side in (("", usage != "columnwise", 0), ("columnwise_", usage != "rowwise", 1)):
        if wanted:
            logical = [(m, k // 32) if side == 0 else (m // 32, k) for m, k in shapes]
            padded = any(s[side] != shape for s, shape in zip(scale_shapes, logical, strict=True))
            allocate = torch.zeros if padded and scale_layout == "swizzled" else torch.empty
            out[f"{prefix}data"] = torch.empty(offsets[-1], dtype=torch.uint8, device=device)
            out[f"{prefix}scales"] = allocate(columns[4 + side][-1], dtype=torch.uint8, device=device)
    if not sum(tiles):
        return out
    i = next(i for i, (m, k) in enumerate(shapes) if m * k)
    plan = make_mx_plan(data[offsets[i] : offsets[i + 1]].view(shapes[i]), "float8_e4m3fn", "rceil", usage, block,
                    scale_layout, "te")  # fmt: skip
    dummy = next(iter(out.values()))
    even = all(m % tile.block_m == 0 and k % tile.block_k == 0 for m, k in shapes)
    staged = mx_stages_row_scales(plan, tile) and all(k % 128 == 0 for m, k in shapes if m * k)
    staging = torch.empty(sum(tiles) * tile.block_m * tile.block_k // 32 if staged else 0, dtype=torch.uint8,
                          device=device)  # fmt: skip
    with quiet_interpreter(device):
        jit(grouped_mx_kernel)[(sum(tiles),)](
            data, out.get("data", dummy), staging if staged else out.get("scales", dummy),
            out.get("columnwise_data", dummy), out.get("columnwise_scales", dummy), table, n,
            **mx_kernel_constants(plan, data.dtype), STAGED=staged, BLOCK_M=tile.block_m, BLOCK_K=tile.block_k,
            EVEN=even, MEMBERS=members, ALIGN=align,
            **(tile.options if device.type == "cuda" else {"num_warps": tile.num_warps}),
        )  # fmt: skip
        if staged:
            _unstage_mx_row_scales(staging, out["scales"], shapes, columns, tile)
    return out


def _unstage_mx_row_scales(
    staging: torch.Tensor, scales: torch.Tensor, shapes: list[tuple[int, int]], columns: list[list[int]], tile: MxTile
) -> None:
    """Copy every member's staged rowwise scales into its compact matrix in one launch (``fast.quant.mx``'s
    :func:`~fast.quant.mx.tiles.unstage_tiles` on each member's bands, a table as the quantize kernel's: 0 first staged
    tiles, 1 first copy programs, 2 M, 3 K, 4 rowwise scale offsets), dependent on the quantize kernel where the GPU
    can."""
    per_tile = tile.block_k // 32  # scale bytes a row of a tile
    tiles_k = [triton.cdiv(k // 128, per_tile // 4) for _, k in shapes]
    width = unstaged_tiles(per_tile, max(tiles_k))
    programs = [triton.cdiv(m, 32) * triton.cdiv(t, width) for (m, _), t in zip(shapes, tiles_k, strict=True)]
    table, members = _member_table(
        [columns[1], cumulative_offsets(programs), columns[2], columns[3], columns[4]], staging.device
    )
    dependent = dependent_launch(staging.device)
    jit(grouped_unstage_kernel)[(sum(programs),)](
        staging.view(torch.int32), scales.view(torch.int32), table, len(shapes), BLOCK_M=32, PER_TILE=per_tile // 4,
        TILES=width, WAIT=dependent, MEMBERS=members, num_warps=4, **({"launch_pdl": True} if dependent else {}),
    )  # fmt: skip
