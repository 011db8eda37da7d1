"""Block interleaving of fused GLU weights (``glu.interleave``, ``glu.deinterleave``, ``glu.interleave_grouped``)."""

from __future__ import annotations

import numpy as np

from reference._checks import check_choice

__all__ = ["DIRECTIONS", "deinterleave", "interleave", "interleave_grouped"]

DIRECTIONS: tuple[str, ...] = ("interleave", "deinterleave")
"""``glu.interleave_grouped``: which of the two contracts each member goes through."""


def interleave(w: np.ndarray, *, block_size: int) -> dict[str, np.ndarray]:
    """Interleave the two halves of ``w`` along dim 0 in blocks of ``block_size`` rows.

    Contract
    --------
    ``glu.interleave``: with ``k = block_size``, ``W = w[:d0/2]`` (gate) and ``V = w[d0/2:]``
    (value), ``out = [W[0:k], V[0:k], W[k:2k], V[k:2k], ...]`` along dim 0; equivalently
    ``out[(2*j + h)*k + r] = w[h*d0/2 + j*k + r]`` for ``h`` in {0, 1}.  Trailing dims are
    carried unchanged, so it applies to an fc1 weight ``[2*F, H]`` and its bias ``[2*F]`` alike.

    Source
    ------
    TransformerEngine PR #3078, ``transformer_engine/pytorch/utils.py``
    ``interleave_glu_tensor(t, interleave_size)``: reshape to ``(2, d0/(2k), k, *rest)``, swap
    the first two axes, reshape back.

    Encoding
    --------
    Any dtype; values are moved, never converted.  ``out`` is a new C-contiguous array with the
    shape and dtype of ``w``.

    Edge cases
    ----------
    - ``d0 == 2*k``: a single block per half, so ``out`` equals ``w``.
    - ``d0 == 0``: empty output of the same shape.

    Raises ``ValueError`` unless ``block_size`` is a positive int (bools are refused), ``w`` has at
    least 1 dimension, and ``w.shape[0]`` is divisible by ``2*block_size``; ``TypeError`` unless
    ``w`` is a ``numpy.ndarray``.
    """
    return {"out": _regroup(w, block_size, to_interleaved=True)}


def deinterleave(w: np.ndarray, *, block_size: int) -> dict[str, np.ndarray]:
    """Undo :func:`interleave`: gather the even blocks into the first half, the odd ones into the second.

    Contract
    --------
    ``glu.deinterleave``: ``out[h*d0/2 + j*k + r] = w[(2*j + h)*k + r]`` with ``k = block_size``,
    so ``deinterleave(interleave(w)) == interleave(deinterleave(w)) == w``.

    Source
    ------
    TransformerEngine PR #3078, ``transformer_engine/pytorch/utils.py``
    ``deinterleave_glu_tensor(t, interleave_size)``: reshape to ``(d0/(2k), 2, k, *rest)``, swap
    the first two axes, reshape back.

    Encoding
    --------
    As :func:`interleave`: any dtype, a new C-contiguous ``out`` with the shape of ``w``.

    Edge cases
    ----------
    As :func:`interleave`, with the same errors.
    """
    return {"out": _regroup(w, block_size, to_interleaved=False)}


def interleave_grouped(w: np.ndarray, *, block_size: int, direction: str = "interleave") -> dict[str, np.ndarray]:
    """:func:`interleave` (or :func:`deinterleave`) of every member of a grouped FC1 weight or bias.

    Contract
    --------
    ``glu.interleave_grouped``: for ``w`` of shape ``[num_gemms, 2*F, *rest]`` (a grouped fc1 weight
    ``[num_gemms, 2*F, H]`` or its bias ``[num_gemms, 2*F]``), ``out[g] = glu.<direction>(w[g])``
    with ``block_size`` for every member ``g``: the halves are taken along each member's dim 0 (dim 1
    of ``w``), never across members.  This reference computes it member by member through
    :func:`interleave` / :func:`deinterleave`.

    Source
    ------
    TransformerEngine PR #3078 ``interleave_glu_tensor`` / ``deinterleave_glu_tensor`` applied per
    expert (``GroupedLinear`` holds one fc1 weight per GEMM, or one grouped ``[num_gemms, out, in]``
    weight with ``single_grouped_weight=True``, PR #2731); ``specs/glu/interleave_grouped.yaml``.

    Encoding
    --------
    Any dtype; a new C-contiguous ``out`` with the shape and dtype of ``w``.

    Edge cases
    ----------
    - ``num_gemms == 0`` or ``2*F == 0``: an empty ``out`` of the same shape.
    - ``2*F == 2*k``: one block per half, so ``out`` equals ``w``.

    Raises ``ValueError`` unless ``direction`` is ``"interleave"`` or ``"deinterleave"``,
    ``block_size`` is a positive int, ``w`` has at least 2 dimensions and ``w.shape[1]`` is divisible
    by ``2*block_size``; ``TypeError`` unless ``w`` is a ``numpy.ndarray``.
    """
    check_choice("direction", direction, DIRECTIONS)
    _check(w, block_size, axis=1)
    member = interleave if direction == "interleave" else deinterleave
    out = np.empty(w.shape, dtype=w.dtype)
    for g in range(w.shape[0]):
        out[g] = member(w[g], block_size=block_size)["out"]
    return {"out": out}


def _regroup(w: np.ndarray, block_size: int, *, to_interleaved: bool) -> np.ndarray:
    """Swap the (half, block) axes of dim 0 viewed as ``(2, n, k)`` (halves) or ``(n, 2, k)`` (pairs)."""
    block = _check(w, block_size)
    blocks_per_half = w.shape[0] // (2 * block)
    halves = (2, blocks_per_half, block, *w.shape[1:])
    pairs = (blocks_per_half, 2, block, *w.shape[1:])
    source, target = (halves, pairs) if to_interleaved else (pairs, halves)
    out = np.empty(w.shape, dtype=w.dtype)
    out.reshape(target)[...] = w.reshape(source).swapaxes(0, 1)
    return out


def _check(w: np.ndarray, block_size: int, *, axis: int = 0) -> int:
    """Validate the arguments of both directions, halves along ``axis``; return ``block_size`` as an int."""
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise ValueError(f"Got block_size={block_size!r}, but block_size must be a positive int")
    block = int(block_size)
    if block <= 0:
        raise ValueError(f"Got block_size={block}, but block_size must be a positive int")
    if not isinstance(w, np.ndarray):
        raise TypeError(f"Got w of type {type(w).__name__}, but w must be a numpy.ndarray")
    if w.ndim <= axis:
        raise ValueError(f"Got w with shape {w.shape}, but w must have at least {axis + 1} dimension{'s' * (axis > 0)}")
    if w.shape[axis] % (2 * block) != 0:
        raise ValueError(
            f"Got block_size={block} and w.shape[{axis}]={w.shape[axis]}, "
            f"but w.shape[{axis}] must be divisible by 2*block_size={2 * block}"
        )
    return block
