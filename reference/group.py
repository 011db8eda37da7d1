"""Grouped tensors (contracts ``group.layout``, ``group.quantize``, ``group.tp_partition``).

A grouped tensor holds ``num_members`` 2-D members ``[first_dims[i], last_dims[i]]`` of one dtype in
1-D buffers, members back to back, each row-major: member ``i`` is
``data[offsets[i] : offsets[i + 1]].reshape(first_dims[i], last_dims[i])`` with ``offsets`` the
cumulative element counts (length ``num_members + 1``, ``offsets[0] = 0``, ending at the total).
A member with a zero dim is empty and takes no elements.  Its *logical shape* is 2-D:

- every last dim equal to ``N`` (all shapes equal included): ``[sum(first_dims), N]``, i.e.
  ``[num_members * M, N]`` when the first dims are equal too;
- only the first dims equal to ``M``: ``[M, sum(last_dims)]``;
- both varying: ``[1, total]``.

Quantized, every buffer of the recipe is grouped the same way: element data at the element offsets
(NVFP4 packs two codes per byte: byte offsets ``offsets / 2``), block scales of member ``i`` at
``scale_offsets[i]`` holding that member's scale matrix in TransformerEngine's padded shape (TE's
``get_scale_shape``), per-tensor values (amax, scale, scale_inv) at index ``i``.  Scale shapes of an
``[M, K]`` member, rowwise and columnwise:

- ``fp8_tensor``: one float32 each (offsets ``0, 1, ..., n``);
- ``mxfp8`` (E8M0 bytes): ``[round_up(M, 128), round_up(K / 32, 4)]`` and ``[round_up(M / 32, 4), round_up(K, 128)]``;
- ``fp8_block`` (float32, GEMM-ready): 1d ``[ceil(K / 128), round_up(M, 4)]`` and ``[ceil(M / 128), round_up(K, 4)]``;
  2d ``[ceil(M / 128), round_up(ceil(K / 128), 4)]`` and ``[ceil(K / 128), round_up(ceil(M / 128), 4)]``;
- ``nvfp4`` (E4M3 bytes): ``[round_up(M, 128), round_up(K / 16, 4)]`` and ``[round_up(K, 128), round_up(M / 16, 4)]``.

An empty member has empty scale matrices under every recipe.

Source: NVIDIA/TransformerEngine ``transformer_engine/pytorch/tensor/storage/grouped_tensor_storage.py``
(``GroupedTensorStorage``: class docstring for the logical shapes, ``make_grouped_tensor`` for the
offsets and the per-member scale allocation ``prod(get_scale_shape(member))``,
``split_into_quantized_tensors`` for the per-member views, ``quantize`` for per-member
quantization), ``pytorch/module/grouped_linear.py`` (``set_tensor_parallel_attributes``), at d0067d0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from reference._checks import check_array, check_choice
from reference.quant import fp8_block, fp8_tensor, mx, nvfp4

__all__ = ["BLOCKS", "PARALLEL_MODES", "RECIPES", "layout", "quantize", "tp_partition"]

RECIPES: tuple[str, ...] = ("none", "fp8_tensor", "mxfp8", "fp8_block", "nvfp4")
"""The grouped tensor's recipe: ``none`` (high precision, no scales) or one of the scaling recipes."""
BLOCKS: tuple[str, ...] = ("none", "1d", "2d")
"""``none`` for ``none``/``fp8_tensor``; block recipes: 1x32/1x128/1x16 blocks (``1d``) or square tiles (``2d``)."""
SCALE_LAYOUTS: tuple[str, ...] = ("compact", "swizzled")
"""MXFP8 scale bytes: TE's padded row-major matrices, or cuBLAS's 128x4 tiles (``quant.mx``)."""
USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")
X_DTYPES: tuple[str, ...] = ("bfloat16", "float32", "float16")
PARALLEL_MODES: tuple[str, ...] = ("column", "row")
"""Tensor parallelism of a linear weight ``[..., out, in]``: split ``out`` (column) or ``in`` (row)."""

