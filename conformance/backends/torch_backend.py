"""The ``torch`` backend: PyTorch's own native ops, each declaring the variant it implements.

This certifies what the installed torch actually does.  Variants differ by version:

- ``cast.fp8``: eager ``tensor.to(torch.float8_*)``.  E4M3FN overflow is non-saturating up
  to torch 2.12 (beyond 464 and +-Inf give NaN; seen on torch 2.11) and saturating from
  2.13 (pytorch#177870, #178817); E5M2 overflow gives +-Inf in every version seen (2.11,
  2.13).  Only that variant is claimed; the other is reported not-implemented.
- ``decode.fp8``: ``codes.view(torch.float8_*).to(torch.float32)``.

GLU interleave has no native op, so it is not implemented here.  Native ops do not promise
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

    dtypes = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}

    def cast_fp8(x: torch.Tensor, *, format: str, overflow: str) -> dict[str, torch.Tensor]:
        return {"codes": x.to(dtypes[format]).view(torch.uint8)}

    def cast_supports(params: Mapping[str, Any]) -> str | None:
        if params["format"] not in dtypes:
            return f"torch has no dtype for format={params['format']!r}"
        claimed = _fp8_overflow_variant(params["format"], torch.__version__)
        if params["overflow"] != claimed:
            return f"torch {torch.__version__} eager .to({params['format']}) implements overflow={claimed!r}"
        return None

    def decode_fp8(codes: torch.Tensor, *, format: str) -> dict[str, torch.Tensor]:
        return {"values": codes.view(dtypes[format]).to(torch.float32)}

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return Backend(
        name="torch",
        device=device,
        array_kind="torch",
        contracts={
            "cast.fp8": Implementation(cast_fp8, cast_supports, validates_inputs=False),
            "decode.fp8": Implementation(decode_fp8, validates_inputs=False),
        },
        info={"torch": torch.__version__, "cuda": str(torch.version.cuda)},
    )
