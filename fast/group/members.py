"""Grouped-tensor bookkeeping: the contract's domains, the grouped-output table (which member output lands in
which grouped buffer), member shapes and offsets, argument checks, and the grouped buffers' allocation."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from fast._checks import check_choice

RECIPES: tuple[str, ...] = ("none", "fp8_tensor", "mxfp8", "fp8_block", "nvfp4")
BLOCKS: tuple[str, ...] = ("none", "1d", "2d")
SCALE_LAYOUTS: tuple[str, ...] = ("compact", "swizzled")
USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")
X_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
PARALLEL_MODES: tuple[str, ...] = ("column", "row")

_DIVISOR = {"mxfp8": 32, "nvfp4": 16}
BLOCK_NAMES = {"1d": "1x128", "2d": "128x128"}
"""``fast.quant.fp8_block``'s name of each ``block``."""
_Outputs = dict[str, tuple[str, str, str]]
GROUPED: dict[str, _Outputs] = {
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
EMPTY_MEMBER = {"amax": 0.0, "scale": 1.0, "scale_inv": 1.0, "columnwise_amax": 0.0}
"""Per-member values of an empty member (the recipe's results for an amax of 0); every per-member buffer starts so."""


# %% Shared pieces


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def member_shapes(num_members: object, first_dims: object, last_dims: object) -> list[tuple[int, int]]:
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


def check_recipe(recipe: str, block: str, allowed: tuple[str, ...], shapes: list[tuple[int, int]]) -> None:
    check_choice("recipe", recipe, allowed)
    check_choice("block", block, BLOCKS)
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


def check_buffer(data: torch.Tensor, total: int) -> None:
    if data.dim() != 1:
        raise ValueError(f"Got data.shape={tuple(data.shape)}, but data must be 1-D (members back to back)")
    if data.numel() != total:
        raise ValueError(
            f"Got data with {data.numel()} elements, but the members' shapes (first_dims[i] x last_dims[i]) "
            f"add up to {total}: the buffer must end where the last member ends"
        )


def check_partition(shape: tuple[int, ...], parallel: str, tp_size: object, rank: object) -> int:
    """The partitioned axis of a weight of ``shape``, after checking the arguments."""
    check_choice("parallel", parallel, PARALLEL_MODES)
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


def cumulative_offsets(sizes: Sequence[int]) -> list[int]:
    """``[0, s0, s0 + s1, ...]`` as host ints."""
    out = [0]
    for size in sizes:
        out.append(out[-1] + size)
    return out


def logical_shape(shapes: list[tuple[int, int]]) -> tuple[int, int]:
    firsts, lasts = [m for m, _ in shapes], [k for _, k in shapes]
    if len(set(lasts)) == 1:
        return sum(firsts), lasts[0]
    if len(set(firsts)) == 1:
        return firsts[0], sum(lasts)
    return 1, sum(m * k for m, k in shapes)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def member_scale_shapes(recipe: str, block: str, m: int, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
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


def stacked_call(
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


def allocate_buffers(
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
            out[name] = torch.full((num_members,), EMPTY_MEMBER[name], dtype=torch.float32, device=device)
        elif placement == "scales":
            scale_offsets[name] = cumulative_offsets([math.prod(s) for s in slots[side]])
            dtype = torch.uint8 if name.endswith("scales") else torch.float32
            out[name] = torch.empty(scale_offsets[name][-1], dtype=dtype, device=device)
        else:
            out[name] = torch.empty(offsets[-1] // (2 if placement == "bytes" else 1), dtype=torch.uint8, device=device)
    return out, scale_offsets
