"""Grouped tensors on torch (contracts ``group.layout``, ``group.quantize``, ``group.tp_partition``).

A grouped tensor holds ``num_members`` 2-D members ``[first_dims[i], last_dims[i]]`` in 1-D buffers,
members back to back: member ``i`` is ``data[offsets[i] : offsets[i + 1]].view(first_dims[i],
last_dims[i])`` with ``offsets`` the cumulative element counts.  Quantized, each buffer of the recipe
is grouped the same way (NVFP4 data at byte offsets ``offsets / 2``; block scales of member ``i`` at
``scale_offsets[i]``, that member's scale matrix in TransformerEngine's padded shape; per-tensor
values at index ``i``).  ``specs/group/*.yaml`` and ``reference/group.py`` state the layouts in full.

The member dims are host lists (TE's ``tensor_shapes``), so nothing here waits on the device.
``split`` returns views and ``stack`` one copy; ``tp_partition`` one strided copy.  ``quantize`` on the
Triton path runs grouped kernels for every recipe: every program looks its member up in a small table
(element offset, dims, scale offsets) and runs the recipe's own device functions (``fast.quant.fp8``,
``fast.quant.mx``, ``fast.quant.fp8_blockwise``, ``fast.quant.nvfp4``) on a tile of that member, writing
straight into the grouped buffers (:func:`_fp8_tensor_grouped`, :func:`_mxfp8_grouped`,
:func:`_fp8_block_grouped`, :func:`_nvfp4_grouped`; per-tensor amaxes by one grouped amax pass first).  On
the torch path, members whose stacked ``[sum(M), K]`` quantization is the grouped buffers as they are (MXFP8
of one ``K`` with scale matrices that abut; FP8 blockwise members of one shape with whole 128-row blocks, plus
one copy of each buffer that holds them side by side) take one call on the stacked view (:func:`_stacking`);
otherwise every grouped buffer is allocated once and each member is quantized alone by the recipe's
``fast.quant`` quantizer (``fast.buffers.quantizer``), its outputs copied into its slots.

Source: NVIDIA/TransformerEngine ``pytorch/tensor/storage/grouped_tensor_storage.py``
(``make_grouped_tensor``, ``split_into_quantized_tensors``, ``quantize``),
``pytorch/module/grouped_linear.py`` (``set_tensor_parallel_attributes``); shared/notes/te_contracts.md §7.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import torch

from fast._triton import device, float32_bits, jit, selected_path, tl, triton, wait_for_primary
from fast.buffers import quantizer
from fast.quant.fp8 import (
    CAST_TILES,
    DTYPE_MAX,
    F32_MAX,
    FORMAT_META,
    INPUT_IDS,
    fp8_code,
    quiet_interpreter,
    reciprocal,
    rounding_core,
    scale_from_amax,
)
from fast.quant.fp8_blockwise import TILES as BLOCK_TILES
from fast.quant.fp8_blockwise import quantize_tile as block_tile
from fast.quant.mx.launch import Tile as _MxTile
from fast.quant.mx.launch import dependent_launch, unstaged_tiles
from fast.quant.mx.launch import has_fp8_conversion as _has_fp8_conversion
from fast.quant.mx.launch import kernel_constants as _mx_constants
from fast.quant.mx.launch import stages_row_scales as _stages_mx_row_scales
from fast.quant.mx.plan import make_plan as _mx_plan
from fast.quant.mx.tiles import quantize_tile as mx_tile
from fast.quant.mx.tiles import unstage_tiles as mx_unstage_tiles
from fast.quant.nvfp4.column_tiles import quantize_tile as quantize_nvfp4_tile
from fast.quant.nvfp4.launch import Launch as _NvLaunch
from fast.quant.nvfp4.launch import kept_bytes as _kept_bytes
from fast.quant.nvfp4.launch import launch_options as _nv_launch_options
from fast.quant.nvfp4.launch import near_l2 as _near_l2
from fast.quant.nvfp4.launch import program_count as _nv_programs
from fast.quant.nvfp4.launch import select_tiling as _nv_tiling
from fast.quant.nvfp4.launch import store_eviction as _store_eviction
from fast.quant.nvfp4.settings import Settings as _NvSettings
from fast.quant.nvfp4.tiles import global_scales as _global_scales
from fast.quant.nvfp4.tiles import rowwise_tile as rowwise_nvfp4_tile

__all__ = ["layout", "quantize", "split", "stack", "tp_partition"]

RECIPES: tuple[str, ...] = ("none", "fp8_tensor", "mxfp8", "fp8_block", "nvfp4")
BLOCKS: tuple[str, ...] = ("none", "1d", "2d")
SCALE_LAYOUTS: tuple[str, ...] = ("compact", "swizzled")
USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")
X_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
PARALLEL_MODES: tuple[str, ...] = ("column", "row")

_DIVISOR = {"mxfp8": 32, "nvfp4": 16}
_BLOCK_NAMES = {"1d": "1x128", "2d": "128x128"}
"""``fast.quant.fp8_block``'s name of each ``block``."""
_Outputs = dict[str, tuple[str, str, str]]
_GROUPED: dict[str, _Outputs] = {
    # grouped output: (member output, placement, which usage has it)
    "fp8_tensor": {
        "data": ("data", "elements", "rowwise"),
        "columnwise_data": ("columnwise_data", "elements", "columnwise"),
        "amax": ("amax", "member", "always"),
        "scale": ("scale", "member", "always"),
        "scale_inv": ("scale_inv", "member", "always"),
    },
    "mxfp8": {
        "data": ("data_rowwise", "elements", "rowwise"),
        "scales": ("scale_rowwise", "scales", "rowwise"),
        "columnwise_data": ("data_columnwise", "elements", "columnwise"),
        "columnwise_scales": ("scale_columnwise", "scales", "columnwise"),
    },
    "fp8_block": {
        "data": ("data", "elements", "rowwise"),
        "scale_inv": ("scale_inv", "scales", "rowwise"),
        "columnwise_data": ("columnwise_data", "elements", "columnwise"),
        "columnwise_scale_inv": ("columnwise_scale_inv", "scales", "columnwise"),
    },
    "nvfp4": {
        "fp4_data": ("data", "bytes", "rowwise"),
        "scales": ("scales", "scales", "rowwise"),
        "amax": ("amax", "member", "rowwise"),
        "columnwise_fp4_data": ("columnwise_data", "bytes", "columnwise"),
        "columnwise_scales": ("columnwise_scales", "scales", "columnwise"),
        "columnwise_amax": ("columnwise_amax", "member", "columnwise"),
    },
}
_EMPTY_MEMBER = {"amax": 0.0, "scale": 1.0, "scale_inv": 1.0, "columnwise_amax": 0.0}
"""Per-member values of an empty member (the recipe's results for an amax of 0); every per-member buffer starts so."""


def split(data: torch.Tensor, offsets: Sequence[int], shapes: Sequence[tuple[int, int]]) -> list[torch.Tensor]:
    """The members of a grouped buffer as views: member ``i`` is ``data[offsets[i]:offsets[i+1]].view(shapes[i])``.

    Raises ``TypeError`` unless ``data`` is a tensor; ``ValueError`` unless ``data`` is 1-D, ``offsets``
    has one entry more than ``shapes``, starts at 0, never decreases, steps by each member's numel and
    ends at ``data.numel()``; each message names the member and the constraint.
    """
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"Got data of type {type(data).__name__}, but data must be a torch.Tensor")
    if data.dim() != 1:
        raise ValueError(f"Got data.shape={tuple(data.shape)}, but data must be 1-D (members back to back)")
    bounds = [int(o) for o in offsets]
    if len(bounds) != len(shapes) + 1 or bounds[0] != 0:
        raise ValueError(
            f"Got offsets={bounds} for {len(shapes)} members, but offsets has one entry per member plus one, "
            "starting at 0"
        )
    for i, (m, k) in enumerate(shapes):
        if bounds[i + 1] < bounds[i]:
            raise ValueError(
                f"Got offsets[{i + 1}]={bounds[i + 1]} < offsets[{i}]={bounds[i]}, but offsets must not decrease"
            )
        if bounds[i + 1] - bounds[i] != m * k:
            raise ValueError(
                f"Got member {i} of shape ({m}, {k}) between offsets {bounds[i]} and {bounds[i + 1]}, "
                f"but a member spans exactly its {m * k} elements"
            )
    if bounds[-1] != data.numel():
        raise ValueError(f"Got offsets ending at {bounds[-1]}, but data holds {data.numel()} elements: they must agree")
    return [data[bounds[i] : bounds[i + 1]].view(m, k) for i, (m, k) in enumerate(shapes)]


