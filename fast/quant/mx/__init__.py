"""MX quantization (contract ``quant.mx``): one fused Triton kernel for CUDA, torch ops elsewhere.

Contract
--------
``x`` (float32, bfloat16 or float16, at least 2-D, leading dimensions flattened into ``M``) is cut
into blocks of 32 -- 1x32 along K (rowwise), 32x1 along M (columnwise) or 32x32 tiles (``blocks="2d"``)
-- and each block gets an E8M0 scale byte ``s`` from its ``amax`` by ``scale_rule`` (``floor``
``E - emax``, ``ceil`` ``E + (M != 0) - emax``, ``even`` after rounding ``amax`` at the element
precision, ``rceil`` ``fl32(amax * fl32(1 / max))`` rounded up to a power of two), clamped to
0..254, with NaN and Inf per ``edges``.  Each element is the saturating round-to-nearest-even code
of ``fl32(x * 2**(127 - s))``.  ``specs/quant/mx.yaml`` has every parameter and its sources;
``reference/quant/mx.py`` is the contract in NumPy.

Layouts
-------
Data keeps ``x``'s layout (columnwise data is *not* transposed, as TransformerEngine's MXFP8): FP8 one
code per byte, FP6 one code per byte (low 6 bits), FP4 two per byte along K, element ``2i`` in the
low nibble.  Scales have TransformerEngine's padded shapes: rowwise ``[round_up(M, 128),
round_up(K / 32, 4)]``, columnwise ``[round_up(M / 32, 4), round_up(K, 128)]``; ``compact`` is the
row-major matrix, ``swizzled`` the cuBLAS 128x4 layout (``fast/layout.py``; the columnwise matrix is
swizzled as its transpose ``[K, M / 32]``) written by the kernel directly.  Padding bytes are zero in
both layouts (the contract leaves them free in ``compact``).

The kernel
----------
One program reads one ``BLOCK_M x BLOCK_K`` tile of ``x`` once (a 2-D load viewed as ``[BLOCK_M, NB, 32]``)
and writes everything asked of it: block maxima, scale bytes, the reciprocal ``2**(127 - s)`` (float32
bits), the scaled values (one float32 multiply, exact: a power of two), the codes, FP4 packing, and the
scale bytes at their compact or swizzled offsets; rowwise and columnwise outputs come from the same
registers.  FP4 of bfloat16 ``x`` reads the tile as int32 words of element pairs instead and never widens
it to float32 (:func:`half_maxima`, :func:`e2m1_words`).  The 1-D grid walks the K-tiles of a row band
before the next band, so the tiles in flight cover whole rows.  Each element's rounding is the compiled form
with the fewest instructions (the integer rounding kept the kernel instruction-bound; ``docs/performance.md``).

MXFP8 rowwise plus columnwise with compact scales stages its rowwise scale bytes: a 32-row tile owns only
``BLOCK_K / 32`` bytes of each 32-byte sector of a compact row, and stores that narrow cost the L2 one
transaction each, so the kernel writes each tile's bytes contiguously to a staging buffer and
:func:`unstage_row_scales` (a dependent launch on sm_90) permutes them into the compact matrix in whole
sectors (:func:`stages_row_scales`).

The work is split so each piece is the cheapest exact form on the GPU, with an integer twin where
Triton's interpreter cannot run it (``fast._triton.device_modes``; CPU tests check the interpreted
bodies, ``tests/gpu/test_gpu_mx.py`` the compiled ones, both against ``reference``):

- block maxima (:func:`block_amax`): ``max.f32`` of ``|x|`` (``te``: a NaN loses, an all-NaN block
  gives 0) or ``max.NaN.f32`` (torchao: NaN wins); interpreted, an integer max of magnitude bits.  FP4 of
  bfloat16 (:func:`half_maxima`): ``|x|`` of a word's two elements by one ``and``, then ``max.bf16x2`` /
  ``max.NaN.bf16x2``, two elements per instruction (a columnwise word holds two columns' maxima);
- scale bytes (:func:`mx_scale_byte`): integer arithmetic on the amax bits, once per block; ``rceil``
  rounds ``d = amax * fl32(1 / max)`` up to a power of two as ``min((b + 0x7FFFFF) >> 23, (b - 1) >>
  22)`` of its bits (the second term handles subnormal ``d``), which also saturates Inf to 254;
- FP8 codes: ``fast._triton.fp8_code``, the hardware ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`` (two
  elements per instruction; a NaN element, scaled to the canonical positive NaN by the multiply,
  gives 0x7F);
- FP6 codes, and FP4 of float32 inputs (:func:`mx_code`): clamp to ``+-max`` with ``min``/``max.f32``
  (NaN -> +max), then one float32 add of ``2**(e + 23 - m)`` -- ``e`` the exponent of ``|v|``'s binade, at least the
  smallest normal's -- whose last place is the code step there: IEEE rounds ``|v|`` to nearest even
  once, and the code is the number of steps above the addend plus ``(e - e_min) << m``, the sign
  or-ed in.  Interpreted, the integer rounding: ``(b - ((127 - bias) << 23) + 2**(22 - m) - 1 + odd)
  >> (23 - m)`` for normal codes and a float32 add of ``2**(24 - bias - m)`` for subnormal ones;
- FP4 codes of bfloat16 inputs (:func:`e2m1_words`): two elements per instruction in bfloat16x2 arithmetic
  on the input words (``mul`` by the reciprocal, a clamp, one ``fma`` at the binade's step, a subtraction whose
  bfloat16 bits are the code, as bfloat16's subnormals mirror E2M1's), the packed bytes assembled with ``prmt``
  and a multiply by 17; interpreted, float32 products and :func:`mx_code` on each;
- FP4 codes of float16 inputs (:func:`e2m1_pairs`): two elements per instruction in float16x2 arithmetic
  (``cvt.rn.f16x2.f32`` of the scaled float32 values, a clamp, one ``fma`` at the binade's step, a subtraction
  whose float16 bits are the code), the packed bytes assembled with ``prmt``; interpreted, :func:`mx_code` on
  each;
- the torchao edges: a block of scale 0xFF gets codes 0 (its scaled values are zeroed: one select per element).

Launch
------
Triton's ``JITFunction`` binds ~35 arguments and looks up its cache on every call, which costs about as much host time
as the kernel takes, so a stream of calls would be host-bound.  The first call of each plan, dtype, device and tile
override goes through it (and the autotuner, over :func:`_autotune_configs`); later ones launch the returned
``CompiledKernel`` bound to its grid directly (``_LAUNCHES``).  The interpreter takes the first path always.

Paths
-----
``QCONFORM_FAST_PATH`` chooses per call, as in ``fast/cast.py``: ``auto`` (the kernel for CUDA
tensors when Triton is importable -- for FP8 on GPUs with the FP8 conversion, compute capability 8.9+
-- else torch), ``triton`` (always; CPU tensors need ``TRITON_INTERPRET=1``), ``torch``.  The torch
path composes ``fast.cast``, ``fast.pack`` and ``fast.layout`` with the scale arithmetic in torch
integer ops.  This module imports without Triton and queries no device at import time.
"""

