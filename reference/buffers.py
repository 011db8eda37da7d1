"""The inner buffers of a quantized tensor, described without data (contract ``buffers.describe``).

A tensor ``x`` of shape ``[*lead, M, K]`` quantized by one of TransformerEngine's scaling recipes (with
TE's defaults, as ``group.quantize`` runs them) is a set of named buffers whose shapes and dtypes follow
from ``x.shape``, the recipe, its blocks and the usage alone.  ``Mf = prod(lead) * M`` is the number of
rows once the leading dims are flattened; ``R = rowwise``, ``C = columnwise`` copies (``usage="both"``
holds both):

- ``fp8_tensor`` (``quant.fp8_tensor``): ``amax``, ``scale``, ``scale_inv`` float32 ``[1]`` (always);
  R ``data`` uint8 ``x.shape``; C ``columnwise_data`` uint8 ``[K, *lead, M]`` (the transpose).
- ``mxfp8`` (``quant.mx``, E4M3; 1d and 2d blocks alike): R ``data_rowwise`` uint8 ``x.shape``,
  ``scale_rowwise`` uint8 ``[round_up(Mf, 128), round_up(K / 32, 4)]``; C ``data_columnwise`` uint8
  ``x.shape`` (not transposed), ``scale_columnwise`` uint8 ``[round_up(Mf / 32, 4), round_up(K, 128)]``.
- ``fp8_block`` (``quant.fp8_block``): R ``data`` uint8 ``x.shape``, ``scale_inv`` float32; C
  ``columnwise_data`` uint8 ``[K, *lead, M]``, ``columnwise_scale_inv`` float32; the scale shapes
  are 1d ``[ceil(K / 128), round_up(Mf, 4)]`` and ``[ceil(Mf / 128), round_up(K, 4)]``, 2d
  ``[ceil(Mf / 128), round_up(ceil(K / 128), 4)]`` and ``[ceil(K / 128), round_up(ceil(Mf / 128), 4)]``.
- ``nvfp4`` (``quant.nvfp4``, 2-D ``x``): R ``data`` uint8 ``[M, K / 2]``, ``scales`` uint8
  ``[M, K / 16]``, ``amax``, ``tensor_scale`` float32 ``[1]``; C the same of the transpose, prefixed
  ``columnwise_`` (``[K, M / 2]``, ``[K, M / 16]``, ``[1]``, ``[1]``).

The shapes the recipes accept are those their quantizers accept: ``fp8_tensor`` and ``fp8_block`` any
``x`` of at least 1 dim (an empty one included); ``mxfp8`` at least 2 dims, ``Mf`` and ``K`` at least 1,
``K`` a multiple of 32 when there is a rowwise copy or 2d blocks, ``Mf`` when there is a columnwise copy
or 2d blocks; ``nvfp4`` exactly 2 dims, ``M`` and ``K`` positive multiples of 16.

Source: TransformerEngine ``pytorch/csrc/quantizer.cpp`` (``Float8CurrentScalingQuantizer``,
``MXFP8Quantizer``, ``Float8BlockQuantizer``, ``NVFP4Quantizer``: ``create_tensor`` and
``get_scale_shape``), ``pytorch/tensor/*_tensor.py`` (``__tensor_flatten__`` lists the inner
buffers); the recipe contracts ``specs/quant/{fp8_tensor,mx,fp8_block,nvfp4}.yaml``;
NVIDIA/TransformerEngine@d0067d0:transformer_engine/pytorch/dynamo/tensor_spec.py (``TensorSpec``, buffer order);
``specs/buffers/describe.yaml``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from reference._checks import check_choice

__all__ = ["BLOCKS", "RECIPES", "USAGES", "describe"]

RECIPES: tuple[str, ...] = ("fp8_tensor", "mxfp8", "fp8_block", "nvfp4")
BLOCKS: tuple[str, ...] = ("none", "1d", "2d")
"""``none`` for ``fp8_tensor``; ``1d`` or ``2d`` for the block recipes."""
USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")

Buffer = tuple[tuple[int, ...], str]
"""A buffer's shape and dtype name."""


