"""The ``te`` and ``te-direct`` backends: TransformerEngine's public PyTorch API under the contracts.

Optional and lazy: importing this module imports neither torch nor TransformerEngine; building a
backend imports ``transformer_engine.pytorch`` (and its extension ``transformer_engine_torch``) and
raises ``BackendError`` when they do not import, which ``qconform backends`` shows as
"unavailable: <reason>" and ``--backend te`` turns into a usage error.  Written against TE 2.20.2
(the ``transformer-engine-cu13==2.20.2`` wheel's ``transformer_engine/pytorch`` and the
``transformer_engine_torch==2.20.2`` sdist's ``csrc``); the APIs used exist from 2.17 (MXFP8
``with_2d_quantization`` from 2.19), older versions are reported not-implemented.

Two backends, the same adapters:

- ``te`` respects TE's own availability checks (``transformer_engine.pytorch.is_fp8_available``,
  ``is_fp8_block_scaling_available``, ``is_mxfp8_available``, ``is_nvfp4_available``, each called
  with ``return_reason=True``: ``(bool, reason)``, pytorch/quantization.py): a recipe TE calls
  unavailable on the running GPU is not-implemented with TE's reason (on sm_90: MXFP8 and NVFP4
  "Device compute capability 10.0 or higher required ...").
- ``te-direct`` calls the quantizer classes regardless, as a direct caller does, and reports what
  they return (or raise).

Contracts and the TE calls behind them (every claimed variant is named; the others are n/i):

- ``quant.fp8_tensor``: ``Float8CurrentScalingQuantizer(dtype, device, rowwise=, columnwise=,
  force_pow_2_scales=power_2_scale, amax_epsilon=epsilon)`` (``inf_scale=float32_max``, the
  kernel's FLT_MAX).  TE keeps the amax and scale in call-local buffers (quantizer.cpp
  ``Float8CurrentScalingQuantizer::quantize``), so ``amax`` comes from ``tex.compute_amax`` (the
  same ``nvte_compute_amax`` kernel) and ``scale`` from ``tex.multi_tensor_compute_scale_and_scale_inv``
  (the same ``compute_scale_from_amax`` with FLT_MAX); ``scale_inv`` and the codes are the
  quantized tensor's ``_scale_inv``, ``_data``, ``_transpose``.  Where the GPU runs non-TN FP8
  GEMMs (Blackwell: ``nvte_is_non_tn_fp8_gemm_supported``) TE keeps ``_data`` only and no
  transpose; the contract's ``columnwise_data`` is then ``_data`` transposed ``[K, *rest]``.
- ``quant.fp8_delayed``: ``Float8Quantizer(scale, amax, dtype)`` cast once with a zeroed amax (the
  ``amax`` output) and once with ``amax`` = ``amax_history[0]`` (TE's recipe state: the record
  step, an atomic max into the history), then ``tex.fused_amax_and_scale_update_after_reduction``
  (``update=fused``, what PyTorch's ``FP8GlobalStateManager.reduce_and_update_fp8_tensors`` runs)
  with ``amax_compute_algo`` and ``margin``.  ``update=unfused`` (the C API
  ``nvte_delayed_scaling_recipe_amax_and_scale_update``) has no PyTorch binding: n/i.
- ``quant.fp8_block``: ``Float8BlockQuantizer(dtype, rowwise=, columnwise=, amax_epsilon=,
  force_pow_2_scales=, block_scaling_dim=1 (1x128) or 2 (128x128))``; ``_rowwise_data``,
  ``_rowwise_scale_inv``, ``_columnwise_data``, ``_columnwise_scale_inv`` are already the contract's
  GEMM_READY layouts and padded shapes (``get_scale_shape``).
- ``quant.mx``: ``MXFP8Quantizer(dtype, rowwise=, columnwise=, with_2d_quantization=blocks == '2d')``
  with ``optimize_for_gemm`` for ``scale_layout=swizzled``: the MXFP8 formats, ``scale_rule=rceil``,
  ``edges=te``.  Scales come in TE's padded shapes (the contract's); a tensor whose
  ``_with_gemm_swizzled_scales`` differs from the requested layout is converted by index
  arithmetic (cuBLAS 128x4 tiles), so the contract's layout is what is compared.  TE requires both
  dims to be multiples of 32 (``MXFP8Quantizer::create_tensor``): other shapes raise.
- ``quant.nvfp4``: ``NVFP4Quantizer(rowwise=, columnwise=, with_rht=rht, with_post_rht_amax=rht,
  with_2d_quantization=block == '16x16', row_scaled_nvfp4=amax_scope == 'row')`` (default sign mask
  0xD7E8), ``quantizer(x)`` for ``amax_source=computed`` and ``tex.nvfp4_quantize_with_amax`` for
  ``given``; ``scale_rule=te``, ``zero_scale=flt_max``, ``rounding=rne`` only (TE's stochastic
  rounding draws its own random bits, the contract's are explicit).  The padded scale buffers
  ``[round_up(rows, 128), round_up(cols / 16, 4)]`` are cut to the compact ``[rows, cols / 16]``
  (padding is not part of the contract), unswizzled first where TE emitted the GEMM layout.  TE
  stores no tensor scale: ``tensor_scale`` is ``1 / S_enc`` of TE's ``tex.nvfp4_compute_global_scale``
  of the returned amax (an IEEE float32 reciprocal).
- ``dequant.fp8_tensor``/``fp8_block``/``mx``/``nvfp4``: the storage classes
  (``Float8TensorStorage``, ``Float8BlockwiseQTensorStorage``, ``MXFP8TensorStorage``,
  ``NVFP4TensorStorage``) built from the contract's buffers and ``.dequantize(dtype=out_dtype)``;
  NVFP4's compact scales are placed in TE's padded buffer (zero padding, never read).
- ``glu.interleave``/``glu.deinterleave``: ``transformer_engine.pytorch.interleave_glu_tensor`` /
  ``deinterleave_glu_tensor``; ``glu.interleave_grouped`` applies them member by member (TE has no
  grouped helper).

TE does not promise qconform's argument errors: ``validates_inputs=False`` throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from conformance.backends import Backend, Implementation
from conformance.errors import BackendError

__all__ = ["MIN_VERSION", "backend", "direct_backend", "swizzle_scales", "unswizzle_scales"]

MIN_VERSION = (2, 17)
"""The oldest TE whose quantizer signatures this adapter uses (NVFP4 options, GLU helpers)."""
MX_2D_VERSION = (2, 19)
"""``MXFP8Quantizer(with_2d_quantization=...)`` appeared in TE 2.19."""

_FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
_TE_FP8 = {"float8_e4m3fn": "kFloat8E4M3", "float8_e5m2": "kFloat8E5M2"}
_MULTI_TENSOR_CHUNK = 2048 * 32  # TE's multi_tensor_applier chunk size (pytorch/optimizers)


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split("+")[0].split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


@dataclass(frozen=True)
class _TE:
    """The imported modules and what the running TE and GPU say."""

    torch: Any
    te: Any
    tex: Any
    version: str
    arch: tuple[int, int]
    checks: Mapping[str, tuple[bool, str]]
    respect_checks: bool

    def dtype(self, name: str) -> Any:
        return getattr(self.te.DType, name)

    def gate_version(self) -> str | None:
        """A reason when the installed TE is older than the API this adapter uses."""
        if _version(self.version) < MIN_VERSION:
            return f"TE {self.version} predates the API this adapter models (2.17 or later)"
        return None

    def gate(self, recipe: str) -> str | None:
        """TE's availability verdict for ``recipe`` (``te`` only), or a too-old version."""
        old = self.gate_version()
        if old or not self.respect_checks:
            return old
        ok, reason = self.checks[recipe]
        return None if ok else f"TE {self.version} on sm_{self.arch[0]}{self.arch[1]}: {reason or 'unavailable'}"