from __future__ import annotations

import os

import torch

from fast.quant.mx.launch import launch_kernel, use_triton
from fast.quant.mx.plan import (
    BLOCK_SIZE,
    BLOCKS,
    EDGES,
    MX_FORMATS,
    PATH_ENV,
    SCALE_LAYOUTS,
    SCALE_RULES,
    USAGES,
    Plan,
    make_plan,
)
from fast.quant.mx.rounding import mx_code, mx_reciprocal, mx_scale_byte
from fast.quant.mx.torch_path import quantize_torch

__all__ = [
    "BLOCKS",
    "BLOCK_SIZE",
    "EDGES",
    "MX_FORMATS",
    "SCALE_LAYOUTS",
    "SCALE_RULES",
    "USAGES",
    "bench",
    "mx",
    "mx_code",
    "mx_reciprocal",
    "mx_scale_byte",
]


# %% Public function


def mx(
    x: torch.Tensor,
    *,
    format: str,
    scale_rule: str,
    usage: str = "rowwise",
    blocks: str = "1d",
    scale_layout: str = "compact",
    edges: str = "te",
) -> dict[str, torch.Tensor]:
    """Quantize ``x`` to MX: E8M0 block scales and FP8/FP6/FP4 element codes.

    Contract
    --------
    ``quant.mx``: per block of 32 (rowwise 1x32, columnwise 32x1, or 32x32 tiles), ``s`` from the
    block's ``amax`` by ``scale_rule`` (clamped to 0..254; NaN/Inf per ``edges``), elements
    ``satfinite_rne(fl32(x * 2**(127 - s)))``; module docstring and ``specs/quant/mx.yaml``.

    Source
    ------
    OCP MX v1.0; TransformerEngine ``quantize_mxfp8.cuh`` (``rceil``, ``te``, 2D, padded shapes);
    torchao ``to_mx`` at 36027d8 and v0.18.0 (``floor``, ``ceil``, ``even``, ``rceil``, the torchao edges).

    Encoding
    --------
    ``x``: contiguous float32, bfloat16 or float16 tensor, at least 2-D (``[..., M, K]``, leading
    dimensions flattened into ``M``).  Returns, on ``x``'s device: ``data_rowwise`` /
    ``data_columnwise`` (``uint8`` in ``x``'s shape, FP4 with ``K / 2`` bytes per row, element ``2i`` in
    the low nibble; columnwise not transposed) and ``scale_rowwise`` ``[round_up(M, 128),
    round_up(K / 32, 4)]`` / ``scale_columnwise`` ``[round_up(M / 32, 4), round_up(K, 128)]`` (``uint8``
    E8M0; ``compact`` row-major or ``swizzled`` 128x4, padding zero), for the directions ``usage`` asks.

    Edge cases
    ----------
    Zero blocks give scale 0 and signed zero codes; NaN and Inf per ``edges`` (``te``: amax ignores
    NaN, Inf -> 254, NaN elements -> 0x7F / +max; ``torchao``: NaN or Inf -> 0xFF and the block's codes
    0; ``torchao_018``: NaN -> 0xFF, Inf through the rule, scale 0 multiplies by ``2**126`` or 1).

    The implementation (one fused Triton kernel, or torch ops) is chosen per call by
    ``QCONFORM_FAST_PATH``.  Raises ``TypeError`` unless ``x`` is a float32, bfloat16 or float16
    tensor; ``ValueError`` for an unknown parameter, a non-contiguous or empty ``x``, fewer than 2
    dimensions, ``K % 32`` (rowwise, 2d), ``M % 32`` (columnwise, 2d) or an odd ``K`` (FP4);
    ``RuntimeError`` where a forced Triton path cannot run.
    """
    plan = make_plan(x, format, scale_rule, usage, blocks, scale_layout, edges)
    outputs = _allocate(x, plan)
    if use_triton(x.device, plan):
        launch_kernel(x, plan, outputs)
    else:
        quantize_torch(x.view(plan.rows, plan.cols), plan, outputs)
    return outputs