F32 = np.float32
_E4M3 = "float8_e4m3fn"
_DIVISOR = {"mxfp8": 32, "nvfp4": 16}
_RECIPE_BLOCK = {"fp8_block": {"1d": "1x128", "2d": "128x128"}, "nvfp4": {"1d": "1x16", "2d": "16x16"}}

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
"""How each recipe's per-member outputs make up the grouped buffers."""
_EMPTY_MEMBER = {"amax": 0.0, "scale": 1.0, "scale_inv": 1.0, "columnwise_amax": 0.0}
"""Per-member values of an empty member, the recipe's results for an amax of 0: every per-member buffer starts so."""
_MEMBER_MASKS = {
    "scale_rowwise": "scale_rowwise_dont_care",
    "scale_columnwise": "scale_columnwise_dont_care",
    "scale_inv": "scale_inv_padding",
    "columnwise_scale_inv": "columnwise_scale_inv_padding",
}
"""The member contracts' masks of their scale outputs' don't-care entries (NVFP4 scales have none)."""


def layout(
    data: np.ndarray,
    *,
    num_members: int,
    first_dims: Sequence[int],
    last_dims: Sequence[int],
    recipe: str = "none",
    block: str = "none",
) -> dict[str, np.ndarray]:
    """Offsets, logical shape and scale offsets of a grouped tensor, and its buffer split and stacked back.

    Contract
    --------
    ``group.layout``: for members ``[first_dims[i], last_dims[i]]`` (module docstring),
    ``offsets[i] = sum(first_dims[j] * last_dims[j] for j < i)``; ``logical_shape`` by which dims
    vary; ``scale_offsets`` / ``columnwise_scale_offsets`` the cumulative element counts of the
    members' rowwise / columnwise scale buffers under ``recipe`` and ``block``; ``data`` the members
    split from ``data`` (one view each) and stacked back into one buffer, equal to ``data`` bit for bit.

    Source
    ------
    TE ``GroupedTensorStorage.make_grouped_tensor`` (offsets; scale allocation per member),
    ``make_grouped_tensor_with_shapes`` (a dim is uniform when every member has the same value),
    the class docstring (logical shapes); ``specs/group/layout.yaml``.

    Encoding
    --------
    ``data``: any 1-D array of ``sum(first_dims * last_dims)`` elements.  Outputs: ``offsets``,
    ``scale_offsets``, ``columnwise_scale_offsets`` int64 ``[num_members + 1]`` (the scale offsets only
    for a scaling recipe), ``logical_shape`` int64 ``[2]``, ``data`` a new array like ``data``.

    Edge cases
    ----------
    - Empty members (a zero dim) add nothing to any offset; all members empty gives a total of 0.
    - One member: every dim is uniform, logical shape ``[M, N]``.

    Raises ``TypeError`` unless ``data`` is a NumPy array; ``ValueError`` for an unknown ``recipe``,
    a ``block`` the recipe does not have, ``num_members`` below 1, dims lists of another length or
    holding anything but ints >= 0, a member whose dims the recipe's blocks do not divide (naming
    the member), and ``data`` that is not 1-D or whose size is not the members' total.
    """
    shapes = _member_shapes(num_members, first_dims, last_dims)
    _check_recipe(recipe, block, RECIPES, shapes)
    offsets = _offsets([m * k for m, k in shapes])
    if not isinstance(data, np.ndarray):
        raise TypeError(f"Got data of type {type(data).__name__}, but data must be a numpy.ndarray")
    _check_buffer("data", data, int(offsets[-1]))
    out = {
        "offsets": offsets,
        "logical_shape": np.array(_logical_shape(shapes), dtype=np.int64),
        "data": np.concatenate([member.reshape(-1) for member in _split(data, offsets, shapes)] or [data]),
    }
    if recipe != "none":
        rowwise, columnwise = zip(*(_scale_shapes(recipe, block, m, k) for m, k in shapes), strict=True)
        out["scale_offsets"] = _offsets([math.prod(s) for s in rowwise])
        out["columnwise_scale_offsets"] = _offsets([math.prod(s) for s in columnwise])
    return out


