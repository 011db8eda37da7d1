"""The inner buffers of a quantized tensor: described without data, flattened and rebuilt (``buffers.describe``).

:func:`layout` gives, from a shape alone, the name, shape and dtype of every buffer that the recipe's
``fast.quant`` quantizer (run by :func:`quantize` with TransformerEngine's defaults) produces, in the
order :func:`quantize` returns them; ``fast.ops`` builds the fake (meta) implementations of its custom
ops from it.  :func:`flatten` packs a quantized tensor's buffers into one byte buffer (each at a
16-byte aligned offset, :func:`byte_offsets`) and :func:`rebuild` gives them back as views of it, bit
for bit.  ``reference/buffers.py`` states the shapes per recipe in full.

Source: ``NVIDIA/TransformerEngine@d0067d0:pytorch/csrc/quantizer.cpp`` (``create_tensor``, ``get_scale_shape``
of each quantizer), ``NVIDIA/TransformerEngine@d0067d0:pytorch/tensor/*_tensor.py`` (``__tensor_flatten__`` /
``__tensor_unflatten__``), ``NVIDIA/TransformerEngine@d0067d0:pytorch/tensor/storage/grouped_tensor_storage.py``;
``specs/buffers/describe.yaml``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import torch

from fast._checks import check_choice
from fast.quant import fp8_block, fp8_tensor, mx, nvfp4

__all__ = ["ALIGNMENT", "BLOCKS", "RECIPES", "USAGES", "Buffer", "byte_offsets", "describe", "flatten", "layout",
           "quantize", "rebuild"]  # fmt: skip

RECIPES: tuple[str, ...] = ("fp8_tensor", "mxfp8", "fp8_block", "nvfp4")
BLOCKS: tuple[str, ...] = ("none", "1d", "2d")
USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")
SCALE_LAYOUTS: tuple[str, ...] = ("compact", "swizzled")
ALIGNMENT = 16
"""Byte alignment of every buffer inside a flattened quantized tensor (vector loads of any of them)."""

_E4M3 = "float8_e4m3fn"
_RECIPE_BLOCK = {"fp8_block": {"1d": "1x128", "2d": "128x128"}, "nvfp4": {"1d": "1x16", "2d": "16x16"}}


class Buffer(NamedTuple):
    """One inner buffer of a quantized tensor: its shape and dtype (contiguous, row-major)."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def layout(shape: Sequence[int], *, recipe: str, block: str = "none", usage: str = "both") -> dict[str, Buffer]:
    """The buffers, in order, of a tensor of ``shape`` quantized by ``recipe``; no data is read or allocated.

    Contract
    --------
    ``buffers.describe`` (``reference.buffers.layout``): ``fp8_tensor`` ``amax``, ``scale``,
    ``scale_inv`` ``[1]`` float32, ``data`` ``x.shape``, ``columnwise_data`` ``[K, *lead, M]``;
    ``mxfp8`` ``data_rowwise`` / ``data_columnwise`` ``x.shape`` and E8M0 scales ``[round_up(Mf, 128),
    round_up(K / 32, 4)]`` / ``[round_up(Mf / 32, 4), round_up(K, 128)]``; ``fp8_block`` data as
    ``fp8_tensor`` and GEMM-ready float32 scales; ``nvfp4`` ``[M, K / 2]`` codes, ``[M, K / 16]``
    E4M3 scales, ``amax`` and ``tensor_scale`` ``[1]``, and the same of the transpose.  Each copy
    only where ``usage`` asks for it.  ``shape`` may hold ``torch.SymInt``s (fake tensors).

    Source
    ------
    TE ``get_scale_shape`` of each quantizer; ``reference/buffers.py``.

    Raises ``ValueError`` for an unknown ``recipe``, ``block`` or ``usage``, a ``block`` the recipe
    lacks, and a shape the recipe's quantizer refuses (naming the dim and the rule).
    """
    check_choice("recipe", recipe, RECIPES)
    check_choice("block", block, BLOCKS)
    check_choice("usage", usage, USAGES)
    if (block == "none") != (recipe == "fp8_tensor"):
        wanted = "'none'" if recipe == "fp8_tensor" else "'1d' or '2d'"
        raise ValueError(f"Got recipe={recipe!r} and block={block!r}, but {recipe} takes block {wanted}")
    dims = tuple(shape)
    rowwise, columnwise = usage != "columnwise", usage != "rowwise"
    u8, f32 = torch.uint8, torch.float32
    if recipe == "nvfp4":
        if len(dims) != 2 or not all(d > 0 and d % 16 == 0 for d in dims):
            raise ValueError(f"Got shape={dims}, but nvfp4 needs a 2-D [M, K] with M and K positive multiples of 16")
        row, col = ({
            f"{prefix}data": Buffer((rows, cols // 2), u8),
            f"{prefix}scales": Buffer((rows, cols // 16), u8),
            f"{prefix}amax": Buffer((1,), f32),
            f"{prefix}tensor_scale": Buffer((1,), f32),
        } for prefix, rows, cols in (("", dims[0], dims[1]), ("columnwise_", dims[1], dims[0])))  # fmt: skip
        return _copies(rowwise, columnwise, row, col)
    if len(dims) < (2 if recipe == "mxfp8" else 1):
        raise ValueError(f"Got shape={dims}, but {recipe} needs at least {2 if recipe == 'mxfp8' else 1} dim(s)")
    rows, k = math.prod(dims[:-1]), dims[-1]
    transposed = (k, *dims[:-1])
    if recipe == "fp8_tensor":
        scalars = {name: Buffer((1,), f32) for name in ("amax", "scale", "scale_inv")}
        return scalars | _copies(
            rowwise, columnwise, {"data": Buffer(dims, u8)}, {"columnwise_data": Buffer(transposed, u8)}
        )
    if recipe == "fp8_block":
        mb, kb = _ceil_div(rows, 128), _ceil_div(k, 128)
        one_d = block == "1d"
        row_scales = (kb, _round_up(rows, 4)) if one_d else (mb, _round_up(kb, 4))
        col_scales = (mb, _round_up(k, 4)) if one_d else (kb, _round_up(mb, 4))
        row = {"data": Buffer(dims, u8), "scale_inv": Buffer(row_scales, f32)}
        col = {"columnwise_data": Buffer(transposed, u8), "columnwise_scale_inv": Buffer(col_scales, f32)}
        return _copies(rowwise, columnwise, row, col)
    if rows == 0 or k == 0:
        raise ValueError(f"Got shape={dims}, but mxfp8 needs at least one row and one column")
    if (rowwise or block == "2d") and k % 32:
        raise ValueError(f"Got shape={dims}, but mxfp8 needs K ({k}) a multiple of 32 with a rowwise copy or 2d blocks")
    if (columnwise or block == "2d") and rows % 32:
        raise ValueError(
            f"Got shape={dims}, but mxfp8 needs the flattened rows ({rows}) a multiple of 32 with a columnwise copy "
            "or 2d blocks"
        )
    row = {"data_rowwise": Buffer(dims, u8), "scale_rowwise": Buffer((_round_up(rows, 128), _round_up(k // 32, 4)), u8)}
    col = {
        "data_columnwise": Buffer(dims, u8),
        "scale_columnwise": Buffer((_round_up(rows // 32, 4), _round_up(k, 128)), u8),
    }
    return _copies(rowwise, columnwise, row, col)


def quantize(
    x: torch.Tensor, *, recipe: str, block: str = "none", usage: str = "both", scale_layout: str = "compact"
) -> dict[str, torch.Tensor]:
    """``x`` quantized by the recipe's ``fast.quant`` quantizer with TransformerEngine's defaults.

    ``fp8_tensor``: ``fast.quant.fp8_tensor`` E4M3; ``mxfp8``: ``fast.quant.mx`` E4M3, rceil, TE
    edges, ``blocks=block``, ``scale_layout``; ``fp8_block``: ``fast.quant.fp8_block`` E4M3, 1x128 or
    128x128; ``nvfp4``: ``fast.quant.nvfp4`` 1x16 or 16x16.  The outputs are the buffers of
    :func:`layout`, in its order, every padding byte zero (so the outputs are a function of ``x``:
    ``fp8_block``'s padding columns, which its quantizer leaves unwritten, are zeroed here; the other
    recipes write zeros or have none).  Raises as :func:`layout` and as the quantizer.
    """
    check_choice("scale_layout", scale_layout, SCALE_LAYOUTS)
    if scale_layout != "compact" and recipe != "mxfp8":
        raise ValueError(f"Got scale_layout={scale_layout!r} and recipe={recipe!r}, but only mxfp8 has swizzled scales")
    names = layout(tuple(x.shape), recipe=recipe, block=block, usage=usage)
    out = quantizer(recipe, block, usage, scale_layout)(x)
    if recipe == "fp8_block":  # the quantizer leaves the scale matrices' padding columns unwritten
        rows, k = math.prod(x.shape[:-1]), x.shape[-1]
        widths = (rows, k) if block == "1d" else (_ceil_div(k, 128), _ceil_div(rows, 128))
        for name, width in zip(("scale_inv", "columnwise_scale_inv"), widths, strict=True):
            if name in out:
                out[name][:, width:] = 0
    return {name: out[name] for name in names}


def quantizer(
    recipe: str, block: str, usage: str, scale_layout: str
) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """The recipe's ``fast.quant`` quantizer with TE's defaults (:func:`quantize`), as a function of ``x``."""
    if recipe == "fp8_tensor":
        return lambda x: fp8_tensor(x, format=_E4M3, usage=usage)
    if recipe == "mxfp8":
        return lambda x: mx(
            x, format=_E4M3, scale_rule="rceil", usage=usage, blocks=block, scale_layout=scale_layout, edges="te"
        )
    if recipe == "fp8_block":
        return lambda x: fp8_block(x, format=_E4M3, block=_RECIPE_BLOCK[recipe][block], usage=usage)
    return lambda x: nvfp4(x, usage=usage, block=_RECIPE_BLOCK[recipe][block])


def describe(x: torch.Tensor, *, recipe: str, block: str = "none", usage: str = "both") -> dict[str, torch.Tensor]:
    """The buffers of ``x`` quantized by ``recipe``, allocated zero-filled on ``x``'s device (contract form).

    Contract
    --------
    ``buffers.describe`` (``reference.buffers.describe``): names, shapes and dtypes of :func:`layout`
    for ``x.shape``; the values of ``x`` are never read.

    Source
    ------
    ``specs/buffers/describe.yaml``.

    Raises ``TypeError`` unless ``x`` is a tensor; ``ValueError`` as :func:`layout`.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a torch.Tensor")
    buffers = layout(tuple(x.shape), recipe=recipe, block=block, usage=usage)
    return {name: torch.zeros(b.shape, dtype=b.dtype, device=x.device) for name, b in buffers.items()}


def byte_offsets(buffers: Mapping[str, Buffer]) -> list[int]:
    """Where each buffer starts in a flattened quantized tensor, and (last entry) the total size in bytes.

    Buffer ``i`` takes ``numel * itemsize`` bytes from ``offsets[i]``, a multiple of :data:`ALIGNMENT`.
    """
    offsets = [0]
    for b in buffers.values():
        end = offsets[-1] + math.prod(b.shape) * b.dtype.itemsize
        offsets.append(_round_up(end, ALIGNMENT))
    return offsets


def flatten(quantized: Mapping[str, torch.Tensor], buffers: Mapping[str, Buffer]) -> torch.Tensor:
    """The buffers of ``quantized`` packed into one uint8 tensor at :func:`byte_offsets` (padding zero).

    Raises ``ValueError`` unless ``quantized`` holds exactly the buffers of ``buffers``, each of its
    described shape and dtype and all on one device (the message names the buffer).
    """
    if list(quantized) != list(buffers):
        raise ValueError(f"Got buffers {list(quantized)}, but the description lists {list(buffers)} (in that order)")
    devices = {t.device for t in quantized.values()}
    if len(devices) > 1:
        raise ValueError(f"Got buffers on {sorted(map(str, devices))}, but a quantized tensor lives on one device")
    for name, tensor in quantized.items():
        want = buffers[name]
        if tuple(tensor.shape) != want.shape or tensor.dtype != want.dtype:
            raise ValueError(
                f"Got {name} of shape {tuple(tensor.shape)} and dtype {tensor.dtype}, but the description says "
                f"{want.shape} and {want.dtype}"
            )
    offsets = byte_offsets(buffers)
    device = next(iter(devices)) if devices else torch.device("cpu")
    flat = torch.zeros(offsets[-1], dtype=torch.uint8, device=device)
    for start, tensor in zip(offsets, quantized.values(), strict=False):
        size = tensor.numel() * tensor.element_size()
        flat[start : start + size].copy_(tensor.contiguous().reshape(-1).view(torch.uint8))
    return flat


def rebuild(flat: torch.Tensor, buffers: Mapping[str, Buffer]) -> dict[str, torch.Tensor]:
    """The buffers of a flattened quantized tensor, as views of ``flat`` (the inverse of :func:`flatten`).

    Raises ``ValueError`` unless ``flat`` is a contiguous 1-D uint8 tensor of :func:`byte_offsets`'s total size.
    """
    offsets = byte_offsets(buffers)
    if not isinstance(flat, torch.Tensor) or flat.dtype != torch.uint8 or flat.dim() != 1 or not flat.is_contiguous():
        raise ValueError("Got a flat buffer that is not a contiguous 1-D uint8 tensor, but flatten gives one")
    if flat.numel() != offsets[-1]:
        raise ValueError(f"Got a flat buffer of {flat.numel()} bytes, but the description packs into {offsets[-1]}")
    out = {}
    for start, (name, b) in zip(offsets, buffers.items(), strict=False):
        size = math.prod(b.shape) * b.dtype.itemsize
        out[name] = flat[start : start + size].view(b.dtype).view(b.shape)
    return out


def _copies(rowwise: bool, columnwise: bool, row: dict[str, Buffer], col: dict[str, Buffer]) -> dict[str, Buffer]:
    return {**(row if rowwise else {}), **(col if columnwise else {})}


def _ceil_div(value: int, divisor: int) -> int:
    return -(-value // divisor)


def _round_up(value: int, multiple: int) -> int:
    return _ceil_div(value, multiple) * multiple
