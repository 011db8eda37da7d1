"""An example qconform plugin: a vendor's FP8 cast (``vendor_runtime.to_fp8``) judged on ``cast.fp8``.

Run it from the repository root (the directory you run from is on the import path)::

    qconform run --backend examples.vendor_plugin:backend --spec cast.fp8 --profile smoke --report reports/vendor

What it shows (``docs/writing-a-backend.md`` explains each):

- ``Implementation(fn, supports)``: it claims the rows it implements (round to nearest even, both overflow
  policies) and gives a reason for the others, which the report shows as *n/i*, not as failures;
- ``validates_inputs`` left at its default (off): the runtime does not raise the spec's argument errors, so the
  contract's invalid-input row is *n/i*;
- ``array_kind="numpy"``: ``x`` arrives as a NumPy array (float32 or float16; bfloat16 as float32 holding the
  exact bfloat16 values), the codes go back as a ``uint8`` array of ``x``'s shape;
- ``info``: the versions the report records in its environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from conformance.backends import Backend, Implementation

__all__ = ["backend"]


def backend() -> Backend:
    """The plugin's factory: ``--backend examples.vendor_plugin:backend`` calls it in the worker process."""
    import ml_dtypes

    from examples.vendor_plugin import vendor_runtime

    def cast_fp8(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
        # x: float32 or float16 (bfloat16 inputs arrive as float32 holding the bfloat16 values)
        return {"codes": vendor_runtime.to_fp8(x.astype(np.float32), format, saturate=overflow == "saturate")}

    def cast_fp8_supports(params: Mapping[str, Any]) -> str | None:
        if params["rounding"] != "rne":
            return "vendor_runtime rounds to nearest even only"
        return None

    return Backend(
        name="vendor-example",
        device="cpu",
        array_kind="numpy",
        contracts={"cast.fp8": Implementation(cast_fp8, cast_fp8_supports)},
        info={"vendor_runtime": vendor_runtime.__version__, "ml_dtypes": ml_dtypes.__version__},
    )