def _allocate(x: torch.Tensor, plan: Plan) -> dict[str, torch.Tensor]:
    """Output buffers; scale buffers are zeroed (padding), data buffers are fully written."""
    data_shape = (*x.shape[:-1], plan.cols // 2 if plan.fmt.bits == 4 else plan.cols)
    out: dict[str, torch.Tensor] = {}
    if plan.rowwise:
        out["data_rowwise"] = torch.empty(data_shape, dtype=torch.uint8, device=x.device)
        out["scale_rowwise"] = _scale_buffer(plan.row_scale_shape, (plan.rows, plan.cols // BLOCK_SIZE), x.device)
    if plan.columnwise:
        out["data_columnwise"] = torch.empty(data_shape, dtype=torch.uint8, device=x.device)
        out["scale_columnwise"] = _scale_buffer(plan.col_scale_shape, (plan.rows // BLOCK_SIZE, plan.cols), x.device)
    return out


def _scale_buffer(shape: tuple[int, int], logical: tuple[int, int], device_: torch.device) -> torch.Tensor:
    """A scale buffer: ``empty`` when the logical matrix fills it (no padding), else zeroed."""
    if shape == logical:
        return torch.empty(shape, dtype=torch.uint8, device=device_)
    return torch.zeros(shape, dtype=torch.uint8, device=device_)


# %% Benchmark


def bench(
    shape: tuple[int, int] = (8192, 8192),
    *,
    dtype: torch.dtype = torch.bfloat16,
    format: str = "float8_e4m3fn",
    scale_rule: str = "rceil",
    usage: str = "rowwise",
    scale_layout: str = "compact",
) -> dict[str, float]:
    """Median CUDA time of :func:`mx` on a random ``shape`` input, beside a device-to-device copy.

    Bytes moved: the input once, each data copy and each scale matrix once.  Returns ``ms``,
    ``gb_per_s``, ``copy_gb_per_s`` and ``fraction_of_copy`` (``triton.testing.do_bench``, L2 flushed).
    """
    from triton.testing import do_bench

    x = (torch.randn(shape, device="cuda") * 64).to(dtype)
    out = mx(x, format=format, scale_rule=scale_rule, usage=usage, scale_layout=scale_layout)
    ms = do_bench(
        lambda: mx(x, format=format, scale_rule=scale_rule, usage=usage, scale_layout=scale_layout),
        return_mode="median",
    )
    moved = x.numel() * x.element_size() + sum(t.numel() for t in out.values())
    dst = torch.empty_like(x)
    copy_ms = do_bench(lambda: dst.copy_(x), return_mode="median")
    gb_per_s = moved / ms / 1e6
    copy_gb_per_s = 2 * x.numel() * x.element_size() / copy_ms / 1e6
    return {
        "ms": ms,
        "gb_per_s": gb_per_s,
        "copy_gb_per_s": copy_gb_per_s,
        "fraction_of_copy": gb_per_s / copy_gb_per_s,
    }


# %% Check and time


def _main() -> None:
    """The kernel against the torch path on an irregular shape (every format, rule and edge), then time it on CUDA."""
    device_ = "cuda" if torch.cuda.is_available() else "cpu"
    if device_ == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    generator = torch.Generator().manual_seed(0)
    patterns = torch.randint(-(2**15), 2**15, (96, 320), dtype=torch.int32, generator=generator).to(torch.int16)
    x = patterns.view(torch.bfloat16).to(device_)
    for format in MX_FORMATS:
        for rule in SCALE_RULES:
            for edges in EDGES:
                results = []
                for path in ("triton", "torch"):
                    os.environ[PATH_ENV] = path
                    results.append(mx(x, format=format, scale_rule=rule, usage="both", edges=edges))
                bad = sum(int((results[0][k] != results[1][k]).sum()) for k in results[0])
                print(f"{format} {rule} {edges}: {bad} mismatching bytes")
    os.environ.pop(PATH_ENV)
    if device_ == "cuda":
        for usage in USAGES:
            print(usage, bench(usage=usage))


if __name__ == "__main__":
    _main()
