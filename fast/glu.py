"""Block interleaving of fused GLU weights (``glu.interleave``, ``glu.deinterleave``, ``glu.interleave_grouped``).

Pure data movement: a reshape, a swap of the two leading axes and one strided copy into a new
contiguous tensor.  torch's copy kernel does this in a single pass over memory on CPU and on
CUDA, so these torch ops are both the CPU and the CUDA path; a Triton kernel would move the same
bytes.  Each block of ``block_size`` rows is contiguous in the output (and in a contiguous input),
so the copy moves blocks as 8-byte integers when their size allows, which brings the strided copy to
about the copy bandwidth, since torch's strided copy costs about the same per element whatever the
element's size (``docs/performance.md``).  A grouped
weight ``[num_gemms, 2*F, H]`` goes through the same single copy with the members as a leading axis.
"""

from __future__ import annotations

import math

import torch

__all__ = ["deinterleave", "interleave", "interleave_grouped"]

DIRECTIONS: tuple[str, ...] = ("interleave", "deinterleave")


def interleave(w: torch.Tensor, *, block_size: int) -> dict[str, torch.Tensor]:
    """Interleave the two halves of ``w`` along dim 0 in blocks of ``block_size`` rows.

    Contract
    --------
    ``glu.interleave``: with ``k = block_size``, ``W = w[:d0/2]`` (gate) and ``V = w[d0/2:]``
    (value), ``out = [W[0:k], V[0:k], W[k:2k], V[k:2k], ...]`` along dim 0, i.e.
    ``out[(2*j + h)*k + r] = w[h*d0/2 + j*k + r]`` for ``h`` in {0, 1}.  Trailing dims ride along,
    so it applies to an fc1 weight ``[2*F, H]`` and its bias ``[2*F]`` alike.

    Source
    ------
    TransformerEngine PR #3078, ``transformer_engine/pytorch/utils.py``
    ``interleave_glu_tensor(t, interleave_size)``: reshape to ``(2, d0/(2k), k, *rest)``, swap the
    first two axes, reshape back; ``specs/glu/interleave.yaml``.

    Encoding
    --------
    Any dtype; values are moved, never converted.  ``out`` is a new contiguous tensor with the
    shape, dtype and device of ``w`` (never a view of it).

    Edge cases
    ----------
    - ``d0 == 2*k``: one block per half, so ``out`` equals ``w``.
    - ``d0 == 0``: an empty ``out`` of the same shape.

    Raises ``ValueError`` unless ``block_size`` is a positive int (bools are refused), ``w`` has at
    least 1 dimension and ``w.shape[0]`` is divisible by ``2*block_size``; ``TypeError`` unless
    ``w`` is a ``torch.Tensor``.
    """
    return {"out": _regroup(w, block_size, to_interleaved=True)}


def deinterleave(w: torch.Tensor, *, block_size: int) -> dict[str, torch.Tensor]:
    """Undo :func:`interleave`: gather the even blocks into the first half, the odd ones into the second.

    Contract
    --------
    ``glu.deinterleave``: ``out[h*d0/2 + j*k + r] = w[(2*j + h)*k + r]`` with ``k = block_size``,
    so ``deinterleave(interleave(w)) == interleave(deinterleave(w)) == w``.

    Source
    ------
    TransformerEngine PR #3078, ``transformer_engine/pytorch/utils.py``
    ``deinterleave_glu_tensor(t, interleave_size)``: reshape to ``(d0/(2k), 2, k, *rest)``, swap
    the first two axes, reshape back; ``specs/glu/deinterleave.yaml``.

    Encoding and edge cases as :func:`interleave`, with the same errors.
    """
    return {"out": _regroup(w, block_size, to_interleaved=False)}


