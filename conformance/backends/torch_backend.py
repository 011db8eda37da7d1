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

Only those variants are claimed; the others are reported not-implemented.  GLU interleave,
nibble packing and the MX element formats have no native op.  Native ops do not promise
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
    return Backend(
        name="torch", device=device, array_kind="torch", contracts=contracts,
        info={"torch": torch.__version__, "cuda": str(torch.version.cuda)},
    )  # fmt: skip
