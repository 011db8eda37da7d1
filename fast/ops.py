"""The fast quantizers and GEMMs as torch custom ops with fake implementations (contract ``compile.fake_matches_real``).

``torch.ops.qconform.quantize(x, recipe, block, usage, scale_layout)`` runs ``fast.buffers.quantize``
(the recipe's ``fast.quant`` quantizer with TransformerEngine's defaults: Triton kernels on CUDA, torch
ops on CPU) and returns its buffers as a list in ``fast.buffers.layout`` order.  Its fake (meta)
implementation allocates those buffers from ``fast.buffers.layout`` of ``x.shape`` alone -- the same
names, shapes and dtypes, contiguous, on ``x``'s device -- so ``torch.compile`` and export trace it
without data (symbolic shapes included) and without a graph break, and ``torch.library.opcheck`` can
compare fake and real outputs.  :func:`quantize` calls the op and names its outputs.

``torch.ops.qconform.grouped_mm(a, b, offs, form, check_offsets)`` runs ``fast.gemm.grouped_mm`` (contract
``group.gemm`` with torch's cumulative int32 end offsets) and ``torch.ops.qconform.scaled_mm(a, b, scale_a,
scale_b, scaling_a, scaling_b, format_a, format_b, out_dtype)`` runs ``fast.gemm.scaled`` (contract
``gemm.scaled``: ``torch._scaled_mm`` where it has a kernel, else dequantize-then-matmul) and returns its
``out``.  Their fakes are ``fast.gemm.empty_grouped_mm`` and ``fast.gemm.empty_scaled``: the checks that
read no data (so bad arguments raise ``fast.gemm``'s errors while tracing too) and an empty output.  The
group sizes are data: a grouped product's output shape depends on the operands' shapes, ``len(offs)`` and
the form alone, so its fake never reads ``offs`` and one compiled graph serves every group split.

Source: PyTorch ``torch.library.custom_op`` / ``register_fake`` (the custom-ops manual: a fake impl
returns empty tensors of the real outputs' metadata and must not read data); ``pytorch/pytorch``
``aten/src/ATen/native/cuda/ScaledBlas.cpp`` and ``GroupedBlas.cpp`` (``_scaled_mm``, ``_grouped_mm``);
``fast/buffers.py``; ``fast/gemm.py``.
"""

from __future__ import annotations

import torch

from fast import buffers, gemm

__all__ = ["grouped_mm_op", "quantize", "quantize_op", "scaled_mm_op"]


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


@torch.library.custom_op("qconform::grouped_mm", mutates_args=())
def grouped_mm_op(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, form: str, check_offsets: bool) -> torch.Tensor:
    """``fast.gemm.grouped_mm(a, b, offs, form=form, check_offsets=check_offsets)``: a fresh bfloat16 tensor."""
    return gemm.grouped_mm(a, b, offs, form=form, check_offsets=check_offsets)


@grouped_mm_op.register_fake
def _grouped_mm_fake(
    a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, form: str, check_offsets: bool
) -> torch.Tensor:
    """``fast.gemm.empty_grouped_mm``: reads neither the operands nor the offsets."""
    return gemm.empty_grouped_mm(a, b, offs, form=form)


@torch.library.custom_op("qconform::scaled_mm", mutates_args=())
def scaled_mm_op(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    scaling_a: str,
    scaling_b: str,
    format_a: str,
    format_b: str,
    out_dtype: str,
) -> torch.Tensor:
    """``fast.gemm.scaled(...)["out"]``: float32 ``[M, N]`` holding ``out_dtype`` values, a fresh tensor."""
    return gemm.scaled(a, b, scale_a, scale_b, scaling_a=scaling_a, scaling_b=scaling_b, format_a=format_a,
                       format_b=format_b, out_dtype=out_dtype)["out"]  # fmt: skip


@scaled_mm_op.register_fake
def _scaled_mm_fake(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    scaling_a: str,
    scaling_b: str,
    format_a: str,
    format_b: str,
    out_dtype: str,
) -> torch.Tensor:
    """``fast.gemm.empty_scaled``: reads no data (operand values outside their format raise in the real op only)."""
    return gemm.empty_scaled(a, b, scale_a, scale_b, scaling_a=scaling_a, scaling_b=scaling_b, format_a=format_a,
                             format_b=format_b, out_dtype=out_dtype)  # fmt: skip
