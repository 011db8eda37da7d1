"""The ``torch`` backend: PyTorch's own native ops, each declaring the variant it implements.

This certifies what the installed torch actually does.  Variants differ by version:

- ``cast.fp8``: eager ``tensor.to(torch.float8_*)``, round to nearest even only.  E4M3FN
  overflow is non-saturating up to torch 2.12 (beyond 464 and +-Inf give NaN; seen on 2.11)
  and saturating from 2.13 (pytorch#177870, #178817); E5M2 overflow gives +-Inf and the
  FNUZ formats give NaN (0x80) in every version seen (2.11, 2.13).
- ``cast.e8m0``: ``.to(torch.float8_e8m0fnu)`` (torch >= 2.7): ties round up on the
  float32 mantissa, the sign is ignored, zero gives 0x00 and overflow NaN, i.e.
  ``rounding=nearest_up, zero=min, overflow=nonsaturating``.
- ``decode.fp8`` / ``decode.e8m0``: ``codes.view(torch.float8_*).to(torch.float32)``.
- ``int4.tinygemm_pack``: ``aten._convert_weight_to_int4pack`` on CUDA (sm80+, ROCm excluded: it
  fills the same shape in 16-wide n-tiles).  Its input is int32 ``[N, K]`` up to torch 2.4 and
  uint8 ``[N, K/2]`` from 2.5 (pytorch#129940), so ``input_form`` is claimed per version.  The CPU
  op ``_convert_weight_to_int4pack_for_cpu`` (torch >= 2.6) packs another layout (uint8
  ``[N, K/2]``, nibbles paired along N, ISA-dependent) and the CPU ``_convert_weight_to_int4pack``
  does not exist (torch 2.13: NotImplementedError), so on the CPU the tinygemm contracts are
  not implemented.
- ``int4.tinygemm_mm``: ``aten._weight_int4pack_mm(a, packed, group_size, scales_and_zeros)`` on
  CUDA.  torch has no dequant or unpack op for the layout (torchao's were removed in 0.16).
- ``group.gemm``: ``torch._grouped_mm(a, b, offs=cumsum(group_sizes))`` (torch >= 2.8 on sm90; the
  loop fallback on sm80+ and the CPU from 2.9, pytorch#161407, #161717).
- ``gemm.scaled``: ``torch._scaled_mm(a, b.t(), scale_a, scale_b, out_dtype=...)`` of the operands cast
  to FP8 (the spec's float32 carriers hold FP8 values, so the cast is exact) with each scale in
  the layout it wants (1x128: outer-dim-major; 128x128 of ``b``: transposed).  On CUDA (sm89+,
  not ROCm): tensorwise for every format pair; rowwise and the blockwise pairs for E4M3 operands
  only (what torch's tests run), rowwise float32 output on sm90 only (cuBLAS), blockwise on sm90
  with CUDA >= 12.9.  On the CPU (seen on 2.13): tensorwise and rowwise only.

Only those variants are claimed; the others are reported not-implemented.  GLU interleave,
nibble packing, the MX element formats and torchao's affine quantization have no native op.  Native ops do not promise
qconform's argument errors, so the ``invalid``-input checks are not claimed either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conformance.backends import Backend, Implementation

__all__ = ["backend"]


def _version(torch_version: str) -> tuple[int, int]:
    major, minor = torch_version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def _fp8_overflow_variant(fmt: str, torch_version: str) -> str:
    """The overflow policy eager ``.to(fp8)`` of this torch version implements."""
    if fmt == "float8_e4m3fn" and _version(torch_version) >= (2, 13):
        return "saturate"
    return "nonsaturating"


def _int4pack_input_form(torch_version: str) -> str:
    """The weight form ``_convert_weight_to_int4pack`` of this torch version takes (pytorch#129940)."""
    return "uint8" if _version(torch_version) >= (2, 5) else "int32"


def _tinygemm_contracts(torch: Any, device: str) -> dict[str, Implementation]:
    """``int4.tinygemm_pack`` and ``int4.tinygemm_mm`` through torch's CUDA tinygemm ops."""
    reason = None
    if device != "cuda":
        reason = (
            "the tinygemm layout is CUDA-only: torch's CPU op _convert_weight_to_int4pack_for_cpu packs "
            "another layout (uint8 [N, K/2], nibbles paired along N)"
        )
    elif getattr(torch.version, "hip", None):
        reason = "on ROCm _convert_weight_to_int4pack fills the same shape in 16-wide n-tiles (another layout)"
    elif torch.cuda.get_device_capability()[0] < 8:
        reason = "_convert_weight_to_int4pack and _weight_int4pack_mm need sm80 or newer"
    form = _int4pack_input_form(torch.__version__)

    def pack(q: Any = None, q_uint8: Any = None, *, inner_k_tiles: int, input_form: str) -> dict[str, Any]:
        weight = q if input_form == "int32" else q_uint8
        return {"packed": torch.ops.aten._convert_weight_to_int4pack(weight.contiguous(), inner_k_tiles)}

    def pack_supports(params: Mapping[str, Any]) -> str | None:
        if reason is not None:
            return reason
        if params["input_form"] != form:
            return f"torch {torch.__version__} _convert_weight_to_int4pack takes input_form={form!r}"
        return None

    def mm(a: Any, packed: Any, scales_and_zeros: Any, *, inner_k_tiles: int, group_size: int) -> dict[str, Any]:
        return {"out": torch.ops.aten._weight_int4pack_mm(a, packed, group_size, scales_and_zeros)}

    return {
        "int4.tinygemm_pack": Implementation(pack, pack_supports, validates_inputs=False),
        "int4.tinygemm_mm": Implementation(mm, lambda params: reason, validates_inputs=False),
    }


def _grouped_mm_reason(torch: Any, device: str) -> str | None:
    """Why ``torch._grouped_mm`` cannot run ``group.gemm`` here, or None."""
    version = _version(torch.__version__)
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no _grouped_mm (added in 2.8)"
    if device == "cpu":
        return None if version >= (2, 9) else "torch._grouped_mm runs on the CPU from torch 2.9 (pytorch#161717)"
    if getattr(torch.version, "hip", None):
        return "torch._grouped_mm on ROCm is not claimed (not verified)"
    capability = torch.cuda.get_device_capability()
    if capability == (9, 0) or (capability >= (8, 0) and version >= (2, 9)):
        return None
    arch = f"sm{capability[0]}{capability[1]}"
    return f"torch {torch.__version__} runs _grouped_mm on sm90 (and on sm80+ from 2.9), not {arch}"


def _scaled_mm_reason(torch: Any, device: str, params: Mapping[str, Any]) -> str | None:
    """Why ``torch._scaled_mm`` does not run this ``gemm.scaled`` row here, or None (module docstring)."""
    pair = (params["scaling_a"], params["scaling_b"])
    e4m3 = params["format_a"] == params["format_b"] == "float8_e4m3fn"
    if device == "cpu":
        if pair not in (("tensorwise", "tensorwise"), ("rowwise", "rowwise")):
            return "torch's CPU _scaled_mm has tensorwise and rowwise scaling only"
        return None if _version(torch.__version__) >= (2, 13) else "torch's CPU _scaled_mm is claimed from 2.13 (seen)"
    if getattr(torch.version, "hip", None):
        return "torch._scaled_mm on ROCm takes the FNUZ formats; not claimed"
    capability = torch.cuda.get_device_capability()
    if capability < (8, 9):
        return "torch._scaled_mm needs sm89 or newer"
    if pair == ("tensorwise", "tensorwise"):
        return None
    if not e4m3:
        return "rowwise and blockwise _scaled_mm are claimed for E4M3 operands only"
    if pair == ("rowwise", "rowwise"):
        if params["out_dtype"] == "float32" and capability != (9, 0):
            return "rowwise _scaled_mm gives float32 output on sm90 only (cuBLAS)"
        return None
    cuda = tuple(int(part) for part in str(torch.version.cuda).split(".")[:2])
    if capability != (9, 0) or cuda < (12, 9):
        return "blockwise _scaled_mm needs sm90 and CUDA >= 12.9"
    return None


def _gemm_contracts(torch: Any, device: str) -> dict[str, Implementation]:
    """``group.gemm`` through ``torch._grouped_mm`` and ``gemm.scaled`` through ``torch._scaled_mm``."""
    grouped_reason = _grouped_mm_reason(torch, device)
    fp8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}

    def grouped(a: Any, b: Any, *, form: str, groups: int, group_sizes: Any) -> dict[str, Any]:
        ends, total = [], 0
        for size in group_sizes:
            total += int(size)
            ends.append(total)
        offs = torch.tensor(ends, dtype=torch.int32, device=a.device)
        return {"out": torch._grouped_mm(a, b, offs=offs)}

    def scales(scale: Any, scaling: str, operand: str) -> Any:
        """``scale`` ([blocks of rows, blocks of K], row-major) in the layout ``_scaled_mm`` checks."""
        if scaling == "tensorwise":
            return scale.reshape(())
        if operand == "a":
            return scale.t().contiguous().t() if scaling == "1x128" else scale.contiguous()
        if scaling == "rowwise":
            return scale.reshape(1, -1).contiguous()
        return scale.t().contiguous() if scaling == "1x128" else scale.contiguous().t()

    def scaled(
        a: Any, b: Any, scale_a: Any, scale_b: Any, *, scaling_a: str, scaling_b: str, format_a: str,
        format_b: str, out_dtype: str,
    ) -> dict[str, Any]:  # fmt: skip
        out = torch._scaled_mm(
            a.to(fp8[format_a]),
            b.to(fp8[format_b]).t(),
            scales(scale_a, scaling_a, "a"),
            scales(scale_b, scaling_b, "b"),
            out_dtype=torch.bfloat16 if out_dtype == "bfloat16" else torch.float32,
            use_fast_accum=False,
        )
        return {"out": out.float()}

    return {
        "group.gemm": Implementation(grouped, lambda params: grouped_reason, validates_inputs=False),
        "gemm.scaled": Implementation(
            scaled, lambda params: _scaled_mm_reason(torch, device, params), validates_inputs=False
        ),
    }