def _impl(ctx: _TE, recipe: str | None, fn: Callable[..., Any], rule: Callable[[Mapping[str, Any]], str | None]) -> Any:
    def supports(params: Mapping[str, Any]) -> str | None:
        return (ctx.gate(recipe) if recipe else None) or rule(params)

    return Implementation(fn, supports, validates_inputs=False)


# ---- layout helpers (pure index arithmetic; no TE needed) -------------------------------------


def swizzle_scales(compact: Any) -> Any:
    """The cuBLAS block-scaling layout of a padded ``[R, C]`` scale buffer (R % 128 == 0, C % 4 == 0).

    Tiles of 128 rows x 4 columns, tile-major with the column tiles inner; inside a tile element
    (r, c) goes to ``(r % 32) * 16 + (r // 32) * 4 + c`` (cuBLAS "1D block scaling factors layout",
    TE common/swizzle).  The inverse of :func:`unswizzle_scales`.
    """
    rows, cols = compact.shape
    tiles = compact.reshape(rows // 128, 4, 32, cols // 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(rows, cols).contiguous() if rows and cols else compact.clone()


def unswizzle_scales(swizzled: Any) -> Any:
    """The row-major ``[R, C]`` buffer of a cuBLAS-swizzled one (the inverse of :func:`swizzle_scales`)."""
    rows, cols = swizzled.shape
    tiles = swizzled.reshape(rows // 128, cols // 4, 32, 4, 4).permute(0, 3, 2, 1, 4)
    return tiles.reshape(rows, cols).contiguous() if rows and cols else swizzled.clone()


def _transposed(x: Any) -> Any:
    """``[*rest, K]`` -> ``[K, *rest]`` (TE's FP8 transpose)."""
    k = x.shape[-1]
    return x.reshape(-1, k).t().contiguous().reshape(k, *x.shape[:-1])


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _u8(t: Any, torch: Any) -> Any:
    return None if t is None else t.view(torch.uint8)


def _usage(usage: str) -> dict[str, bool]:
    return {"rowwise": usage != "columnwise", "columnwise": usage != "rowwise"}


# ---- quantization --------------------------------------------------------------------------------


def _fp8_tensor(ctx: _TE) -> Implementation:
    torch, te, tex = ctx.torch, ctx.te, ctx.tex

    def quantize(x: Any, *, x_dtype: str, format: str, power_2_scale: bool, epsilon: float, inf_scale: str,
                 usage: str) -> dict[str, Any]:  # fmt: skip
        q = te.Float8CurrentScalingQuantizer(
            ctx.dtype(_TE_FP8[format]), x.device, **_usage(usage),
            force_pow_2_scales=power_2_scale, amax_epsilon=float(epsilon),
        )  # fmt: skip
        out = q(x)
        amax = torch.zeros(1, dtype=torch.float32, device=x.device)
        tex.compute_amax(x, amax)
        scale = torch.empty(1, dtype=torch.float32, device=x.device)
        scale_inv = torch.empty(1, dtype=torch.float32, device=x.device)
        noop = torch.zeros(1, dtype=torch.int32, device=x.device)
        tex.multi_tensor_compute_scale_and_scale_inv(
            _MULTI_TENSOR_CHUNK, noop, [[amax], [scale], [scale_inv]], _FP8_MAX[format], power_2_scale, float(epsilon)
        )
        result = {"amax": amax, "scale": scale, "scale_inv": out._scale_inv.reshape(1)}
        data = _u8(out._data, torch)
        if usage != "columnwise":
            result["data"] = data
        if usage != "rowwise":
            transpose = _u8(getattr(out, "_transpose", None), torch)
            result["columnwise_data"] = transpose if transpose is not None else _transposed(data)
        return result

    def rule(params: Mapping[str, Any]) -> str | None:
        if params["inf_scale"] != "float32_max":
            return "TE's kernel replaces an infinite scale by FLT_MAX (inf_scale=float32_max)"
        return None

    return _impl(ctx, "fp8", quantize, rule)


def _fp8_delayed(ctx: _TE) -> Implementation:
    torch, te, tex = ctx.torch, ctx.te, ctx.tex

    def quantize(x: Any, amax_history: Any, scale: Any, *, format: str, amax_compute_algo: str, update: str,
                 usage: str, margin: int) -> dict[str, Any]:  # fmt: skip
        dtype = ctx.dtype(_TE_FP8[format])
        amax = torch.zeros(1, dtype=torch.float32, device=x.device)
        out = te.Float8Quantizer(scale.clone(), amax, dtype, **_usage(usage))(x)
        history = amax_history.clone().reshape(-1, 1)  # TE's recipe state: [L, num_quantizers]
        state_scale = scale.clone()
        te.Float8Quantizer(state_scale, history[0], dtype, **_usage(usage))(x)  # the record: history[0]
        tex.fused_amax_and_scale_update_after_reduction(
            torch.cat([history[0]]), [history], [state_scale], amax_compute_algo, dtype, int(margin)
        )
        result = {"scale_inv": out._scale_inv.reshape(1), "amax": amax, "amax_history": history.reshape(-1),
                  "scale": state_scale.reshape(1)}  # fmt: skip
        data = _u8(out._data, torch)
        if usage != "columnwise":
            result["data"] = data
        if usage != "rowwise":
            transpose = _u8(getattr(out, "_transpose", None), torch)
            result["columnwise_data"] = transpose if transpose is not None else _transposed(data)
        return result

    def rule(params: Mapping[str, Any]) -> str | None:
        if params["update"] != "fused":
            return "PyTorch TE runs the fused update (tex.fused_amax_and_scale_update_after_reduction) only"
        return None

    return _impl(ctx, "fp8", quantize, rule)


def _fp8_block(ctx: _TE) -> Implementation:
    torch, te = ctx.torch, ctx.te

    def quantize(x: Any, *, x_dtype: str, block: str, format: str, power_2_scale: bool, epsilon: float,
                 usage: str) -> dict[str, Any]:  # fmt: skip
        q = te.Float8BlockQuantizer(
            ctx.dtype(_TE_FP8[format]), **_usage(usage), amax_epsilon=float(epsilon),
            force_pow_2_scales=power_2_scale, block_scaling_dim=1 if block == "1x128" else 2,
        )  # fmt: skip
        out = q(x)
        result = {}
        if usage != "columnwise":
            result["data"] = _u8(out._rowwise_data, torch)
            result["scale_inv"] = out._rowwise_scale_inv
        if usage != "rowwise":
            result["columnwise_data"] = _u8(out._columnwise_data, torch)
            result["columnwise_scale_inv"] = out._columnwise_scale_inv
        return result

    return _impl(ctx, "block", quantize, lambda params: None)


def _mx(ctx: _TE) -> Implementation:
    torch, te = ctx.torch, ctx.te

    def quantize(x: Any, *, format: str, scale_rule: str, usage: str, blocks: str, scale_layout: str,
                 edges: str) -> dict[str, Any]:  # fmt: skip
        kwargs = {"with_2d_quantization": True} if blocks == "2d" else {}
        q = te.MXFP8Quantizer(ctx.dtype(_TE_FP8[format]), **_usage(usage), **kwargs)
        q.optimize_for_gemm = scale_layout == "swizzled"
        out = q(x)
        swizzled = bool(getattr(out, "_with_gemm_swizzled_scales", False))

        def layout(scale: Any, columnwise: bool) -> Any:
            """TE's scale buffer in the requested layout; the columnwise one swizzles its transpose."""
            scale = scale.view(torch.uint8)
            if swizzled == (scale_layout == "swizzled"):
                return scale
            if not columnwise:
                return unswizzle_scales(scale) if swizzled else swizzle_scales(scale)
            rows, cols = scale.shape
            if swizzled:  # the bytes are swizzle(S.T) of shape [cols, rows]
                return unswizzle_scales(scale.reshape(cols, rows)).t().contiguous()
            return swizzle_scales(scale.t().contiguous()).reshape(rows, cols)

        result = {}
        if usage != "columnwise":
            result["data_rowwise"] = _u8(out._rowwise_data, torch)
            result["scale_rowwise"] = layout(out._rowwise_scale_inv, False)
        if usage != "rowwise":
            result["data_columnwise"] = _u8(out._columnwise_data, torch)
            result["scale_columnwise"] = layout(out._columnwise_scale_inv, True)
        return result

    def rule(params: Mapping[str, Any]) -> str | None:
        if params["format"] not in _TE_FP8:
            return "TE quantizes MX blocks to MXFP8 only (MXFP8Quantizer: float8_e4m3fn, float8_e5m2)"
        if (params["scale_rule"], params["edges"]) != ("rceil", "te"):
            return "TE's MXFP8 kernel rounds the scale up (scale_rule=rceil) with its own edges (edges=te)"
        if params["blocks"] == "2d" and _version(ctx.version) < MX_2D_VERSION:
            return f"TE {ctx.version}'s MXFP8Quantizer has no with_2d_quantization (2.19 or later)"
        return None

    return _impl(ctx, "mxfp8", quantize, rule)


def _nvfp4(ctx: _TE) -> Implementation:
    torch, te, tex = ctx.torch, ctx.te, ctx.tex

    def tensor_scale(amax: Any) -> Any:
        enc = torch.empty_like(amax)
        tex.nvfp4_compute_global_scale(amax, enc)
        return torch.reciprocal(enc)

    def compact(scale: Any, rows: int, cols: int, swizzled: bool) -> Any:
        scale = scale.view(torch.uint8)
        if swizzled:
            scale = unswizzle_scales(scale)
        return scale[:rows, : cols // 16].contiguous()

    def quantize(
        x: Any, amax: Any = None, columnwise_amax: Any = None, *, usage: str, block: str, amax_scope: str, rht: bool,
        rounding: str, scale_rule: str, zero_scale: str, amax_source: str,
    ) -> dict[str, Any]:  # fmt: skip
        q = te.NVFP4Quantizer(
            **_usage(usage), with_rht=rht, with_post_rht_amax=rht, with_2d_quantization=block == "16x16",
            row_scaled_nvfp4=amax_scope == "row",
        )  # fmt: skip
        if amax_source == "given":
            dummy = torch.zeros(1, dtype=torch.float32, device=x.device)
            row = amax if amax is not None else dummy
            col = columnwise_amax if columnwise_amax is not None else dummy
            out = tex.nvfp4_quantize_with_amax(x, q, row.clone(), col.clone())
        else:
            out = q(x)
        swizzled = bool(getattr(out, "_with_gemm_swizzled_scales", False))
        m, k = x.shape
        result = {}
        if usage != "columnwise":
            result["data"] = _u8(out._rowwise_data, torch)
            result["scales"] = compact(out._rowwise_scale_inv, m, k, swizzled)
            result["amax"] = out._amax_rowwise.reshape(-1)
            result["tensor_scale"] = tensor_scale(result["amax"])
        if usage != "rowwise":
            result["columnwise_data"] = _u8(out._columnwise_data, torch)
            result["columnwise_scales"] = compact(out._columnwise_scale_inv, k, m, swizzled)
            result["columnwise_amax"] = out._amax_columnwise.reshape(-1)
            result["columnwise_tensor_scale"] = tensor_scale(result["columnwise_amax"])
        return result

    def rule(params: Mapping[str, Any]) -> str | None:
        if params["scale_rule"] != "te":
            return "TE implements its own scale rule (scale_rule=te)"
        if params["zero_scale"] != "flt_max":
            return "TE's kernels clamp 1 / 0 to FLT_MAX (zero_scale=flt_max)"
        if params["rounding"] != "rne":
            return "TE's stochastic rounding draws its own random bits; the contract's are explicit inputs"
        return None

    return _impl(ctx, "nvfp4", quantize, rule)


# ---- dequantization --------------------------------------------------------------------------------


def _out_dtype(torch: Any, name: str) -> Any:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def _dequant_fp8_tensor(ctx: _TE) -> Implementation:
    torch, te = ctx.torch, ctx.te

    def dequantize(data: Any, scale_inv: Any, *, format: str, out_dtype: str) -> dict[str, Any]:
        dtype = _out_dtype(torch, out_dtype)
        t = te.Float8TensorStorage(data=data, fp8_scale_inv=scale_inv, fp8_dtype=ctx.dtype(_TE_FP8[format]),
                                   fake_dtype=dtype)  # fmt: skip
        return {"x": t.dequantize(dtype=dtype).float()}

    return _impl(ctx, "fp8", dequantize, lambda params: None)


def _dequant_fp8_block(ctx: _TE) -> Implementation:
    torch, te = ctx.torch, ctx.te

    def dequantize(
        data: Any, scale_inv: Any, *, block: str, operand: str, format: str, out_dtype: str
    ) -> dict[str, Any]:
        dtype = _out_dtype(torch, out_dtype)
        row = operand == "rowwise"
        t = te.Float8BlockwiseQTensorStorage(
            data if row else None, scale_inv if row else None, None if row else data, None if row else scale_inv,
            ctx.dtype(_TE_FP8[format]), None, block == "128x128", fake_dtype=dtype,
        )  # fmt: skip
        return {"x": t.dequantize(dtype=dtype).float()}

    return _impl(ctx, "block", dequantize, lambda params: None)


def _dequant_mx(ctx: _TE) -> Implementation:
    torch, te = ctx.torch, ctx.te

    def dequantize(data: Any, scale: Any, *, format: str, usage: str, scale_layout: str) -> dict[str, Any]:
        row = usage == "rowwise"
        t = te.MXFP8TensorStorage(
            data if row else None, scale if row else None, None if row else data, None if row else scale,
            ctx.dtype(_TE_FP8[format]), None, scale_layout == "swizzled", fake_dtype=torch.float32,
        )  # fmt: skip
        return {"x": t.dequantize(dtype=torch.float32)}

    def rule(params: Mapping[str, Any]) -> str | None:
        return None if params["format"] in _TE_FP8 else "TE dequantizes MXFP8 only (float8_e4m3fn, float8_e5m2)"

    return _impl(ctx, "mxfp8", dequantize, rule)


def _dequant_nvfp4(ctx: _TE) -> Implementation:
    torch, te = ctx.torch, ctx.te

    def dequantize(data: Any, scales: Any, amax: Any = None, tensor_scale: Any = None, *, scale_rule: str,
                   amax_scope: str, out_dtype: str) -> dict[str, Any]:  # fmt: skip
        dtype = _out_dtype(torch, out_dtype)
        m, blocks = scales.shape
        padded = torch.zeros((_round_up(m, 128), _round_up(blocks, 4)), dtype=torch.uint8, device=data.device)
        padded[:m, :blocks] = scales
        t = te.NVFP4TensorStorage(
            data, padded, None, None, amax, None, ctx.dtype("kFloat4E2M1"), None, False,
            fake_dtype=dtype, row_scaled_nvfp4=amax_scope == "row",
        )  # fmt: skip
        return {"x": t.dequantize(dtype=dtype).float()}

    def rule(params: Mapping[str, Any]) -> str | None:
        return None if params["scale_rule"] == "te" else "TE dequantizes with its own rounding order (scale_rule=te)"

    return _impl(ctx, "nvfp4", dequantize, rule)


# ---- GLU ---------------------------------------------------------------------------------------------


def _glu(ctx: _TE, direction: str) -> Implementation:
    te = ctx.te

    def apply(w: Any, *, block_size: int) -> dict[str, Any]:
        fn = te.interleave_glu_tensor if direction == "interleave" else te.deinterleave_glu_tensor
        return {"out": fn(w, int(block_size))}

    return _impl(ctx, None, apply, lambda params: ctx.gate_version())


def _glu_grouped(ctx: _TE) -> Implementation:
    torch, te = ctx.torch, ctx.te

    def apply(w: Any, *, direction: str, block_size: int) -> dict[str, Any]:
        fn = te.interleave_glu_tensor if direction == "interleave" else te.deinterleave_glu_tensor
        if w.shape[0] == 0:
            return {"out": w.clone()}
        return {"out": torch.stack([fn(member, int(block_size)) for member in w])}

    return _impl(ctx, None, apply, lambda params: ctx.gate_version())


# ---- building ----------------------------------------------------------------------------------------


def _import_te() -> tuple[Any, Any, Any, str]:
    try:
        import torch
        import transformer_engine
        import transformer_engine.pytorch as te
        import transformer_engine_torch as tex
    except Exception as exc:  # TE raises more than ImportError when its libraries or dist-info are missing
        raise BackendError(
            f"the te backends need TransformerEngine (transformer_engine.pytorch), which is not importable: {exc}"
        ) from None
    return torch, te, tex, str(getattr(transformer_engine, "__version__", getattr(te, "__version__", "0.0")))


_CHECKS = {
    "fp8": "is_fp8_available",
    "block": "is_fp8_block_scaling_available",
    "mxfp8": "is_mxfp8_available",
    "nvfp4": "is_nvfp4_available",
}


def _build(name: str, respect_checks: bool) -> Backend:
    torch, te, tex, version = _import_te()
    if not torch.cuda.is_available():
        raise BackendError(f"the {name} backend needs a CUDA device (TransformerEngine's kernels are GPU-only)")
    arch = tuple(te.get_device_compute_capability())
    checks: dict[str, tuple[bool, str]] = {}
    for key, fn_name in _CHECKS.items():
        fn = getattr(te, fn_name, None)
        if fn is None:
            checks[key] = (False, f"transformer_engine.pytorch has no {fn_name}")
            continue
        ok, reason = fn(return_reason=True)
        checks[key] = (bool(ok), str(reason))
    ctx = _TE(torch, te, tex, version, (int(arch[0]), int(arch[1])), checks, respect_checks)
    contracts = {
        "quant.fp8_tensor": _fp8_tensor(ctx),
        "quant.fp8_delayed": _fp8_delayed(ctx),
        "quant.fp8_block": _fp8_block(ctx),
        "quant.mx": _mx(ctx),
        "quant.nvfp4": _nvfp4(ctx),
        "dequant.fp8_tensor": _dequant_fp8_tensor(ctx),
        "dequant.fp8_block": _dequant_fp8_block(ctx),
        "dequant.mx": _dequant_mx(ctx),
        "dequant.nvfp4": _dequant_nvfp4(ctx),
        "glu.interleave": _glu(ctx, "interleave"),
        "glu.deinterleave": _glu(ctx, "deinterleave"),
        "glu.interleave_grouped": _glu_grouped(ctx),
    }
    info = {
        "transformer_engine": version,
        "torch": torch.__version__,
        "sm": f"{arch[0]}{arch[1]}",
        "availability_checks": "respected" if respect_checks else "bypassed",
        **{f"{key}_available": "yes" if ok else f"no: {reason}" for key, (ok, reason) in checks.items()},
    }
    return Backend(name=name, device="cuda", array_kind="torch", contracts=contracts, info=info)


def backend() -> Backend:
    """``te``: TE's quantizers where TE's own availability checks allow them (n/i with TE's reason otherwise)."""
    return _build("te", respect_checks=True)


def direct_backend() -> Backend:
    """``te-direct``: the same quantizers called regardless of the availability checks."""
    return _build("te-direct", respect_checks=False)