def interleave_grouped(w: torch.Tensor, *, block_size: int, direction: str = "interleave") -> dict[str, torch.Tensor]:
    """:func:`interleave` (or :func:`deinterleave`) of every member of a grouped FC1 weight or bias.

    Contract
    --------
    ``glu.interleave_grouped``: for ``w`` ``[num_gemms, 2*F, *rest]`` (a grouped fc1 weight
    ``[num_gemms, 2*F, H]`` or its bias ``[num_gemms, 2*F]``), ``out[g] = glu.<direction>(w[g])`` with
    ``block_size``: halves along each member's dim 0 (dim 1 of ``w``), never across members.  One
    strided copy for all members.

    Source
    ------
    TransformerEngine PR #3078 ``interleave_glu_tensor`` / ``deinterleave_glu_tensor`` per expert;
    grouped weights of ``GroupedLinear(single_grouped_weight=True)`` (PR #2731);
    ``specs/glu/interleave_grouped.yaml``.

    Encoding
    --------
    Any dtype; a new contiguous ``out`` with the shape, dtype and device of ``w``.

    Edge cases
    ----------
    ``num_gemms == 0`` or ``2*F == 0``: an empty ``out``; ``2*F == 2*k``: ``out`` equals ``w``.

    Raises ``ValueError`` unless ``direction`` is ``"interleave"`` or ``"deinterleave"``,
    ``block_size`` is a positive int, ``w`` has at least 2 dimensions and ``w.shape[1]`` is divisible
    by ``2*block_size``; ``TypeError`` unless ``w`` is a ``torch.Tensor``.
    """
    if not any(type(direction) is str and direction == choice for choice in DIRECTIONS):
        raise ValueError(f"Got direction={direction!r}, but direction must be one of {list(DIRECTIONS)}")
    return {"out": _regroup(w, block_size, to_interleaved=direction == "interleave", axis=1)}


def _regroup(w: torch.Tensor, block_size: int, *, to_interleaved: bool, axis: int = 0) -> torch.Tensor:
    """Swap the (half, block) axes of dim ``axis`` viewed as ``(2, n, k)`` (halves) or ``(n, 2, k)`` (pairs).

    The dims before ``axis`` (the members of a grouped weight) form one leading axis that rides along.
    """
    _check(w, block_size, axis=axis)
    members = math.prod(w.shape[:axis])
    blocks_per_half = w.shape[axis] // (2 * block_size)
    block_numel = block_size * math.prod(w.shape[axis + 1 :])
    halves = (members, 2, blocks_per_half, block_numel)
    pairs = (members, blocks_per_half, 2, block_numel)
    source_shape, target_shape = (halves, pairs) if to_interleaved else (pairs, halves)
    out = torch.empty(w.shape, dtype=w.dtype, device=w.device)
    source, target = w.reshape(source_shape), out.view(target_shape)
    if _movable_as_int64(source):
        source, target = source.view(torch.int64), target.view(torch.int64)
    target.copy_(source.transpose(1, 2))
    return out


def _movable_as_int64(blocks: torch.Tensor) -> bool:
    """Whether the contiguous blocks (last dim) can be reinterpreted as whole 8-byte integers."""
    return (
        blocks.element_size() < 8
        and blocks.numel() > 0
        and blocks.is_contiguous()
        and blocks.shape[-1] * blocks.element_size() % 8 == 0
        and blocks.storage_offset() * blocks.element_size() % 8 == 0
    )


def _check(w: torch.Tensor, block_size: int, *, axis: int) -> None:
    """Validate the arguments of both directions, halves along ``axis``."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"Got block_size={block_size!r}, but block_size must be a positive int")
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"Got w of type {type(w).__name__}, but w must be a torch.Tensor")
    if w.ndim <= axis:
        dimensions = f"{axis + 1} dimension{'s' * (axis > 0)}"
        raise ValueError(f"Got w with shape {tuple(w.shape)}, but w must have at least {dimensions}")
    if w.shape[axis] % (2 * block_size) != 0:
        raise ValueError(
            f"Got block_size={block_size} and w.shape[{axis}]={w.shape[axis]}, "
            f"but w.shape[{axis}] must be divisible by 2*block_size={2 * block_size}"
        )
