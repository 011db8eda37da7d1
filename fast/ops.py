"""The fast quantizers as torch custom ops with fake implementations (contract ``compile.fake_matches_real``).

``torch.ops.qconform.quantize(x, recipe, block, usage, scale_layout)`` runs ``fast.buffers.quantize``
(the recipe's ``fast.quant`` quantizer with TransformerEngine's defaults: Triton kernels on CUDA, torch
ops on CPU) and returns its buffers as a list in ``fast.buffers.layout`` order.  Its fake (meta)
implementation allocates those buffers from ``fast.buffers.layout`` of ``x.shape`` alone -- the same
names, shapes and dtypes, contiguous, on ``x``'s device -- so ``torch.compile`` and export trace it
without data (symbolic shapes included) and without a graph break, and ``torch.library.opcheck`` can
compare fake and real outputs.  :func:`quantize` calls the op and names its outputs.

Source: PyTorch ``torch.library.custom_op`` / ``register_fake`` (the custom-ops manual: a fake impl
returns empty tensors of the real outputs' metadata and must not read data);
``shared/notes/torch_contracts.md`` §6; ``fast/buffers.py``.
"""

from __future__ import annotations

import torch

from fast import buffers

__all__ = ["quantize", "quantize_op"]


@torch.library.custom_op("qconform::quantize", mutates_args=())
def quantize_op(x: torch.Tensor, recipe: str, block: str, usage: str, scale_layout: str) -> list[torch.Tensor]:
    """The buffers of ``fast.buffers.quantize(x, ...)``, in ``fast.buffers.layout`` order.

    A custom op's outputs may not share storage with its input or with each other; the quantizers may
    return one tensor for two buffers (``scale`` and ``scale_inv`` of an empty ``x``), so a buffer whose
    storage was already seen is cloned (empty storages all look alike: those clones cost nothing).
    """
    out = buffers.quantize(x, recipe=recipe, block=block, usage=usage, scale_layout=scale_layout)
    seen, result = {x.untyped_storage().data_ptr()}, []
    for tensor in out.values():
        fresh = tensor.clone() if tensor.untyped_storage().data_ptr() in seen else tensor
        seen.add(fresh.untyped_storage().data_ptr())
        result.append(fresh)
    return result


@quantize_op.register_fake
def _quantize_fake(x: torch.Tensor, recipe: str, block: str, usage: str, scale_layout: str) -> list[torch.Tensor]:
    """Empty contiguous buffers of ``fast.buffers.layout(x.shape, ...)``; reads no data."""
    if scale_layout not in buffers.SCALE_LAYOUTS or (scale_layout != "compact" and recipe != "mxfp8"):
        raise ValueError(f"Got scale_layout={scale_layout!r} and recipe={recipe!r}, but only mxfp8 has swizzled scales")
    described = buffers.layout(tuple(x.shape), recipe=recipe, block=block, usage=usage)
    return [x.new_empty(b.shape, dtype=b.dtype) for b in described.values()]


def quantize(
    x: torch.Tensor, *, recipe: str, block: str = "none", usage: str = "both", scale_layout: str = "compact"
) -> dict[str, torch.Tensor]:
    """``fast.buffers.quantize`` through the custom op: traceable by ``torch.compile(fullgraph=True)``.

    Raises as ``fast.buffers.quantize``.
    """
    names = buffers.layout(tuple(x.shape), recipe=recipe, block=block, usage=usage)
    return dict(zip(names, quantize_op(x, recipe, block, usage, scale_layout), strict=True))