def backend() -> Backend:
    import torch

    fp8_dtypes = {
        "float8_e4m3fn": torch.float8_e4m3fn,
        "float8_e5m2": torch.float8_e5m2,
        "float8_e4m3fnuz": torch.float8_e4m3fnuz,
        "float8_e5m2fnuz": torch.float8_e5m2fnuz,
    }

    def cast_fp8(x: torch.Tensor, *, format: str, overflow: str, rounding: str) -> dict[str, torch.Tensor]:
        return {"codes": x.to(fp8_dtypes[format]).view(torch.uint8)}

    def cast_fp8_supports(params: Mapping[str, Any]) -> str | None:
        if params["format"] not in fp8_dtypes:
            return f"torch has no dtype for format={params['format']!r}"
        if params["rounding"] != "rne":
            return "torch's .to() rounds to nearest even only"
        claimed = _fp8_overflow_variant(params["format"], torch.__version__)
        if params["overflow"] != claimed:
            return f"torch {torch.__version__} eager .to({params['format']}) implements overflow={claimed!r}"
        return None

    def decode_fp8(codes: torch.Tensor, *, format: str) -> dict[str, torch.Tensor]:
        return {"values": codes.view(fp8_dtypes[format]).to(torch.float32)}

    contracts: dict[str, Implementation] = {
        "cast.fp8": Implementation(cast_fp8, cast_fp8_supports, validates_inputs=False),
        "decode.fp8": Implementation(decode_fp8, validates_inputs=False),
    }
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    if e8m0 is not None:
        claimed = {"rounding": "nearest_up", "zero": "min", "overflow": "nonsaturating"}

        def cast_e8m0(x: torch.Tensor, *, rounding: str, zero: str, overflow: str) -> dict[str, torch.Tensor]:
            return {"codes": x.to(e8m0).view(torch.uint8)}

        def cast_e8m0_supports(params: Mapping[str, Any]) -> str | None:
            if any(params[k] != v for k, v in claimed.items()):
                return f"torch's .to(float8_e8m0fnu) implements {claimed}"
            return None

        def decode_e8m0(codes: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"values": codes.view(e8m0).to(torch.float32)}

        contracts["cast.e8m0"] = Implementation(cast_e8m0, cast_e8m0_supports, validates_inputs=False)
        contracts["decode.e8m0"] = Implementation(decode_e8m0, validates_inputs=False)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    contracts.update(_tinygemm_contracts(torch, device))
    contracts.update(_gemm_contracts(torch, device))
    return Backend(
        name="torch", device=device, array_kind="torch", contracts=contracts,
        info={"torch": torch.__version__, "cuda": str(torch.version.cuda)},
    )  # fmt: skip