def quantize(
    data: np.ndarray,
    *,
    num_members: int,
    first_dims: Sequence[int],
    last_dims: Sequence[int],
    recipe: str,
    block: str,
    scale_layout: str = "compact",
    usage: str = "both",
    x_dtype: str | None = None,
) -> dict[str, np.ndarray]:
    """Quantize every member of a grouped tensor alone and lay the results out as grouped buffers.

    Contract
    --------
    ``group.quantize``: member ``i`` of ``data`` (module docstring) is quantized by its recipe's
    contract with TransformerEngine's defaults (E4M3 elements; ``fp8_tensor``: ``quant.fp8_tensor``;
    ``mxfp8``: ``quant.mx`` rceil, TE edges, ``blocks=block``, ``scale_layout``; ``fp8_block``:
    ``quant.fp8_block`` 1x128 / 128x128, power-of-two scales; ``nvfp4``: ``quant.nvfp4`` 1x16 / 16x16,
    TE scale rule, no RHT, round to nearest), and its outputs are written into the grouped buffers at
    the member's offsets, so that member by member the grouped bytes are the member's own.

    Source
    ------
    TE ``GroupedTensorStorage.quantize`` (``update_quantized`` per member view) and
    ``make_grouped_tensor`` (buffers, offsets); the per-member contracts' sources;
    ``specs/group/quantize.yaml``.

    Encoding
    --------
    ``data``: 1-D float32 or float16 array (bfloat16 values as float32 with ``x_dtype="bfloat16"``).
    Outputs, per recipe and ``usage`` (rowwise / columnwise buffers):

    - ``fp8_tensor``: ``data``, ``columnwise_data`` (each member transposed) uint8 ``[total]``;
      ``amax``, ``scale``, ``scale_inv`` float32 ``[num_members]`` (whatever the usage).
    - ``mxfp8``: ``data``, ``columnwise_data`` (not transposed) uint8 ``[total]``; ``scales``,
      ``columnwise_scales`` uint8 E8M0.
    - ``fp8_block``: ``data``, ``columnwise_data`` (transposed) uint8 ``[total]``; ``scale_inv``,
      ``columnwise_scale_inv`` float32.
    - ``nvfp4``: ``fp4_data``, ``columnwise_fp4_data`` (transposed) uint8 ``[total / 2]``, two E2M1
      codes per byte, low nibble first; ``scales``, ``columnwise_scales`` uint8 E4M3; ``amax``,
      ``columnwise_amax`` float32 ``[num_members]``.

    Every scale buffer (``scale``, ``scale_inv``, ``scales``) comes with a boolean ``<name>_padding``
    of its shape: the entries nobody reads (TE's unwritten padding; for NVFP4 the padding around each
    member's ``[M, K/16]`` scales).

    Edge cases
    ----------
    - An empty member writes no element and no scale; its amax is 0, its scale and scale_inv 1.
    - Each member's edge cases are its recipe contract's (NaN, Inf, zero blocks, saturation).

    Raises ``TypeError`` unless ``data`` is a float32 or float16 array; ``ValueError`` as
    :func:`layout` does (``recipe="none"`` is refused), for an unknown ``scale_layout``, ``usage`` or
    ``x_dtype``, a ``scale_layout`` other than ``compact`` outside MXFP8, and an ``x_dtype`` that
    contradicts ``data``.
    """
    shapes = _member_shapes(num_members, first_dims, last_dims)
    _check_recipe(recipe, block, RECIPES[1:], shapes)
    check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    if scale_layout != "compact" and recipe != "mxfp8":
        raise ValueError(f"Got scale_layout={scale_layout!r} and recipe={recipe!r}, but only mxfp8 has swizzled scales")
    check_choice("usage", usage, USAGES)
    offsets = _offsets([m * k for m, k in shapes])
    check_array("data", data, (np.float32, np.float16))
    _check_buffer("data", data, int(offsets[-1]))
    if x_dtype is not None:
        check_choice("x_dtype", x_dtype, X_DTYPES)
        if (data.dtype == np.float16) != (x_dtype == "float16"):
            raise ValueError(f"Got data.dtype={data.dtype} and x_dtype={x_dtype!r}, but they must name the same dtype")
    scale_shapes = [_scale_shapes(recipe, block, m, k) for m, k in shapes]
    slots = {"rowwise": [s[0] for s in scale_shapes], "columnwise": [s[1] for s in scale_shapes]}
    quantize_member = _member_quantizer(recipe, block, scale_layout, usage, x_dtype)
    produced = {n: entry for n, entry in _GROUPED[recipe].items() if entry[2] in ("always", usage) or usage == "both"}
    out = _allocate(produced, offsets, slots, num_members)
    for i, member in enumerate(_split(data, offsets, shapes)):
        if not member.size:
            continue  # nothing to write: its per-member values are allocated as an empty member's
        results = quantize_member(member)
        for name, (source, placement, side) in produced.items():
            if placement == "member":
                out[name][i] = results[source].reshape(())
            elif placement == "scales":
                slot = slots[side][i]
                where = slice(*out[f"{name}_offsets"][i : i + 2])
                mask = _MEMBER_MASKS.get(source)
                padding = out[f"{name}_padding"][where].reshape(slot)
                _place_scales(out[name][where].reshape(slot), padding, results[source], results[mask] if mask else None)
            else:
                per_byte = 2 if placement == "bytes" else 1
                out[name][offsets[i] // per_byte : offsets[i + 1] // per_byte] = results[source].reshape(-1)
    return {n: v for n, v in out.items() if not n.endswith("_offsets")}


def tp_partition(w: np.ndarray, *, parallel: str, tp_size: int, rank: int) -> dict[str, np.ndarray]:
    """The shard of a linear weight (2-D, or a 3-D grouped weight) that tensor-parallel rank ``rank`` keeps.

    Contract
    --------
    ``group.tp_partition``: a weight ``[out, in]`` or a grouped weight ``[num_gemms, out, in]`` is
    split along its ``out`` axis (``parallel="column"``) or its ``in`` axis (``"row"``) into
    ``tp_size`` equal contiguous chunks, of which ``shard`` is number ``rank``;
    ``partition_dim`` is that axis: 2-D 0 (column) or 1 (row), 3-D 1 or 2.  Sharding a grouped weight
    equals sharding each member's 2-D weight with the 2-D rule and stacking the shards, which is how
    this reference computes it.

    Source
    ------
    TE ``GroupedLinear.set_tensor_parallel_attributes`` (``module/grouped_linear.py``): partition dim
    0 for column-parallel and 1 for row-parallel, stride 1, set on every per-expert 2-D weight and, as
    the same values, on the single grouped 3-D weight, where ``out`` is dim 1 and ``in`` dim 2 (dim 0
    would be the experts); Megatron-style splitting (rank ``r`` keeps chunk ``r``);
    ``specs/group/tp_partition.yaml``.

    Encoding
    --------
    ``shard``: a new array of ``w``'s dtype, ``w``'s shape with the partitioned dim divided by
    ``tp_size``; ``partition_dim``: int64 ``[1]``.

    Edge cases
    ----------
    - ``tp_size = 1``: the shard is the whole weight (a copy).
    - Empty dims (``out`` or ``in`` 0, or no experts) give empty shards.

    Raises ``TypeError`` unless ``w`` is a NumPy array; ``ValueError`` for an unknown ``parallel``,
    ``w`` not 2-D or 3-D, ``tp_size`` not a positive int, ``rank`` outside ``0 .. tp_size - 1``, and a
    partitioned dim that ``tp_size`` does not divide.
    """
    if not isinstance(w, np.ndarray):
        raise TypeError(f"Got w of type {type(w).__name__}, but w must be a numpy.ndarray")
    dim = _check_partition(w.shape, parallel, tp_size, rank)
    members = w if w.ndim == 3 else w[None]
    member_dim = dim - (w.ndim - 2)  # the 2-D rule: 0 (out) or 1 (in)
    size = members.shape[1 + member_dim] // tp_size
    chunk = slice(rank * size, (rank + 1) * size)
    shards = [member[chunk] if member_dim == 0 else member[:, chunk] for member in members]
    shard_shape = tuple(size if axis == dim else n for axis, n in enumerate(w.shape))
    stacked = np.stack(shards) if shards else np.empty((0, *shard_shape[1:]), dtype=w.dtype)
    return {"shard": np.ascontiguousarray(stacked.reshape(shard_shape)), "partition_dim": np.array([dim], np.int64)}


# -- shared pieces ----------------------------------------------------------------------------------
def _member_shapes(num_members: object, first_dims: object, last_dims: object) -> list[tuple[int, int]]:
    """The members' ``(M, K)`` after checking the count and both dims lists."""
    if isinstance(num_members, bool) or not isinstance(num_members, (int, np.integer)) or num_members < 1:
        raise ValueError(f"Got num_members={num_members!r}, but a grouped tensor has an int >= 1 of members")
    dims = {}
    for name, values in (("first_dims", first_dims), ("last_dims", last_dims)):
        if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
            raise ValueError(f"Got {name}={values!r}, but {name} must be a sequence of ints")
        if len(values) != num_members:
            raise ValueError(
                f"Got {name} with {len(values)} entries and num_members={num_members}, but there is one per member"
            )
        for i, v in enumerate(values):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"Got {name}[{i}]={v!r}, but member dims must be ints >= 0 (member {i})")
        dims[name] = [int(v) for v in values]
    return list(zip(dims["first_dims"], dims["last_dims"], strict=True))