def stack(members: Sequence[torch.Tensor]) -> torch.Tensor:
    """One 1-D buffer holding ``members`` back to back, each row-major: the inverse of :func:`split`.

    Raises ``ValueError`` unless there is at least one member and every member is a 2-D tensor of
    member 0's dtype and device (the message names the member).
    """
    if not members:
        raise ValueError("Got no members, but a grouped tensor has at least one")
    first = members[0]
    for i, member in enumerate(members):
        if not isinstance(member, torch.Tensor) or member.dim() != 2:
            got = tuple(member.shape) if isinstance(member, torch.Tensor) else type(member).__name__
            raise ValueError(f"Got member {i} of shape {got}, but members must be 2-D tensors")
        if member.dtype != first.dtype or member.device != first.device:
            raise ValueError(
                f"Got member {i} with dtype {member.dtype} on {member.device}, but member 0 has dtype {first.dtype} "
                f"on {first.device}: a grouped tensor has one dtype and one device"
            )
    return torch.cat([member.reshape(-1) for member in members])


def layout(
    data: torch.Tensor,
    *,
    num_members: int,
    first_dims: Sequence[int],
    last_dims: Sequence[int],
    recipe: str = "none",
    block: str = "none",
) -> dict[str, torch.Tensor]:
    """Offsets, logical shape and scale offsets of a grouped tensor, and its buffer split and stacked back.

    Contract
    --------
    ``group.layout`` (``reference.group.layout``): ``offsets`` the cumulative member numels (length
    ``num_members + 1``); ``logical_shape`` ``[sum(first_dims), N]`` when every last dim is ``N``,
    ``[M, sum(last_dims)]`` when only the first dims are equal to ``M``, ``[1, total]`` when both
    vary; ``scale_offsets`` / ``columnwise_scale_offsets`` the cumulative sizes of the members' scale
    buffers under ``recipe`` (TE ``get_scale_shape``); ``data`` = ``stack(split(data))``.

    Source
    ------
    TE ``GroupedTensorStorage.make_grouped_tensor`` and its class docstring; ``specs/group/layout.yaml``.

    Encoding
    --------
    int64 tensors on ``data``'s device; ``data`` a new tensor like ``data``.

    Edge cases
    ----------
    Empty members add nothing to any offset.

    Raises as ``reference.group.layout``: ``TypeError`` unless ``data`` is a tensor; ``ValueError``
    for an unknown ``recipe``, a ``block`` the recipe lacks, ``num_members`` below 1, dims lists of
    another length or holding anything but ints >= 0, a member the recipe's blocks do not divide,
    and ``data`` not 1-D or not the members' total size.
    """
    shapes = _member_shapes(num_members, first_dims, last_dims)
    _check_recipe(recipe, block, RECIPES, shapes)
    offsets = _offsets([m * k for m, k in shapes])
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"Got data of type {type(data).__name__}, but data must be a torch.Tensor")
    _check_buffer(data, offsets[-1])

    def as_tensor(values: Sequence[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=data.device)

    out = {
        "offsets": as_tensor(offsets),
        "logical_shape": as_tensor(_logical_shape(shapes)),
        "data": stack(split(data, offsets, shapes)),
    }
    if recipe != "none":
        rowwise, columnwise = zip(*(_scale_shapes(recipe, block, m, k) for m, k in shapes), strict=True)
        out["scale_offsets"] = as_tensor(_offsets([math.prod(s) for s in rowwise]))
        out["columnwise_scale_offsets"] = as_tensor(_offsets([math.prod(s) for s in columnwise]))
    return out


def quantize(
    data: torch.Tensor,
    *,
    num_members: int,
    first_dims: Sequence[int],
    last_dims: Sequence[int],
    recipe: str,
    block: str,
    scale_layout: str = "compact",
    usage: str = "both",
    x_dtype: str | None = None,
) -> dict[str, torch.Tensor]:
    """Quantize every member of a grouped tensor alone, straight into the grouped buffers.

    Contract
    --------
    ``group.quantize`` (``reference.group.quantize``): member by member, the grouped buffers hold the
    bytes of the recipe's quantizer run on that member alone with TransformerEngine's defaults (E4M3;
    ``fp8_tensor``; ``mxfp8`` rceil with TE edges, ``blocks=block``, ``scale_layout``; ``fp8_block``
    1x128 / 128x128 power-of-two; ``nvfp4`` 1x16 / 16x16, TE rule), at the member's offsets.  On the
    Triton path every recipe runs a grouped kernel; on the torch path members that stack (module
    docstring) are quantized in one call on the stacked view: the same bytes.

    Source
    ------
    TE ``GroupedTensorStorage.quantize`` (per-member ``update_quantized`` into views of the grouped
    buffers); ``specs/group/quantize.yaml``.

    Encoding
    --------
    As ``reference.group.quantize``, without the ``_padding`` masks: block-scale padding is left as
    allocated (``torch.empty``, don't-care), so are the bytes of every slot the member does not fill
    (a stacked call leaves the quantizer's own padding).

    Edge cases
    ----------
    An empty member writes nothing; its amax is 0, its scale and scale_inv 1.

    Raises as ``reference.group.quantize``: ``TypeError`` unless ``data`` is a float32, bfloat16 or
    float16 tensor; ``ValueError`` as :func:`layout` (``recipe="none"`` refused), for an unknown
    ``scale_layout``, ``usage`` or ``x_dtype``, swizzled scales outside MXFP8, and an ``x_dtype`` that
    contradicts ``data``; and (fast only) for a non-contiguous ``data``.
    """
    shapes = _member_shapes(num_members, first_dims, last_dims)
    _check_recipe(recipe, block, RECIPES[1:], shapes)
    _check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    if scale_layout != "compact" and recipe != "mxfp8":
        raise ValueError(f"Got scale_layout={scale_layout!r} and recipe={recipe!r}, but only mxfp8 has swizzled scales")
    _check_choice("usage", usage, USAGES)
    offsets = _offsets([m * k for m, k in shapes])
    if not isinstance(data, torch.Tensor) or data.dtype not in X_DTYPES.values():
        got = f"data.dtype={data.dtype}" if isinstance(data, torch.Tensor) else f"data of type {type(data).__name__}"
        raise TypeError(f"Got {got}, but data must be a float32, bfloat16 or float16 torch.Tensor")
    _check_buffer(data, offsets[-1])
    if not data.is_contiguous():
        raise ValueError(f"Got data with stride {data.stride()}, but quantize reads one contiguous buffer")
    if x_dtype is not None:
        _check_choice("x_dtype", x_dtype, tuple(X_DTYPES))
        if X_DTYPES[x_dtype] != data.dtype:
            raise ValueError(f"Got data.dtype={data.dtype} and x_dtype={x_dtype!r}, but they must name the same dtype")
    if selected_path(data.device) == "triton":
        if recipe == "mxfp8" and (data.device.type != "cuda" or _has_fp8_conversion(data.device)):
            return _mxfp8_grouped(data, shapes, offsets, usage, block, scale_layout)
        grouped = {"fp8_tensor": _fp8_tensor_grouped, "fp8_block": _fp8_block_grouped, "nvfp4": _nvfp4_grouped}
        if recipe in grouped:
            return grouped[recipe](data, shapes, offsets, usage, block)
    produced = {n: entry for n, entry in _GROUPED[recipe].items() if entry[2] in ("always", usage) or usage == "both"}
    quantize_member = quantizer(recipe, block, usage, scale_layout)
    stacking = _stacking(recipe, block, scale_layout, usage, shapes, produced)
    if stacking is not None:
        results = quantize_member(data.view(-1, shapes[0][1]))
        out = {}
        for name, (source, _, _) in produced.items():
            stacked = results[source]
            if stacking[name]:  # [A, n * B] -> [n, A, B]
                stacked = stacked.view(stacked.shape[0], num_members, -1).transpose(0, 1)
            out[name] = stacked.reshape(-1)
        return out
    scale_shapes = [_scale_shapes(recipe, block, m, k) for m, k in shapes]
    slots = {"rowwise": [s[0] for s in scale_shapes], "columnwise": [s[1] for s in scale_shapes]}
    out, scale_offsets = _allocate(produced, offsets, slots, num_members, data.device)
    for i, member in enumerate(split(data, offsets, shapes)):
        if member.numel() == 0:
            continue  # nothing to write: its per-member values are allocated as an empty member's
        results = quantize_member(member)
        for name, (source, placement, side) in produced.items():
            if placement == "member":
                out[name][i : i + 1].copy_(results[source].reshape(1))
            elif placement == "scales":
                start, end = scale_offsets[name][i : i + 2]
                scales = results[source]
                out[name][start:end].view(slots[side][i])[: scales.shape[0], : scales.shape[1]].copy_(scales)
            else:
                per_byte = 2 if placement == "bytes" else 1
                out[name][offsets[i] // per_byte : offsets[i + 1] // per_byte].copy_(results[source].reshape(-1))
    return out


def tp_partition(w: torch.Tensor, *, parallel: str, tp_size: int, rank: int) -> dict[str, torch.Tensor]:
    """The shard of a linear weight (2-D, or a 3-D grouped weight) that tensor-parallel rank ``rank`` keeps.

    Contract
    --------
    ``group.tp_partition`` (``reference.group.tp_partition``): ``w`` ``[out, in]`` or
    ``[num_gemms, out, in]`` split along ``out`` (``parallel="column"``) or ``in`` (``"row"``) into
    ``tp_size`` equal chunks; ``shard`` is chunk ``rank``, ``partition_dim`` the axis (2-D: 0 or 1;
    3-D: 1 or 2), so that a grouped weight's shard is its members' 2-D shards stacked.

    Source
    ------
    TE ``GroupedLinear.set_tensor_parallel_attributes`` (dims 0 / 1 of the per-expert 2-D weights);
    ``specs/group/tp_partition.yaml``.

    Encoding
    --------
    ``shard``: a new contiguous tensor (its own storage, never a view of ``w``); ``partition_dim``
    int64 ``[1]`` on ``w``'s device.

    Edge cases
    ----------
    ``tp_size = 1`` copies the whole weight; empty dims give empty shards.

    Raises ``TypeError`` unless ``w`` is a tensor; ``ValueError`` for an unknown ``parallel``, ``w``
    not 2-D or 3-D, ``tp_size`` not an int >= 1, ``rank`` outside ``0 .. tp_size - 1`` and a
    partitioned axis that ``tp_size`` does not divide.
    """
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"Got w of type {type(w).__name__}, but w must be a torch.Tensor")
    dim = _check_partition(tuple(w.shape), parallel, tp_size, rank)
    size = w.shape[dim] // tp_size
    shard = w.narrow(dim, rank * size, size).clone(memory_format=torch.contiguous_format)
    return {"shard": shard, "partition_dim": torch.tensor([dim], dtype=torch.int64, device=w.device)}


# %% Shared pieces


def _check_choice(name: str, value: object, allowed: tuple[object, ...]) -> None:
    if not any(type(value) is type(choice) and value == choice for choice in allowed):
        raise ValueError(f"Got {name}={value!r}, but {name} must be one of {list(allowed)}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _member_shapes(num_members: object, first_dims: object, last_dims: object) -> list[tuple[int, int]]:
    """The members' ``(M, K)`` after checking the count and both dims lists."""
    if not _is_int(num_members) or num_members < 1:  # type: ignore[operator]
        raise ValueError(f"Got num_members={num_members!r}, but a grouped tensor has an int >= 1 of members")
    dims = {}
    for name, values in (("first_dims", first_dims), ("last_dims", last_dims)):
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
            raise ValueError(f"Got {name}={values!r}, but {name} must be a sequence of ints")
        if len(values) != num_members:
            raise ValueError(
                f"Got {name} with {len(values)} entries and num_members={num_members}, but there is one per member"
            )
        for i, v in enumerate(values):
            if not _is_int(v) or v < 0:
                raise ValueError(f"Got {name}[{i}]={v!r}, but member dims must be ints >= 0 (member {i})")
        dims[name] = [int(v) for v in values]
    return list(zip(dims["first_dims"], dims["last_dims"], strict=True))


def _check_recipe(recipe: str, block: str, allowed: tuple[str, ...], shapes: list[tuple[int, int]]) -> None:
    _check_choice("recipe", recipe, allowed)
    _check_choice("block", block, BLOCKS)
    if (block == "none") != (recipe in ("none", "fp8_tensor")):
        wanted = "'none'" if recipe in ("none", "fp8_tensor") else "'1d' or '2d'"
        raise ValueError(f"Got recipe={recipe!r} and block={block!r}, but {recipe} takes block {wanted}")
    divisor = _DIVISOR.get(recipe)
    for i, shape in enumerate(shapes):
        if divisor and any(d % divisor for d in shape):
            raise ValueError(
                f"Got member {i} of shape {shape}, but {recipe} needs both dims of every member to be "
                f"multiples of {divisor} (its {divisor}-element blocks run along both)"
            )


def _check_buffer(data: torch.Tensor, total: int) -> None:
    if data.dim() != 1:
        raise ValueError(f"Got data.shape={tuple(data.shape)}, but data must be 1-D (members back to back)")
    if data.numel() != total:
        raise ValueError(
            f"Got data with {data.numel()} elements, but the members' shapes (first_dims[i] x last_dims[i]) "
            f"add up to {total}: the buffer must end where the last member ends"
        )


def _check_partition(shape: tuple[int, ...], parallel: str, tp_size: object, rank: object) -> int:
    """The partitioned axis of a weight of ``shape``, after checking the arguments."""
    _check_choice("parallel", parallel, PARALLEL_MODES)
    if len(shape) not in (2, 3):
        raise ValueError(
            f"Got w.shape={shape}, but w must be a weight [out, in] or a grouped weight [num_gemms, out, in]"
        )
    if not _is_int(tp_size) or tp_size < 1:  # type: ignore[operator]
        raise ValueError(f"Got tp_size={tp_size!r}, but tp_size must be an int >= 1")
    if not _is_int(rank) or not 0 <= rank < tp_size:  # type: ignore[operator]
        raise ValueError(f"Got rank={rank!r} and tp_size={tp_size}, but rank must be an int in 0 .. tp_size - 1")
    dim = len(shape) - (2 if parallel == "column" else 1)
    if shape[dim] % tp_size:  # type: ignore[operator]
        axis = "out" if parallel == "column" else "in"
        raise ValueError(
            f"Got w.shape[{dim}]={shape[dim]} (the {axis} axis) and tp_size={tp_size}, but {parallel}-parallel "
            f"splits that axis into tp_size equal shards: it must be divisible by tp_size"
        )
    return dim


def _offsets(sizes: Sequence[int]) -> list[int]:
    """``[0, s0, s0 + s1, ...]`` as host ints."""
    out = [0]
    for size in sizes:
        out.append(out[-1] + size)
    return out


def _logical_shape(shapes: list[tuple[int, int]]) -> tuple[int, int]:
    firsts, lasts = [m for m, _ in shapes], [k for _, k in shapes]
    if len(set(lasts)) == 1:
        return sum(firsts), lasts[0]
    if len(set(firsts)) == 1:
        return firsts[0], sum(lasts)
    return 1, sum(m * k for m, k in shapes)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _scale_shapes(recipe: str, block: str, m: int, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """TE ``get_scale_shape`` of an ``[m, k]`` member, rowwise and columnwise."""
    if recipe == "fp8_tensor":
        return (1,), (1,)
    if recipe == "mxfp8":
        return (_round_up(m, 128), _round_up(k // 32, 4)), (_round_up(m // 32, 4), _round_up(k, 128))
    if recipe == "nvfp4":
        return (_round_up(m, 128), _round_up(k // 16, 4)), (_round_up(k, 128), _round_up(m // 16, 4))
    mb, kb = -(-m // 128), -(-k // 128)
    if block == "1d":
        return (kb, _round_up(m, 4)), (mb, _round_up(k, 4))
    return (mb, _round_up(kb, 4)), (kb, _round_up(mb, 4))


def _stacking(
    recipe: str, block: str, scale_layout: str, usage: str, shapes: list[tuple[int, int]], produced: _Outputs
) -> dict[str, bool] | None:
    """How the buffers of the members quantized as one stacked ``[sum(M), K]`` tensor give the grouped buffers,
    or None where they do not: per grouped buffer, False if the stacked buffer is it as it is (the members'
    matrices one below the other), True if the stacked buffer is ``[A, n * B]`` with member ``i`` in columns
    ``i * B .. (i + 1) * B`` (one copy moves the member axis out).

    MXFP8 (blocks never cross a member: its dims are multiples of 32; nothing per tensor): data keeps the
    input's layout, and the compact scale matrices ``[round_up(M, 128), round_up(K / 32, 4)]`` and
    ``[round_up(M / 32, 4), round_up(K, 128)]`` stack member after member when every member has the same
    ``K`` and every member but the last a multiple of 128 rows (no padding rows between members).  Swizzled
    rowwise scales stack too (whole 128x4 tiles, row-tile major); swizzled columnwise scales do not (they
    are tiled as the transpose ``[K, M / 32]``).

    FP8 blockwise, members all ``[M, K]`` with ``M`` a multiple of 128 (no 128-row block or tile crosses a
    member): rowwise data and the 128-row-block scales (1d columnwise ``[ceil(M / 128), round_up(K, 4)]``,
    2d rowwise ``[ceil(M / 128), round_up(ceil(K / 128), 4)]``) stack; the transposed ones hold the members
    side by side: 1d rowwise scales ``[ceil(K / 128), n * M]``, the columnwise data ``[K, n * M]`` and 2d
    columnwise scales ``[ceil(K / 128), n * M / 128]`` (only with no padding: ``M / 128`` a multiple of 4).
    """
    k = shapes[0][1]
    if recipe == "mxfp8":
        stacks = (
            (scale_layout == "compact" or usage == "rowwise")
            and k > 0
            and sum(m for m, _ in shapes) > 0
            and all(kk == k for _, kk in shapes)
            and all(m % 128 == 0 for m, _ in shapes[:-1])
        )
        return dict.fromkeys(produced, False) if stacks else None
    m = shapes[0][0]
    if recipe != "fp8_block" or m * k == 0 or m % 128 or any(shape != (m, k) for shape in shapes):
        return None
    if block == "2d" and usage != "rowwise" and (m // 128) % 4:
        return None
    sideways = {"1d": {"scale_inv", "columnwise_data"}, "2d": {"columnwise_data", "columnwise_scale_inv"}}[block]
    return {name: name in sideways for name in produced}


def _allocate(
    produced: _Outputs,
    offsets: list[int],
    slots: dict[str, list[tuple[int, ...]]],
    num_members: int,
    device: torch.device,
) -> tuple[dict[str, torch.Tensor], dict[str, list[int]]]:
    """The grouped buffers, allocated once (per-member values as an empty member's), and the scale offsets."""
    out: dict[str, torch.Tensor] = {}
    scale_offsets: dict[str, list[int]] = {}
    for name, (_, placement, side) in produced.items():
        if placement == "member":
            out[name] = torch.full((num_members,), _EMPTY_MEMBER[name], dtype=torch.float32, device=device)
        elif placement == "scales":
            scale_offsets[name] = _offsets([math.prod(s) for s in slots[side]])
            dtype = torch.uint8 if name.endswith("scales") else torch.float32
            out[name] = torch.empty(scale_offsets[name][-1], dtype=dtype, device=device)
        else:
            out[name] = torch.empty(offsets[-1] // (2 if placement == "bytes" else 1), dtype=torch.uint8, device=device)
    return out, scale_offsets


def gemm(
    a: torch.Tensor, b: torch.Tensor, *, form: str, groups: int, group_sizes: Sequence[int]
) -> dict[str, torch.Tensor]:
    """``group.gemm``: :func:`fast.gemm.grouped` (the grouped matmul lives with the other GEMMs)."""
    from fast.gemm import grouped

    return grouped(a, b, form=form, groups=groups, group_sizes=group_sizes)


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
    scale_shapes = [_scale_shapes(recipe, block, m, k) for m, k in shapes]
    columns = [offsets, _offsets(tiles), [m for m, _ in shapes], [k for _, k in shapes]]
    columns += [_offsets([math.prod(s[side]) for s in scale_shapes]) for side in (0, 1)]
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
    (NVFP4's rowwise operand alone: 45% of L2, ``_kept_bytes``, for its quantize pass, which reads those tiles
    first) the last chunks are loaded evict-last and the rest evict-first; without (FP8, NVFP4 with a columnwise
    operand), every chunk with the default policy."""
    block, num_warps, per_sm = AMAX_CHUNK
    sizes = [m * k for m, k in shapes]
    chunks = sum(_amax_chunks(shapes))
    jit(_grouped_amax_kernel)[(_nv_programs(data, chunks, per_sm),)](
        data, amax_bits, table, chunks, min(chunks, kept_bytes // (block * data.element_size())),
        INPUT=INPUT_IDS[data.dtype], BLOCK=block, MEMBERS=members, ALIGN=align,
        EVEN=all(size % block == 0 for size in sizes), STREAM="evict_first" if kept_bytes else "", num_warps=num_warps,
    )  # fmt: skip


def _fp8_tensor_grouped(
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
    division the kernel took 70 registers (32 now, Triton 3.6 for sm_90).  Same bits as
    ``fast.quant.fp8_tensor`` on each member alone: the same device functions on the same values.
    """
    n, device, align = len(shapes), data.device, _alignment(shapes)
    block_m, block_k, cast_warps = CAST_TILES[usage]
    tiles = [triton.cdiv(m, block_m) * triton.cdiv(k, block_k) if m * k else 0 for m, k in shapes]
    columns = [offsets, _offsets(_amax_chunks(shapes)), [m for m, _ in shapes], [k for _, k in shapes], _offsets(tiles)]
    table, members = _member_table(columns, device)
    if sum(tiles):
        out = {name: torch.empty(n, dtype=torch.float32, device=device) for name in ("amax", "scale", "scale_inv")}
    else:  # no launch: every member is empty
        out = {
            name: torch.full((n,), _EMPTY_MEMBER[name], dtype=torch.float32, device=device)
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
            jit(_grouped_cast_kernel)[(sum(tiles),)](
                data, out.get("data", codes), out.get("columnwise_data", codes), amax_bits, out["amax"], out["scale"],
                out["scale_inv"], table, n, 0.0, F32_MAX, **FORMAT_META["float8_e4m3fn"],
                CORE=rounding_core(device), ROWWISE=copies["data"], COLWISE=copies["columnwise_data"],
                INPUT=INPUT_IDS[data.dtype], BLOCK_M=block_m, BLOCK_K=block_k, MEMBERS=members, ALIGN=align,
                num_warps=cast_warps,
            )  # fmt: skip
    return out


def _nvfp4_grouped(
    data: torch.Tensor, shapes: list[tuple[int, int]], offsets: list[int], usage: str, block: str
) -> dict[str, torch.Tensor]:
    """``group.quantize`` of ``nvfp4`` in two kernel launches for all members (no per-member calls).

    The grouped amax kernel (as for ``fp8_tensor``) gives each member's amax, TE's NaN-ignoring
    ``max|x|``, which is also the amax of its transpose (no Hadamard transform here).  The grouped
    quantize kernel runs ``fast.quant.nvfp4``'s tile bodies (:func:`~fast.quant.nvfp4.quantize_tile` for
    both operands or the columnwise one, :func:`~fast.quant.nvfp4.rowwise_tile` for the rowwise one alone)
    on that module's tiles, with persistent programs that cross members: each tile gets its member's
    input, byte and scale offsets, dims, padded scale strides (``round_up(K / 16, 4)`` and
    ``round_up(M / 16, 4)`` bytes between scale rows) and tensor scales (``_global_scales`` of its amax).
    Same bits as ``fast.quant.nvfp4`` on each member alone: the same device functions on the same values.  The
    stores take the single quantizer's L2 hint for the whole buffer (``_store_eviction``), and a member's tiles of
    a columnwise operand run M first.  H100, bfloat16, 8 x [4096, 7168] (HEAD's none and K first against
    ``evict_last`` and M first, 2026-11-27 eighth session): columnwise 0.4204 -> 0.4052 ms, both 0.5564 -> 0.5319,
    both in 16 x 16 tiles 0.5656 -> 0.4919; 8 uneven experts (1056 and 8160 rows among them: transposed rows 16
    bytes off a sector) columnwise 0.4401 -> 0.4137, both 0.5926 -> 0.5607; 8 x [1024, 7168] (``evict_first``)
    rowwise 0.1070 -> 0.1032, columnwise 0.1097 -> 0.1059.  M first alone, on 8 uneven experts with
    ``evict_last``: columnwise 0.4273 -> 0.4140, both 0.5707 -> 0.5656 (``docs/bench/2026-11-27h-h100/``).  So above 4
    x the L2 the amax pass keeps nothing there for a columnwise operand (the single quantizer's 30% of L2 at the
    buffer's end, which K-first tiles walked in reverse read first, against none; same session, ``kept_ab.json``): 8
    x [4096, 7168] both 0.5359 -> 0.5308 ms, columnwise 0.4050 -> 0.3987, uneven experts both 0.5636 -> 0.5585,
    columnwise 0.4131 -> 0.4068; but 8 x [1024, 7168] both 0.1426 -> 0.1498, so smaller buffers keep it.
    """
    n, device = len(shapes), data.device
    rowwise, columnwise = usage != "columnwise", usage != "rowwise"
    settings = _NvSettings(usage, "16x16" if block == "2d" else "1x16", "tensor", False, "rne", "te", "flt_max")
    largest = max(shapes, key=lambda shape: shape[0])
    launch = _nv_tiling(settings, device, largest, data.dtype, grouped=True).quantize
    rows, cols = launch.rows, launch.cols
    # EVEN: every tile whole (empty members have none)
    if columnwise:
        tiles = [triton.cdiv(m, rows) * triton.cdiv(k, cols) for m, k in shapes]
        even = all(m % rows == 0 and k % cols == 0 for m, k in shapes if m * k)
    else:  # tiles of rows x cols elements, in blocks of 16
        tiles = [triton.cdiv(m, rows) * triton.cdiv(k // 16, cols // 16) for m, k in shapes]
        even = all(m % rows == 0 and (k // 16) % (cols // 16) == 0 for m, k in shapes if m * k)
    scale_shapes = [_scale_shapes("nvfp4", block, m, k) for m, k in shapes]
    columns = [offsets, _offsets(_amax_chunks(shapes)), [m for m, _ in shapes], [k for _, k in shapes], _offsets(tiles)]
    columns += [_offsets([math.prod(s[side]) for s in scale_shapes]) for side in (0, 1)]
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
            jit(_grouped_nvfp4_kernel)[(_nv_programs(data, sum(tiles), launch.programs_per_sm),)](
                data, words, out.get("fp4_data", dummy), out.get("scales", dummy),
                out.get("columnwise_fp4_data", dummy), out.get("columnwise_scales", dummy), amax_bits, table, n,
                sum(tiles), INPUT=INPUT_IDS[data.dtype],
                ROWWISE=rowwise, COLUMNWISE=columnwise, TILE_2D=block == "2d", BM=rows, BK=cols,
                V=8 // data.element_size(), EVEN=even, SANITIZE=device.type != "cuda", MEMBERS=members,
                STORE_EVICTION=_store_eviction(data, settings), **_resident_options(data, launch, usage, block, even),
            )  # fmt: skip
    return {name: value.view(torch.float32) if name.endswith("amax") else value for name, value in out.items()}


def _grouped_kept_bytes(data: torch.Tensor, columnwise: bool) -> int:
    """What the grouped NVFP4 amax pass keeps of the buffer's end in L2 (``fast.quant.nvfp4._kept_bytes``), except
    nothing for a columnwise operand above 4 times the L2: its tiles run M first, so the first ones span the last
    member's rows rather than the buffer's end (H100 figures in :func:`_nvfp4_grouped`)."""
    if columnwise and data.device.type == "cuda" and not _near_l2(data):
        return 0
    return _kept_bytes(data, columnwise)


def _resident_options(data: torch.Tensor, launch: _NvLaunch, usage: str, block: str, even: bool) -> dict[str, Any]:
    """``fast.quant.nvfp4``'s launch options, with its register cap that keeps every launched program resident
    (``resident``: 65536 registers an SM for ``programs_per_sm * num_warps * 32`` threads) where the grouped kernel
    needs it.  The rowwise operand alone in 1x16 blocks: the member state that the grouped programs carry costs
    registers the single kernel does not spend (tiles of 2 x 2048: 79 in Triton 3.6 for sm_90, so 6 of 8 programs
    per SM ran; H100, 8 x [4096, 7168]: 0.424 ms, 1.11x single; capped at 64, without spills, 0.388 ms).  Ragged
    members of the other usages: the edge tiles' masked copy of the tile body (:func:`~fast.quant.nvfp4.quantize_tile`,
    228 registers uncapped, 168 without spills under the cap of 3 programs of 4 warps).  Not for the 16x16 rowwise
    tile (16 x 2048), which spills even uncapped."""
    resident = (usage == "rowwise" and block == "1d") or (usage != "rowwise" and not even)
    return _nv_launch_options(data, launch, resident=resident)


def _fp8_block_grouped(
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
    block_m, block_k, num_warps = BLOCK_TILES[_BLOCK_NAMES[block], usage]
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
            jit(_grouped_fp8_block_kernel)[(sum(tiles),)](
                data, out.get("data", dummy), out.get("scale_inv", dummy), out.get("columnwise_data", dummy),
                out.get("columnwise_scale_inv", dummy), table, n, 0.0, value_for_inf,
                POW2=True, **FORMAT_META["float8_e4m3fn"], CORE=rounding_core(device), TWO_D=block == "2d",
                ROWWISE=usage != "columnwise", COLWISE=usage != "rowwise", INPUT=INPUT_IDS[data.dtype],
                BLOCK_M=block_m, BLOCK_K=block_k, EVEN=all(m % block_m == 0 and k % block_k == 0 for m, k in shapes),
                MEMBERS=members, ALIGN=align, num_warps=num_warps,
            )  # fmt: skip
    return out


MX_TILES: dict[tuple[str, str], _MxTile] = {
    ("1d", "rowwise"): _MxTile(8, 512, 4),
    ("1d", "columnwise"): _MxTile(32, 128, 2),
    ("1d", "both"): _MxTile(32, 128, 2),
    ("2d", "rowwise"): _MxTile(32, 256, 8),
    ("2d", "columnwise"): _MxTile(32, 256, 8),
    ("2d", "both"): _MxTile(32, 256, 8),
}
"""The grouped MXFP8 kernel's tile per (block, usage), from ``fast.quant.mx``'s autotuned set: at most 32 rows,
so that members (multiples of 32 rows) are whole tiles in M.  The 1d tiles are the fastest of an H100 sweep
(bfloat16, 8 x [4096, 7168]; ``docs/performance.md``), the 2d ones the single kernel's first.
``QCONFORM_MX_TILE`` overrides them as it does the single kernel's tile (benchmarks)."""


def _mxfp8_grouped(
    data: torch.Tensor, shapes: list[tuple[int, int]], offsets: list[int], usage: str, block: str, scale_layout: str
) -> dict[str, torch.Tensor]:
    """``group.quantize`` of ``mxfp8`` in one kernel launch for all members (no per-member calls, no copies).

    ``fast.quant.mx``'s tile body (:func:`~fast.quant.mx.quantize_tile`: E4M3, ``rceil``, TE edges) on every
    member's tiles, each program looking up its member in a table: the member's element offset (rowwise and
    columnwise data keep the input's layout), its dims and scale offsets, its padded scale strides
    (``round_up(K / 32, 4)`` and ``round_up(K, 128)`` bytes between compact scale rows; in the swizzled layout
    the 128x4 tiles across, ``round_up(K / 32, 4) / 4`` and ``round_up(M / 32, 4) / 4``).  Swizzled scale
    buffers with padding start zeroed; compact padding, don't-care, is left unwritten, as the other grouped
    recipes leave theirs (``fast.quant.mx`` zeroes its own: its outputs are a custom op's, which ``opcheck`` runs
    twice and compares byte for byte).  Zeroing took a memset of the whole scale buffer (H100, 8 uneven experts x
    7168 bfloat16: columnwise 0.2505 -> 0.2449 ms without it, both 0.3453 -> 0.3356).  Same bits as
    ``fast.quant.mx`` on each member alone: the same device functions on the same values.  (Persistent programs
    stepping from member to member, as the NVFP4 kernel's, were 5-20% slower here on the H100: MX tiles are small
    and many programs fit an SM.)  Where ``fast.quant.mx`` stages its rowwise scales (both usages, compact, every
    non-empty member's K a multiple of 128), so does this kernel, and :func:`_unstage_mx_row_scales` copies them
    for all members in one more launch (H100, 8 x [4096, 7168] bfloat16: 0.3401 -> 0.3349 ms, uneven experts
    0.3502 -> 0.3437).
    """
    n, device, align = len(shapes), data.device, _alignment(shapes)
    fixed = os.environ.get("QCONFORM_MX_TILE")
    tile = _MxTile(*(int(part) for part in fixed.split("x"))) if fixed else MX_TILES[block, usage]
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
    plan = _mx_plan(data[offsets[i] : offsets[i + 1]].view(shapes[i]), "float8_e4m3fn", "rceil", usage, block,
                    scale_layout, "te")  # fmt: skip
    dummy = next(iter(out.values()))
    even = all(m % tile.block_m == 0 and k % tile.block_k == 0 for m, k in shapes)
    staged = _stages_mx_row_scales(plan, tile) and all(k % 128 == 0 for m, k in shapes if m * k)
    staging = torch.empty(sum(tiles) * tile.block_m * tile.block_k // 32 if staged else 0, dtype=torch.uint8,
                          device=device)  # fmt: skip
    with quiet_interpreter(device):
        jit(_grouped_mx_kernel)[(sum(tiles),)](
            data, out.get("data", dummy), staging if staged else out.get("scales", dummy),
            out.get("columnwise_data", dummy), out.get("columnwise_scales", dummy), table, n,
            **_mx_constants(plan, data.dtype), STAGED=staged, BLOCK_M=tile.block_m, BLOCK_K=tile.block_k, EVEN=even,
            MEMBERS=members, ALIGN=align, **(tile.options if device.type == "cuda" else {"num_warps": tile.num_warps}),
        )  # fmt: skip
        if staged:
            _unstage_mx_row_scales(staging, out["scales"], shapes, columns, tile)
    return out


def _unstage_mx_row_scales(
    staging: torch.Tensor, scales: torch.Tensor, shapes: list[tuple[int, int]], columns: list[list[int]], tile: _MxTile
) -> None:
    """Copy every member's staged rowwise scales into its compact matrix in one launch (``fast.quant.mx``'s
    :func:`~fast.quant.mx.unstage_tiles` on each member's bands, a table as the quantize kernel's: 0 first staged
    tiles, 1 first copy programs, 2 M, 3 K, 4 rowwise scale offsets), dependent on the quantize kernel where the GPU
    can."""
    per_tile = tile.block_k // 32  # scale bytes a row of a tile
    tiles_k = [triton.cdiv(k // 128, per_tile // 4) for _, k in shapes]
    width = unstaged_tiles(per_tile, max(tiles_k))
    programs = [triton.cdiv(m, 32) * triton.cdiv(t, width) for (m, _), t in zip(shapes, tiles_k, strict=True)]
    table, members = _member_table([columns[1], _offsets(programs), columns[2], columns[3], columns[4]], staging.device)
    dependent = dependent_launch(staging.device)
    jit(_grouped_unstage_kernel)[(sum(programs),)](
        staging.view(torch.int32), scales.view(torch.int32), table, len(shapes), BLOCK_M=32, PER_TILE=per_tile // 4,
        TILES=width, WAIT=dependent, MEMBERS=members, num_warps=4, **({"launch_pdl": True} if dependent else {}),
    )  # fmt: skip


def _grouped_unstage_kernel(
    staged_ptr, scale_ptr, table_ptr, n_members, BLOCK_M: tl.constexpr, PER_TILE: tl.constexpr, TILES: tl.constexpr,
    WAIT: tl.constexpr, MEMBERS: tl.constexpr,
):  # fmt: skip
    # The member's staged tiles start at its first quantize program; its K / 128 words a row, stride as many.
    if WAIT:
        wait_for_primary()
    member, first = _member_of(table_ptr, 1, n_members, tl.program_id(0), MEMBERS)
    staged = staged_ptr + tl.load(table_ptr + member) * (BLOCK_M * PER_TILE)
    m = tl.load(table_ptr + 2 * MEMBERS + member).to(tl.int32)
    words = tl.load(table_ptr + 3 * MEMBERS + member).to(tl.int32) // 128
    scales = scale_ptr + tl.load(table_ptr + 4 * MEMBERS + member) // 4
    mx_unstage_tiles(staged, scales, m, words, words, tl.program_id(0) - first, BLOCK_M, PER_TILE, TILES)


def _grouped_mx_kernel(
    x_ptr, row_data_ptr, row_scale_ptr, col_data_ptr, col_scale_ptr, table_ptr, n_members, FP8: tl.constexpr,
    MANTISSA_BITS: tl.constexpr, BIAS: tl.constexpr, MAX_CODE: tl.constexpr, MAX_VALUE: tl.constexpr,
    SIGN_SHIFT: tl.constexpr, SIGN_MASK: tl.constexpr, SUBNORMAL_ADDEND: tl.constexpr, PACK: tl.constexpr,
    EMAX: tl.constexpr, EVEN_ADD: tl.constexpr, RULE: tl.constexpr, EDGES: tl.constexpr, RCEIL_OPERAND: tl.constexpr,
    RCEIL_DIVIDE: tl.constexpr, ZERO_BITS: tl.constexpr, ROWWISE: tl.constexpr, COLUMNWISE: tl.constexpr,
    TWO_D: tl.constexpr, SWIZZLED: tl.constexpr, STAGED: tl.constexpr, INPUT: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_K: tl.constexpr, EVEN: tl.constexpr, MEMBERS: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    # fast.quant.mx's tile body on the member's tile (table rows: 0 element offsets, 1 first tiles, 2 M, 3 K,
    # 4 and 5 scale offsets); a member's K-tiles of a row band are consecutive programs, as in mx's kernel.
    # STAGED: rowwise scales to the staging buffer at row_scale_ptr, the member's from its first tile on.
    member, first = _member_of(table_ptr, 1, n_members, tl.program_id(0), MEMBERS)
    begin, M, K = _member_dims(table_ptr, member, MEMBERS, ALIGN)
    if SWIZZLED:  # 128x4 tiles across: the rowwise matrix's, and the columnwise one's as its transpose [K, M / 32]
        row_scale_stride = (K // 32 + 3) // 4
        col_scale_stride = (M // 32 + 3) // 4
    else:  # [round_up(M, 128), round_up(K / 32, 4)] and [round_up(M / 32, 4), round_up(K, 128)]
        row_scale_stride = (K // 32 + 3) // 4 * 4
        col_scale_stride = (K + 127) // 128 * 128
    k_tiles = tl.cdiv(K, BLOCK_K)
    local = (tl.program_id(0) - first).to(tl.int32)
    if STAGED:
        row_scales = row_scale_ptr + first * (BLOCK_M * BLOCK_K // 32)
    else:
        row_scales = row_scale_ptr + tl.load(table_ptr + 4 * MEMBERS + member)
    mx_tile(
        x_ptr + begin, row_data_ptr + begin, row_scales,
        col_data_ptr + begin, col_scale_ptr + tl.load(table_ptr + 5 * MEMBERS + member), M, K, K, row_scale_stride,
        col_scale_stride, local // k_tiles, local % k_tiles, FP8, MANTISSA_BITS, BIAS, MAX_CODE, MAX_VALUE,
        SIGN_SHIFT, SIGN_MASK, SUBNORMAL_ADDEND, PACK, EMAX, EVEN_ADD, RULE, EDGES, RCEIL_OPERAND, RCEIL_DIVIDE,
        ZERO_BITS, ROWWISE, COLUMNWISE, TWO_D, SWIZZLED, STAGED, INPUT, BLOCK_M, BLOCK_K, EVEN,
    )  # fmt: skip


@device
def _member_of(table_ptr, row, n_members, pid, MEMBERS: tl.constexpr):
    """The member whose programs (``table`` row ``row``, cumulative) hold program ``pid``, and its first program."""
    index = tl.arange(0, MEMBERS)
    starts = tl.load(table_ptr + row * MEMBERS + index, mask=index <= n_members, other=1 << 62)
    member = tl.sum((starts <= pid).to(tl.int32), axis=0) - 1
    return member, tl.load(table_ptr + row * MEMBERS + member)


@device
def _amax_member(table_ptr, amax_bits_ptr, chunk, member, first, next_first, begin, end, running,
                 MEMBERS: tl.constexpr, ALIGN: tl.constexpr):  # fmt: skip
    """The member of ``chunk``, stepping up from ``member`` (chunks ``first .. next_first - 1``): each step
    records the running maxima of the member left by one atomic (none for an all-zero maximum: the bits start
    at 0) and restarts them.  Offsets are carried divided by ``ALIGN`` (a hint on a loop-carried value is lost)."""
    while chunk >= next_first:
        best = tl.max(running, axis=0)
        if best > 0.0:
            tl.atomic_max(amax_bits_ptr + member, best.to(tl.int32, bitcast=True))
        running = tl.zeros_like(running)
        member += 1
        first = next_first
        next_first = tl.load(table_ptr + MEMBERS + member + 1).to(tl.int32)
        begin = tl.load(table_ptr + member) // ALIGN
        end = tl.load(table_ptr + member + 1) // ALIGN
    return member, first, next_first, begin, end, running


@device
def _amax_chunk(x_ptr, chunk, first, begin, end, running, INPUT: tl.constexpr, BLOCK: tl.constexpr,
                ALIGN: tl.constexpr, EVEN: tl.constexpr, EVICTION: tl.constexpr):  # fmt: skip
    """The running elementwise maxima of ``|x|`` (NaN ignored) after chunk ``chunk`` of the member."""
    offsets = begin * ALIGN + (chunk - first).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        raw = tl.load(x_ptr + offsets, eviction_policy=EVICTION)
    else:
        raw = tl.load(x_ptr + offsets, mask=offsets < end * ALIGN, other=0, eviction_policy=EVICTION)
    _, bits = float32_bits(raw, INPUT)
    value = bits.to(tl.float32, bitcast=True)
    return tl.maximum(running, tl.where(value == value, tl.abs(value), 0.0))


def _grouped_amax_kernel(
    x_ptr, amax_bits_ptr, table_ptr, chunks, kept_chunks, INPUT: tl.constexpr, BLOCK: tl.constexpr,
    MEMBERS: tl.constexpr, ALIGN: tl.constexpr, EVEN: tl.constexpr, STREAM: tl.constexpr,
):  # fmt: skip
    # Persistent programs stride over all members' chunks of BLOCK elements (each member's own: table row 1),
    # forward, so a program's member only grows; the last kept_chunks are loaded evict-last, the rest with the
    # STREAM policy.  One atomic per program and member.
    member = tl.program_id(0) * 0
    first = tl.program_id(0) * 0
    next_first = tl.load(table_ptr + MEMBERS + 1).to(tl.int32)
    begin = tl.load(table_ptr) // ALIGN
    end = tl.load(table_ptr + 1) // ALIGN
    running = tl.zeros([BLOCK], tl.float32)
    first_kept = chunks - kept_chunks
    for chunk in range(tl.program_id(0), first_kept, tl.num_programs(0)):
        member, first, next_first, begin, end, running = _amax_member(
            table_ptr, amax_bits_ptr, chunk, member, first, next_first, begin, end, running, MEMBERS, ALIGN
        )
        running = _amax_chunk(x_ptr, chunk, first, begin, end, running, INPUT, BLOCK, ALIGN, EVEN, STREAM)
    for chunk in range(first_kept + tl.program_id(0), chunks, tl.num_programs(0)):
        member, first, next_first, begin, end, running = _amax_member(
            table_ptr, amax_bits_ptr, chunk, member, first, next_first, begin, end, running, MEMBERS, ALIGN
        )
        running = _amax_chunk(x_ptr, chunk, first, begin, end, running, INPUT, BLOCK, ALIGN, EVEN, "evict_last")
    best = tl.max(running, axis=0)
    if best > 0.0:
        tl.atomic_max(amax_bits_ptr + member, best.to(tl.int32, bitcast=True))


def _grouped_cast_kernel(
    x_ptr, data_ptr, columnwise_ptr, amax_bits_ptr, amax_ptr, scale_ptr, scale_inv_ptr, table_ptr, n_members,
    epsilon, value_for_inf, FP8_MAX: tl.constexpr, MANTISSA_BITS: tl.constexpr, BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr, MAX_BITS: tl.constexpr, MAGIC: tl.constexpr, CORE: tl.constexpr, ROWWISE: tl.constexpr,
    COLWISE: tl.constexpr, INPUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, MEMBERS: tl.constexpr,
    ALIGN: tl.constexpr,
):  # fmt: skip
    if tl.program_id(0) == 0:  # every member's amax, scale and scale_inv
        index = tl.arange(0, MEMBERS)
        valid = index < n_members
        amaxes = tl.load(amax_bits_ptr + index, mask=valid, other=0).to(tl.float32, bitcast=True)
        scales = scale_from_amax(amaxes, epsilon, value_for_inf, FP8_MAX, MAX_BITS, False)
        tl.store(amax_ptr + index, amaxes, mask=valid)
        tl.store(scale_ptr + index, scales, mask=valid)
        tl.store(scale_inv_ptr + index, reciprocal(scales, False), mask=valid)
    pid = tl.program_id(0)
    member, first = _member_of(table_ptr, 4, n_members, pid, MEMBERS)
    begin, m, k = _member_dims(table_ptr, member, MEMBERS, ALIGN)
    amax = tl.load(amax_bits_ptr + member).to(tl.float32, bitcast=True)
    scale = scale_from_amax(amax, epsilon, value_for_inf, FP8_MAX, MAX_BITS, False)
    local = (pid - first).to(tl.int32)
    k_tiles = tl.cdiv(k, BLOCK_K)
    rows = (local // k_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (local % k_tiles) * BLOCK_K + tl.arange(0, BLOCK_K)
    mask = (rows < m)[:, None] & (cols < k)[None, :]
    raw = tl.load(x_ptr + begin + rows.to(tl.int64)[:, None] * k + cols[None, :], mask=mask, other=0)
    _, bits = float32_bits(raw, INPUT)
    value = bits.to(tl.float32, bitcast=True)
    code = fp8_code(value * scale, MANTISSA_BITS, BIAS, MAX_CODE, MAX_BITS, MAGIC, CORE)
    if ROWWISE:
        tl.store(data_ptr + begin + rows.to(tl.int64)[:, None] * k + cols[None, :], code, mask=mask)
    if COLWISE:
        where = begin + cols.to(tl.int64)[:, None] * m + rows[None, :]
        tl.store(columnwise_ptr + where, tl.trans(code), mask=tl.trans(mask))


@device
def _member_dims(table_ptr, member, MEMBERS: tl.constexpr, ALIGN: tl.constexpr):
    """The member's element offset (int64), M and K (int32) from table rows 0, 2 and 3, each a multiple of
    ALIGN (a hint: the compiler vectorises loads and stores of rows it knows to be aligned)."""
    begin = tl.multiple_of(tl.load(table_ptr + member), ALIGN)
    m = tl.multiple_of(tl.load(table_ptr + 2 * MEMBERS + member).to(tl.int32), ALIGN)
    k = tl.multiple_of(tl.load(table_ptr + 3 * MEMBERS + member).to(tl.int32), ALIGN)
    return begin, m, k


@device
def _nvfp4_member(table_ptr, amax_bits_ptr, tile, member, first, begin, m, k, offset, columnwise_offset, p0, p1,
                  MEMBERS: tl.constexpr):  # fmt: skip
    """The member of ``tile`` and its table entries, stepping down from ``member`` (whose first tile is
    ``first``): persistent programs walk the tiles in reverse, so a program's members only decrease, and
    a tile of the same member costs one comparison.  Returns the member, its first tile, element offset
    / 256, M / 16, K / 16, scale offsets / 512 (rowwise, columnwise) and ``p0, p1`` (TE rule, from its
    amax); empty members are stepped over (no tile falls in them).  The offsets and dims come divided by
    what divides them, so that the caller's products tell the compiler their alignment (vector loads and
    stores): a ``tl.multiple_of`` hint on a loop-carried value is lost (it has no defining operation)."""
    while tile < first:
        member -= 1
        first = tl.load(table_ptr + 4 * MEMBERS + member).to(tl.int32)
        begin = tl.load(table_ptr + member) // 256
        m = tl.load(table_ptr + 2 * MEMBERS + member).to(tl.int32) // 16
        k = tl.load(table_ptr + 3 * MEMBERS + member).to(tl.int32) // 16
        offset = tl.load(table_ptr + 5 * MEMBERS + member) // 512
        columnwise_offset = tl.load(table_ptr + 6 * MEMBERS + member) // 512
        _, p0, p1 = _global_scales(tl.load(amax_bits_ptr + member).to(tl.float32, bitcast=True), 0)
    return member, first, begin, m, k, offset, columnwise_offset, p0, p1


def _grouped_nvfp4_kernel(
    x_ptr, words_ptr, data_ptr, scales_ptr, columnwise_data_ptr, columnwise_scales_ptr, amax_bits_ptr, table_ptr,
    n_members, tiles, INPUT: tl.constexpr, ROWWISE: tl.constexpr, COLUMNWISE: tl.constexpr, TILE_2D: tl.constexpr,
    BM: tl.constexpr, BK: tl.constexpr, V: tl.constexpr, EVEN: tl.constexpr, SANITIZE: tl.constexpr,
    MEMBERS: tl.constexpr, STORE_EVICTION: tl.constexpr,
):  # fmt: skip
    # fast.quant.nvfp4's tile bodies on every member's tiles (table rows: 0 element offsets, 2 M, 3 K, 4 first
    # tiles, 5 and 6 scale offsets), persistent programs walking all tiles in reverse as that module's kernels do.
    # The tile is [BM, BK] elements of both operands (or the columnwise one), or, for the rowwise operand alone,
    # BM rows by BK / 16 blocks read as words.  A member's tiles of a columnwise operand are taken M first (the tile
    # bodies number them K first): tiles that write the two ends of a transposed row's 32-byte sector run side by
    # side (members whose M / 2 bytes are no multiple of 32 start transposed rows inside a sector).
    if ROWWISE and COLUMNWISE and tl.program_id(0) == 0:  # the columnwise amax of each member is its rowwise one
        index = tl.arange(0, MEMBERS)
        valid = index < n_members
        tl.store(amax_bits_ptr + n_members + index, tl.load(amax_bits_ptr + index, mask=valid), mask=valid)
    # Before the first tile: past the last member (scalar tensors, so that the loop carries fixed types).
    member = tl.program_id(0) * 0 + n_members
    first = tl.program_id(0) * 0 + tiles
    begin = tl.full([], 0, tl.int64)
    offset = tl.full([], 0, tl.int64)
    columnwise_offset = tl.full([], 0, tl.int64)
    m = tl.full([], 0, tl.int32)
    k = tl.full([], 0, tl.int32)
    p0 = tl.full([], 0.0, tl.float32)
    p1 = tl.full([], 0.0, tl.float32)
    for step in range(tl.program_id(0), tiles, tl.num_programs(0)):
        tile = tiles - 1 - step
        member, first, begin, m, k, offset, columnwise_offset, p0, p1 = _nvfp4_member(
            table_ptr, amax_bits_ptr, tile, member, first, begin, m, k, offset, columnwise_offset, p0, p1, MEMBERS
        )
        # Member dims are multiples of 16, offsets of 256 elements and of 512 scale bytes (TE's padded shapes).
        element = begin * 256
        byte = begin * 128
        rows = m * 16
        cols = k * 16
        scales = scales_ptr + offset * 512
        # The tile bodies' SAME_AMAX: one tensor amax for both operands.
        if COLUMNWISE:
            m_tiles = tl.cdiv(rows, BM)
            quantize_nvfp4_tile(
                x_ptr + element, (tile - first) % m_tiles * tl.cdiv(cols, BK) + (tile - first) // m_tiles, rows,
                cols, p0, p1, p0, p1, amax_bits_ptr, data_ptr + byte, scales,
                amax_bits_ptr, amax_bits_ptr, amax_bits_ptr, columnwise_data_ptr + byte,
                columnwise_scales_ptr + columnwise_offset * 512, amax_bits_ptr, amax_bits_ptr,
                (cols // 16 + 3) // 4 * 4, (rows // 16 + 3) // 4 * 4, INPUT, ROWWISE, True, TILE_2D, False, False, 0,
                0, 0, 0, False, BM, BK, EVEN, SANITIZE, True, STORE_EVICTION,
            )  # fmt: skip
        else:
            rowwise_nvfp4_tile(
                words_ptr + byte, amax_bits_ptr, tile - first, rows, cols, p0, p1, data_ptr + byte, scales,
                amax_bits_ptr, amax_bits_ptr, (cols // 16 + 3) // 4 * 4, INPUT, TILE_2D, False, 0, 0, 0, False, BM,
                BK // 16, V, EVEN, SANITIZE, STORE_EVICTION,
            )  # fmt: skip


def _grouped_fp8_block_kernel(
    x_ptr, data_ptr, scale_inv_ptr, columnwise_ptr, columnwise_scale_inv_ptr, table_ptr, n_members, epsilon,
    value_for_inf, FP8_MAX: tl.constexpr, POW2: tl.constexpr, MANTISSA_BITS: tl.constexpr, BIAS: tl.constexpr,
    MAX_CODE: tl.constexpr, MAX_BITS: tl.constexpr, MAGIC: tl.constexpr, CORE: tl.constexpr, TWO_D: tl.constexpr,
    ROWWISE: tl.constexpr, COLWISE: tl.constexpr, INPUT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN: tl.constexpr, MEMBERS: tl.constexpr, ALIGN: tl.constexpr,
):  # fmt: skip
    # fast.quant.fp8_block's tile function on the member's tile: its [M, K], offsets and scale matrices from the table.
    member, first = _member_of(table_ptr, 1, n_members, tl.program_id(0), MEMBERS)
    begin, M, K = _member_dims(table_ptr, member, MEMBERS, ALIGN)
    x_ptr += begin
    data_ptr += begin
    columnwise_ptr += begin
    scale_inv_ptr += tl.load(table_ptr + 4 * MEMBERS + member)
    columnwise_scale_inv_ptr += tl.load(table_ptr + 5 * MEMBERS + member)
    if TWO_D:  # [ceil(M / 128), round4(ceil(K / 128))] and [ceil(K / 128), round4(ceil(M / 128))]
        scale_stride = (tl.cdiv(K, 128) + 3) // 4 * 4
        columnwise_scale_stride = (tl.cdiv(M, 128) + 3) // 4 * 4
    else:  # [ceil(K / 128), round4(M)] and [ceil(M / 128), round4(K)]
        scale_stride = (M + 3) // 4 * 4
        columnwise_scale_stride = (K + 3) // 4 * 4
    k_tiles = tl.cdiv(K, BLOCK_K)
    local = (tl.program_id(0) - first).to(tl.int32)
    block_tile(
        x_ptr, data_ptr, scale_inv_ptr, columnwise_ptr, columnwise_scale_inv_ptr, local // k_tiles, local % k_tiles,
        M, K, scale_stride, columnwise_scale_stride, epsilon, value_for_inf, FP8_MAX, POW2, MANTISSA_BITS, BIAS,
        MAX_CODE, MAX_BITS, MAGIC, CORE, TWO_D, ROWWISE, COLWISE, INPUT, BLOCK_M, BLOCK_K, EVEN,
    )  # fmt: skip
