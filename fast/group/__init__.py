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
``fast.quant.mx``, ``fast.quant.fp8_block``, ``fast.quant.nvfp4``) on a tile of that member, writing
straight into the grouped buffers (:func:`fp8_tensor_grouped`, :func:`mxfp8_grouped`,
:func:`fp8_block_grouped`, :func:`nvfp4_grouped`; per-tensor amaxes by one grouped amax pass first).  On
the torch path, members whose stacked ``[sum(M), K]`` quantization is the grouped buffers as they are (MXFP8
of one ``K`` with scale matrices that abut; FP8 blockwise members of one shape with whole 128-row blocks, plus
one copy of each buffer that holds them side by side) take one call on the stacked view (:func:`stacked_call`);
otherwise every grouped buffer is allocated once and each member is quantized alone by the recipe's
``fast.quant`` quantizer (``fast.buffers.quantizer``), its outputs copied into its slots.

Source: ``NVIDIA/TransformerEngine@d0067d0:pytorch/tensor/storage/grouped_tensor_storage.py``
(``make_grouped_tensor``, ``split_into_quantized_tensors``, ``quantize``),
``NVIDIA/TransformerEngine@d0067d0:pytorch/module/grouped_linear.py`` (``set_tensor_parallel_attributes``),
``NVIDIA/TransformerEngine@d0067d0:pytorch/csrc/extensions/cast.cpp`` (``group_quantize``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from fast._checks import check_choice
from fast._triton import selected_path
from fast.buffers import quantizer
from fast.group.launch import fp8_block_grouped, fp8_tensor_grouped, mxfp8_grouped, nvfp4_grouped
from fast.group.members import (
    GROUPED,
    RECIPES,
    SCALE_LAYOUTS,
    USAGES,
    X_DTYPES,
    allocate_buffers,
    check_buffer,
    check_partition,
    check_recipe,
    cumulative_offsets,
    logical_shape,
    member_scale_shapes,
    member_shapes,
    stacked_call,
)
from fast.quant.mx.launch import has_fp8_conversion

__all__ = ["layout", "quantize", "split", "stack", "tp_partition"]


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
    shapes = member_shapes(num_members, first_dims, last_dims)
    check_recipe(recipe, block, RECIPES, shapes)
    offsets = cumulative_offsets([m * k for m, k in shapes])
    if not isinstance(data, torch.Tensor):
        raise TypeError(f"Got data of type {type(data).__name__}, but data must be a torch.Tensor")
    check_buffer(data, offsets[-1])

    def as_tensor(values: Sequence[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=data.device)

    out = {
        "offsets": as_tensor(offsets),
        "logical_shape": as_tensor(logical_shape(shapes)),
        "data": stack(split(data, offsets, shapes)),
    }
    if recipe != "none":
        rowwise, columnwise = zip(*(member_scale_shapes(recipe, block, m, k) for m, k in shapes), strict=True)
        out["scale_offsets"] = as_tensor(cumulative_offsets([math.prod(s) for s in rowwise]))
        out["columnwise_scale_offsets"] = as_tensor(cumulative_offsets([math.prod(s) for s in columnwise]))
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
    shapes = member_shapes(num_members, first_dims, last_dims)
    check_recipe(recipe, block, RECIPES[1:], shapes)
    check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    if scale_layout != "compact" and recipe != "mxfp8":
        raise ValueError(f"Got scale_layout={scale_layout!r} and recipe={recipe!r}, but only mxfp8 has swizzled scales")
    check_choice("usage", usage, USAGES)
    offsets = cumulative_offsets([m * k for m, k in shapes])
    if not isinstance(data, torch.Tensor) or data.dtype not in X_DTYPES.values():
        got = f"data.dtype={data.dtype}" if isinstance(data, torch.Tensor) else f"data of type {type(data).__name__}"
        raise TypeError(f"Got {got}, but data must be a float32, bfloat16 or float16 torch.Tensor")
    check_buffer(data, offsets[-1])
    if not data.is_contiguous():
        raise ValueError(f"Got data with stride {data.stride()}, but quantize reads one contiguous buffer")
    if x_dtype is not None:
        check_choice("x_dtype", x_dtype, tuple(X_DTYPES))
        if X_DTYPES[x_dtype] != data.dtype:
            raise ValueError(f"Got data.dtype={data.dtype} and x_dtype={x_dtype!r}, but they must name the same dtype")
    if selected_path(data.device) == "triton":
        if recipe == "mxfp8" and (data.device.type != "cuda" or has_fp8_conversion(data.device)):
            return mxfp8_grouped(data, shapes, offsets, usage, block, scale_layout)
        grouped = {"fp8_tensor": fp8_tensor_grouped, "fp8_block": fp8_block_grouped, "nvfp4": nvfp4_grouped}
        if recipe in grouped:
            return grouped[recipe](data, shapes, offsets, usage, block)
    produced = {n: entry for n, entry in GROUPED[recipe].items() if entry[2] in ("always", usage) or usage == "both"}
    quantize_member = quantizer(recipe, block, usage, scale_layout)
    stacking = stacked_call(recipe, block, scale_layout, usage, shapes, produced)
    if stacking is not None:
        results = quantize_member(data.view(-1, shapes[0][1]))
        out = {}
        for name, (source, _, _) in produced.items():
            stacked = results[source]
            if stacking[name]:  # [A, n * B] -> [n, A, B]
                stacked = stacked.view(stacked.shape[0], num_members, -1).transpose(0, 1)
            out[name] = stacked.reshape(-1)
        return out
    scale_shapes = [member_scale_shapes(recipe, block, m, k) for m, k in shapes]
    slots = {"rowwise": [s[0] for s in scale_shapes], "columnwise": [s[1] for s in scale_shapes]}
    out, scale_offsets = allocate_buffers(produced, offsets, slots, num_members, data.device)
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
    dim = check_partition(tuple(w.shape), parallel, tp_size, rank)
    size = w.shape[dim] // tp_size
    shard = w.narrow(dim, rank * size, size).clone(memory_format=torch.contiguous_format)
    return {"shard": shard, "partition_dim": torch.tensor([dim], dtype=torch.int64, device=w.device)}


def gemm(
    a: torch.Tensor, b: torch.Tensor, *, form: str, groups: int, group_sizes: Sequence[int]
) -> dict[str, torch.Tensor]:
    """``group.gemm``: :func:`fast.gemm.grouped` (the grouped matmul lives with the other GEMMs)."""
    from fast.gemm import grouped

    return grouped(a, b, form=form, groups=groups, group_sizes=group_sizes)