def _check_recipe(recipe: str, block: str, allowed: tuple[str, ...], shapes: list[tuple[int, int]]) -> None:
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


def _check_buffer(name: str, buffer: np.ndarray, total: int) -> None:
    if buffer.ndim != 1:
        raise ValueError(f"Got {name}.shape={buffer.shape}, but {name} must be 1-D (members back to back)")
    if buffer.size != total:
        raise ValueError(
            f"Got {name} with {buffer.size} elements, but the members' shapes (first_dims[i] x last_dims[i]) "
            f"add up to {total}: the buffer must end where the last member ends"
        )


def _offsets(sizes: Sequence[int]) -> np.ndarray:
    """``[0, s0, s0 + s1, ...]`` as int64."""
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64)


def _logical_shape(shapes: list[tuple[int, int]]) -> tuple[int, int]:
    firsts, lasts = [m for m, _ in shapes], [k for _, k in shapes]
    if len(set(lasts)) == 1:
        return sum(firsts), lasts[0]
    if len(set(firsts)) == 1:
        return firsts[0], sum(lasts)
    return 1, sum(m * k for m, k in shapes)


def _split(data: np.ndarray, offsets: np.ndarray, shapes: list[tuple[int, int]]) -> list[np.ndarray]:
    """Member ``i`` as a view ``[M_i, K_i]`` of ``data[offsets[i] : offsets[i + 1]]``."""
    return [data[offsets[i] : offsets[i + 1]].reshape(shape) for i, shape in enumerate(shapes)]


