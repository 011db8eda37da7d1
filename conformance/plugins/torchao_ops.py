"""The ``torchao`` backend: torchao's own quantizers, each declaring the variant it implements.

Optional: it loads only where ``torchao`` is importable (``qconform run --backend torchao``
otherwise exits 2 saying so).  It certifies what the installed torchao does, through its public
and documented entry points, eagerly, on CUDA when a GPU is present and on the CPU otherwise:

- ``cast.fp8``: ``torchao.float8.float8_utils.to_fp8_saturated`` (a clamp to +-max, then the
  eager ``.to()``): ``overflow=saturate``, ``rounding=rne``, for the formats of ``FP8_TYPES``.
- ``quant.mx``: ``torchao.prototype.mx_formats.mx_tensor.to_mx(x, format, 32, mode)`` with each
  ``ScaleCalculationMode`` (FLOOR, CEIL, EVEN, RCEIL: ``scale_rule`` floor, ceil, even, rceil), 1x32
  blocks along the rows (``usage=rowwise``, ``blocks=1d``), compact scales (torchao returns the
  unpadded ``[M, K/32]`` part; the padding is don't-care).  The edge behaviour (``edges``) is the
  version's: ``torchao_018`` for 0.18.x, ``torchao`` (its main branch, 36027d8) after; earlier
  versions have no variant in the spec.  FP6 is one code per byte, FP4 packed low nibble first.
- ``quant.nvfp4``: ``nvfp4_quantize(x, 16, per_tensor_amax_to_scale(torch.max(|x|)))``, or of the
  given ``amax`` (``amax_source=given``, torchao's ``per_tensor_scale`` argument): the rowwise
  operand, 1x16 blocks, the tensor amax, round to nearest; ``scale_rule=torchao`` on the CPU and
  ``torchao_cuda`` on CUDA (torch divides by a Python scalar through its reciprocal there); from
  torchao 0.17 (before, it divided by the block scales instead of multiplying by reciprocals).
- ``quant.affine``: ``choose_qparams_affine`` + ``quantize_affine`` (``zero_point_domain=int``),
  the same with ``_quantize_affine_no_zero_point`` (``none``), ``_choose_qparams_affine_tinygemm`` +
  ``_quantize_affine_tinygemm`` (``float``), on ``x`` in the ``arithmetic`` dtype, with
  ``scalar_division=divide`` on the CPU and ``reciprocal`` on CUDA, from torchao 0.12 (the
  signature without ``zero_point_domain``, eps defaulting to ``smallest_normal``).  torchao's
  scales and zero points come squeezed (its ``keepdim=False``); they are given the spec's
  ``[R/block_rows, C/block_cols]`` shape, and int4 codes are the low nibble of torchao's int8.

``to_mx`` and ``nvfp4_quantize`` take bfloat16 and float32 only; a float16 ``x`` is widened to
float32 first, which is exact and changes nothing they compute (both take the block amax, exact in
any format, and then work in float32).  torchao does not promise qconform's argument errors, so
the ``invalid``-input checks are not claimed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from conformance.backends import Backend, Implementation
from conformance.errors import BackendError

__all__ = ["backend", "mx_edges_variant"]

MX_BLOCK = 32
NVFP4_BLOCK = 16
_AFFINE_RANGES = {"int8": (-128, 127), "int4": (-8, 7), "uint4": (0, 15)}


def _version(text: str) -> tuple[int, int]:
    major, minor = text.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def mx_edges_variant(torchao_version: str) -> str | None:
    """The ``quant.mx`` ``edges`` value this torchao version implements, or None where the spec has none."""
    version = _version(torchao_version)
    if version == (0, 18):
        return "torchao_018"
    return "torchao" if version > (0, 18) else None


def _fp8_cast(torch: Any) -> Implementation:
    from torchao.float8.float8_utils import FP8_TYPES, to_fp8_saturated

    formats = {str(dtype).removeprefix("torch."): dtype for dtype in FP8_TYPES}

    def cast(x: Any, *, format: str, overflow: str, rounding: str) -> dict[str, Any]:
        return {"codes": to_fp8_saturated(x, formats[format]).view(torch.uint8)}

    def supports(params: Mapping[str, Any]) -> str | None:
        if params["format"] not in formats:
            return f"to_fp8_saturated takes {sorted(formats)}"
        if (params["overflow"], params["rounding"]) != ("saturate", "rne"):
            return "to_fp8_saturated clamps and then casts: overflow=saturate, rounding=rne only"
        return None

    return Implementation(cast, supports, validates_inputs=False)


def _widened(torch: Any, x: Any) -> Any:
    """``x`` as to_mx and nvfp4_quantize take it: float16 widened (exactly) to float32, contiguous."""
    return (x.float() if x.dtype == torch.float16 else x).contiguous()


def _mx(torch: Any, version: str) -> Implementation:
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
    from torchao.prototype.mx_formats.mx_tensor import to_mx

    elements = {
        "float8_e4m3fn": torch.float8_e4m3fn,
        "float8_e5m2": torch.float8_e5m2,
        "float6_e2m3fn": DTYPE_FP6_E2M3,
        "float6_e3m2fn": DTYPE_FP6_E3M2,
        "float4_e2m1fn": torch.float4_e2m1fn_x2,
    }
    modes = {rule: getattr(ScaleCalculationMode, rule.upper()) for rule in ("floor", "ceil", "even", "rceil")}
    edges = mx_edges_variant(version)

    def quantize(x: Any, **params: Any) -> dict[str, Any]:
        scale, data = to_mx(_widened(torch, x), elements[params["format"]], MX_BLOCK, modes[params["scale_rule"]])
        rows, blocks = scale.shape
        padded = torch.zeros((-(-rows // 128) * 128, -(-blocks // 4) * 4), dtype=torch.uint8, device=x.device)
        padded[:rows, :blocks] = scale.view(torch.uint8)
        return {"data_rowwise": data.view(torch.uint8), "scale_rowwise": padded}

    def supports(params: Mapping[str, Any]) -> str | None:
        if edges is None:
            return f"torchao {version}'s to_mx has no variant in this spec (0.18 and later are modelled)"
        if (params["usage"], params["blocks"], params["scale_layout"]) != ("rowwise", "1d", "compact"):
            return "to_mx gives rowwise 1x32 blocks and compact scales (usage=rowwise, blocks=1d, scale_layout=compact)"
        if params["edges"] != edges:
            return f"torchao {version}'s to_mx implements edges={edges!r}"
        return None

    return Implementation(quantize, supports, validates_inputs=False)


def _nvfp4(torch: Any, device: str, version: str) -> Implementation:
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

    rule = "torchao_cuda" if device == "cuda" else "torchao"
    claimed = {"usage": "rowwise", "block": "1x16", "amax_scope": "tensor", "rht": False, "rounding": "rne"}

    def quantize(x: Any, amax: Any = None, **params: Any) -> dict[str, Any]:
        if amax is None:
            amax = torch.max(torch.abs(x)).float()
        tensor_scale = per_tensor_amax_to_scale(amax)
        scales, data = nvfp4_quantize(_widened(torch, x), NVFP4_BLOCK, tensor_scale)
        return {
            "data": data.view(torch.uint8),
            "scales": scales.view(torch.uint8),
            "amax": amax.reshape(1),
            "tensor_scale": tensor_scale.reshape(1),
        }

    def supports(params: Mapping[str, Any]) -> str | None:
        if _version(version) < (0, 17):
            return f"torchao {version} divides by the scales (the reciprocal form the spec models came in 0.17)"
        if any(params[k] != v for k, v in claimed.items()):
            return "nvfp4_quantize: " + ", ".join(f"{k}={v}" for k, v in claimed.items())
        if params["scale_rule"] != rule:
            return f"torchao on {device} implements scale_rule={rule!r}"
        return None

    return Implementation(quantize, supports, validates_inputs=False)


def _codes(torch: Any, values: Any, dtype: str) -> Any:
    """Integers as the spec's uint8 codes: the two's complement byte, the low nibble for int4."""
    codes = values.view(torch.uint8)
    return codes & 0x0F if dtype == "int4" else codes


def _affine(torch: Any, device: str, version: str) -> Implementation:
    from torchao.quantization import quant_primitives as qp

    division = "reciprocal" if device == "cuda" else "divide"
    arithmetic = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    mappings = {
        "symmetric": qp.MappingType.SYMMETRIC,
        "symmetric_no_clipping_err": qp.MappingType.SYMMETRIC_NO_CLIPPING_ERR,
        "asymmetric": qp.MappingType.ASYMMETRIC,
    }
    quantizers: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
        "int": (qp.choose_qparams_affine, qp.quantize_affine),
        "none": (qp.choose_qparams_affine, qp._quantize_affine_no_zero_point),
        "float": (qp._choose_qparams_affine_tinygemm, qp._quantize_affine_tinygemm),
    }

    def quantize(x: Any, **params: Any) -> dict[str, Any]:
        qmin, qmax = _AFFINE_RANGES[params["dtype"]]
        target = torch.uint8 if qmin == 0 else torch.int8
        block = (params["block_rows"], params["block_cols"])
        xa = x.to(arithmetic[params["arithmetic"]])
        eps = None if params["eps"] == "smallest_normal" else float(params["eps"])
        choose, apply = quantizers[params["zero_point_domain"]]
        scale, zero = choose(xa, mappings[params["mapping"]], block, target, qmin, qmax, eps)
        q = apply(xa, block, scale, zero if params["zero_point_domain"] != "none" else None, target, qmin, qmax)
        groups = (x.shape[0] // block[0], x.shape[1] // block[1])

        def grouped(t: Any) -> Any:  # torchao squeezes; a tensor of another size is reported as it is
            return t.reshape(groups) if t.numel() == groups[0] * groups[1] else t

        out = {"q": _codes(torch, q, params["dtype"]), "scale": grouped(scale.float())}
        if params["zero_point_domain"] == "int":
            out["zero_point"] = grouped(_codes(torch, zero.to(target), params["dtype"]))
        elif params["zero_point_domain"] == "float":
            out["zero"] = grouped(zero.float())
        return out

    def supports(params: Mapping[str, Any]) -> str | None:
        if _version(version) < (0, 12):
            return f"torchao {version}'s choose_qparams_affine predates the signature the spec models (0.12)"
        if params["scalar_division"] != division:
            return f"torch on {device} divides by a Python scalar as scalar_division={division!r}"
        return None

    return Implementation(quantize, supports, validates_inputs=False)


def backend() -> Backend:
    try:
        import torch
        import torchao
    except ImportError as exc:
        raise BackendError(f"the torchao backend needs the torchao package, which is not importable: {exc}") from None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    contracts = {
        "cast.fp8": _fp8_cast(torch),
        "quant.mx": _mx(torch, torchao.__version__),
        "quant.nvfp4": _nvfp4(torch, device, torchao.__version__),
        "quant.affine": _affine(torch, device, torchao.__version__),
    }
    info = {"torchao": torchao.__version__, "torch": torch.__version__}
    return Backend(name="torchao", device=device, array_kind="torch", contracts=contracts, info=info)
