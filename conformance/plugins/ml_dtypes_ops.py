"""The ``ml_dtypes`` backend: ml_dtypes' ``astype`` casts, judged on the ``cast.*`` contracts.

``x`` arrives as NumPy float32 or float16 (bfloat16 values as float32, exactly) and is converted with
``x.astype(ml_dtypes.<format>)``; the result's bytes are the codes (float4 / float6 / int4 in the low
bits of each byte).  What it claims, from ml_dtypes' own behaviour as its sources document it:

- ``cast.fp8``: ``rounding="rne"``, ``overflow="nonsaturating"`` (``astype`` never saturates);
- ``cast.fp6`` / ``cast.fp4``: ``rne`` with ``nan="negative_zero"`` (ml_dtypes' NaN of these types);
- ``cast.int``: int4 / uint4 with ``mode="truncate_wrap"`` (C++ conversion through int, wrapped).

Loaded lazily: without ml_dtypes the backend raises ``BackendError`` when loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from conformance.backends import Backend, Implementation
from conformance.errors import BackendError

__all__ = ["backend"]


def _cast(ml_dtypes: Any, x: np.ndarray, name: str, mask: int) -> np.ndarray:
    with np.errstate(all="ignore"):
        out = np.asarray(x).astype(getattr(ml_dtypes, name))
    return out.view(np.uint8) & np.uint8(mask)


def backend() -> Backend:
    try:
        import ml_dtypes
    except ImportError as exc:
        raise BackendError(f"ml_dtypes is not installed ({exc}); pip install -e '.[onnx]'") from exc

    def fp8(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
        return {"codes": _cast(ml_dtypes, x, format, 0xFF)}

    def fp6(x: np.ndarray, *, format: str, rounding: str, nan: str) -> dict[str, np.ndarray]:
        return {"codes": _cast(ml_dtypes, x, format, 0x3F)}

    def fp4(x: np.ndarray, *, format: str, rounding: str, nan: str) -> dict[str, np.ndarray]:
        return {"codes": _cast(ml_dtypes, x, format, 0x0F)}

    def int_(x: np.ndarray, *, dtype: str, mode: str) -> dict[str, np.ndarray]:
        with np.errstate(all="ignore"):
            values = np.asarray(x).astype(getattr(ml_dtypes, dtype)).astype(np.int16)
        return {"codes": (values & 0xF).astype(np.uint8)}

    def fp8_supports(params: Mapping[str, Any]) -> str | None:
        if params.get("rounding") != "rne":
            return "ml_dtypes astype rounds to nearest even only"
        return None if params.get("overflow") == "nonsaturating" else "ml_dtypes astype does not saturate"

    def small_supports(params: Mapping[str, Any]) -> str | None:
        if params.get("rounding") != "rne":
            return "ml_dtypes astype rounds to nearest even only"
        return None if params.get("nan") == "negative_zero" else "ml_dtypes gives NaN -> -0 (nan='negative_zero')"

    def int_supports(params: Mapping[str, Any]) -> str | None:
        if params.get("dtype") not in ("int4", "uint4"):
            return "int8 is NumPy's astype, not ml_dtypes'"
        return None if params.get("mode") == "truncate_wrap" else "ml_dtypes astype truncates and wraps"

    contracts = {
        "cast.fp8": Implementation(fp8, fp8_supports, validates_inputs=False),
        "cast.fp6": Implementation(fp6, small_supports, validates_inputs=False),
        "cast.fp4": Implementation(fp4, small_supports, validates_inputs=False),
        "cast.int": Implementation(int_, int_supports, validates_inputs=False),
    }
    return Backend("ml_dtypes", "cpu", "numpy", contracts, {"ml_dtypes": ml_dtypes.__version__})