def layout(shape: Sequence[int], *, recipe: str, block: str = "none", usage: str = "both") -> dict[str, Buffer]:
    """The buffers, in order, of a tensor of ``shape`` quantized by ``recipe``: name -> (shape, dtype name).

    The data-free core of :func:`describe` (not a contract of its own, so not in ``__all__``).  Contract,
    source and accepted shapes: module docstring.  Raises ``ValueError`` for an unknown
    ``recipe``, ``block`` or ``usage``, a ``block`` the recipe does not have, a ``shape`` that is not
    a sequence of ints >= 0, and a shape the recipe does not accept (naming the dim and the rule).
    """
    check_choice("recipe", recipe, RECIPES)
    check_choice("block", block, BLOCKS)
    check_choice("usage", usage, USAGES)
    if (block == "none") != (recipe == "fp8_tensor"):
        wanted = "'none'" if recipe == "fp8_tensor" else "'1d' or '2d'"
        raise ValueError(f"Got recipe={recipe!r} and block={block!r}, but {recipe} takes block {wanted}")
    dims = _checked_shape(shape)
    rowwise, columnwise = usage != "columnwise", usage != "rowwise"
    if recipe in ("fp8_tensor", "fp8_block"):
        if not dims:
            raise ValueError(f"Got shape={dims}, but {recipe} needs at least 1 dim")
        rows, k = math.prod(dims[:-1]), dims[-1]
        transposed = (k, *dims[:-1])
        if recipe == "fp8_tensor":
            out: dict[str, Buffer] = {"amax": ((1,), "float32"), "scale": ((1,), "float32")}
            out["scale_inv"] = ((1,), "float32")
            return {**out, **_copies(rowwise, columnwise, {"data": (dims, "uint8")},
                                     {"columnwise_data": (transposed, "uint8")})}  # fmt: skip
        mb, kb = -(-rows // 128), -(-k // 128)
        row_scales, col_scales = (
            ((kb, _round_up(rows, 4)), (mb, _round_up(k, 4)))
            if block == "1d"
            else ((mb, _round_up(kb, 4)), (kb, _round_up(mb, 4)))
        )
        row = {"data": (dims, "uint8"), "scale_inv": (row_scales, "float32")}
        col = {"columnwise_data": (transposed, "uint8"), "columnwise_scale_inv": (col_scales, "float32")}
        return _copies(rowwise, columnwise, row, col)
    if recipe == "mxfp8":
        if len(dims) < 2:
            raise ValueError(f"Got shape={dims}, but mxfp8 needs at least 2 dims [..., M, K]")
        rows, k = math.prod(dims[:-1]), dims[-1]
        if not rows or not k:
            raise ValueError(f"Got shape={dims}, but mxfp8 needs at least one row and one column")
        _check_multiple(dims, "K", k, 32, "a rowwise copy or 2d blocks", rowwise or block == "2d")
        _check_multiple(
            dims, "the flattened rows", rows, 32, "a columnwise copy or 2d blocks", columnwise or block == "2d"
        )
        row = {
            "data_rowwise": (dims, "uint8"),
            "scale_rowwise": ((_round_up(rows, 128), _round_up(k // 32, 4)), "uint8"),
        }
        col = {
            "data_columnwise": (dims, "uint8"),
            "scale_columnwise": ((_round_up(rows // 32, 4), _round_up(k, 128)), "uint8"),
        }
        return _copies(rowwise, columnwise, row, col)
    if len(dims) != 2 or not all(d and d % 16 == 0 for d in dims):
        raise ValueError(f"Got shape={dims}, but nvfp4 needs a 2-D [M, K] with M and K positive multiples of 16")
    m, k = dims
    row, col = ({
        f"{prefix}data": ((rows, cols // 2), "uint8"),
        f"{prefix}scales": ((rows, cols // 16), "uint8"),
        f"{prefix}amax": ((1,), "float32"),
        f"{prefix}tensor_scale": ((1,), "float32"),
    } for prefix, rows, cols in (("", m, k), ("columnwise_", k, m)))  # fmt: skip
    return _copies(rowwise, columnwise, row, col)


def describe(x: np.ndarray, *, recipe: str, block: str = "none", usage: str = "both") -> dict[str, np.ndarray]:
    """The buffers of ``x`` quantized by ``recipe``, allocated zero-filled: names, shapes and dtypes only.

    Contract
    --------
    ``buffers.describe``: for ``x`` of shape ``[*lead, M, K]``, the names, shapes and dtypes of the
    buffers that the recipe's quantizer produces for ``usage`` (:func:`layout`, module docstring),
    computed from ``x.shape`` alone; the values of ``x`` are never read.

    Source
    ------
    Module docstring; ``specs/buffers/describe.yaml``.

    Encoding
    --------
    One zero-filled array per buffer (uint8 or float32), in the order of :func:`layout`: the
    conformance engine compares names, shapes and dtypes (and the zeros, trivially).

    Edge cases
    ----------
    Empty ``x`` (``fp8_tensor``, ``fp8_block``): empty data copies, scale matrices padded as the
    formulas give (``fp8_block`` 1d: ``[0, 0]`` rowwise for ``K = 0``).

    Raises ``TypeError`` unless ``x`` is a NumPy array; ``ValueError`` as :func:`layout`.
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"Got x of type {type(x).__name__}, but x must be a numpy.ndarray")
    buffers = layout(x.shape, recipe=recipe, block=block, usage=usage)
    return {name: np.zeros(shape, dtype=dtype) for name, (shape, dtype) in buffers.items()}


def _checked_shape(shape: object) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise ValueError(f"Got shape={shape!r}, but shape must be a sequence of ints >= 0")
    for i, d in enumerate(shape):
        if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 0:
            raise ValueError(f"Got shape[{i}]={d!r}, but shape must be a sequence of ints >= 0")
    return tuple(int(d) for d in shape)


def _check_multiple(dims: tuple[int, ...], what: str, value: int, multiple: int, when: str, applies: bool) -> None:
    if applies and value % multiple:
        raise ValueError(f"Got shape={dims}, but mxfp8 needs {what} ({value}) a multiple of {multiple} with {when}")


def _copies(rowwise: bool, columnwise: bool, row: dict[str, Buffer], col: dict[str, Buffer]) -> dict[str, Buffer]:
    return {**(row if rowwise else {}), **(col if columnwise else {})}


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