def _check_partition(shape: tuple[int, ...], parallel: str, tp_size: object, rank: object) -> int:
    """The partitioned axis of a weight of ``shape``, after checking the arguments."""
    check_choice("parallel", parallel, PARALLEL_MODES)
    if len(shape) not in (2, 3):
        raise ValueError(
            f"Got w.shape={shape}, but w must be a weight [out, in] or a grouped weight [num_gemms, out, in]"
        )
    if isinstance(tp_size, bool) or not isinstance(tp_size, (int, np.integer)) or tp_size < 1:
        raise ValueError(f"Got tp_size={tp_size!r}, but tp_size must be an int >= 1")
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < tp_size:
        raise ValueError(f"Got rank={rank!r} and tp_size={tp_size}, but rank must be an int in 0 .. tp_size - 1")
    dim = len(shape) - (2 if parallel == "column" else 1)
    if shape[dim] % tp_size:
        axis = "out" if parallel == "column" else "in"
        raise ValueError(
            f"Got w.shape[{dim}]={shape[dim]} (the {axis} axis) and tp_size={tp_size}, but {parallel}-parallel "
            f"splits that axis into tp_size equal shards: it must be divisible by tp_size"
        )
    return dim


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _scale_shapes(recipe: str, block: str, m: int, k: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """TE ``get_scale_shape`` of an ``[m, k]`` member: rowwise and columnwise (module docstring)."""
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


def _member_quantizer(
    recipe: str, block: str, scale_layout: str, usage: str, x_dtype: str | None
) -> Callable[[np.ndarray], dict[str, np.ndarray]]:
    """The recipe contract's reference, with TE's defaults, as a function of one member."""
    if recipe == "fp8_tensor":
        return lambda x: fp8_tensor(x, format=_E4M3, usage=usage, x_dtype=x_dtype)
    if recipe == "mxfp8":
        kwargs = {"scale_rule": "rceil", "usage": usage, "blocks": block, "scale_layout": scale_layout, "edges": "te"}
        return lambda x: mx(x, format=_E4M3, **kwargs)
    if recipe == "fp8_block":
        return lambda x: fp8_block(x, format=_E4M3, block=_RECIPE_BLOCK[recipe][block], usage=usage, x_dtype=x_dtype)
    return lambda x: nvfp4(x, usage=usage, block=_RECIPE_BLOCK[recipe][block])


def _allocate(
    produced: _Outputs, offsets: np.ndarray, slots: dict[str, list[tuple[int, ...]]], num_members: int
) -> dict[str, np.ndarray]:
    """The grouped buffers: zeros, per-member values as an empty member's; scale buffers with their
    ``_offsets`` and a ``_padding`` mask (all True for block scales until a member's scales land)."""
    out: dict[str, np.ndarray] = {}
    for name, (_, placement, side) in produced.items():
        dtype = np.uint8 if placement in ("elements", "bytes") or name.endswith("scales") else F32
        if placement == "member":
            out[name] = np.full(num_members, _EMPTY_MEMBER[name], dtype=F32)
            if name.startswith("scale"):
                out[f"{name}_padding"] = np.zeros(num_members, dtype=bool)
        elif placement == "scales":
            scale_offsets = _offsets([math.prod(s) for s in slots[side]])
            out[name] = np.zeros(int(scale_offsets[-1]), dtype=dtype)
            out[f"{name}_offsets"] = scale_offsets
            out[f"{name}_padding"] = np.ones(int(scale_offsets[-1]), dtype=bool)
        else:
            out[name] = np.zeros(int(offsets[-1]) // (2 if placement == "bytes" else 1), dtype=dtype)
    return out


def _place_scales(slot: np.ndarray, padding: np.ndarray, scales: np.ndarray, dont_care: np.ndarray | None) -> None:
    """A member's scale matrix into the top-left of its padded slot; the rest stays padding."""
    rows, cols = scales.shape
    slot[:rows, :cols] = scales
    padding[:rows, :cols] = False if dont_care is None else dont_care


def gemm(a: np.ndarray, b: np.ndarray, *, form: str, groups: int, group_sizes: Sequence[int]) -> dict[str, np.ndarray]:
    """``group.gemm``: :func:`reference.gemm.grouped` (the grouped matmul lives with the other GEMMs)."""
    from reference.gemm import grouped

    return grouped(a, b, form=form, groups=groups, group_sizes=group_sizes)
