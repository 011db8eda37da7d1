"""One conformance case: a contract, its parameters and its inputs as bit patterns.

A case can be frozen into a *replay token* (``qc1:`` + base64 of compressed JSON) that
``qconform replay`` turns back into exactly the same case, so a counterexample travels
as one line of text.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conformance.carriers import bits_to_carrier, get_dtype

__all__ = ["Case", "TensorBits", "decode_token"]

TOKEN_PREFIX = "qc1:"


@dataclass(frozen=True)
class TensorBits:
    """An input or output: its logical dtype and its bit patterns (shape included)."""

    dtype: str
    bits: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.bits.shape)

    def carrier(self) -> np.ndarray:
        return bits_to_carrier(self.bits, self.dtype)

    def to_json(self) -> dict[str, Any]:
        raw = self.bits.astype(self.bits.dtype.newbyteorder("<"), order="C").tobytes()
        return {"dtype": self.dtype, "shape": list(self.shape), "data": base64.b64encode(zlib.compress(raw)).decode()}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TensorBits:
        d = get_dtype(obj["dtype"])
        raw = zlib.decompress(base64.b64decode(obj["data"]))
        bits = np.frombuffer(raw, dtype=d.bit_dtype.newbyteorder("<")).astype(d.bit_dtype).reshape(obj["shape"])
        return cls(obj["dtype"], bits)


@dataclass(frozen=True)
class Case:
    """Inputs and complete parameters for one call of a contract."""

    contract: str
    params: Mapping[str, Any]
    inputs: Mapping[str, TensorBits]
    label: str = "random"
    elements: tuple[int, ...] = field(default=())  # for a minimized elementwise case: source indices

    def carriers(self) -> dict[str, np.ndarray]:
        return {name: t.carrier() for name, t in self.inputs.items()}

    def dtypes(self) -> dict[str, str]:
        return {name: t.dtype for name, t in self.inputs.items()}

    def describe(self) -> str:
        shapes = ", ".join(f"{n}: {t.dtype}{list(t.shape)}" for n, t in self.inputs.items())
        params = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.contract}({params}) on {shapes} [{self.label}]"

    def to_json(self) -> dict[str, Any]:
        return {
            "contract": self.contract,
            "params": dict(self.params),
            "label": self.label,
            "inputs": {n: t.to_json() for n, t in self.inputs.items()},
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Case:
        inputs = {n: TensorBits.from_json(t) for n, t in obj["inputs"].items()}
        return cls(obj["contract"], obj["params"], inputs, obj.get("label", "replay"))

    def token(self) -> str:
        """One-line replay token for this case."""
        payload = zlib.compress(json.dumps(self.to_json(), separators=(",", ":")).encode(), 9)
        return TOKEN_PREFIX + base64.urlsafe_b64encode(payload).decode()


def decode_token(token: str) -> Case:
    """Inverse of ``Case.token``."""
    if not token.startswith(TOKEN_PREFIX):
        raise ValueError(f"a replay token starts with {TOKEN_PREFIX!r}; got {token[:12]!r}...")
    obj = json.loads(zlib.decompress(base64.urlsafe_b64decode(token[len(TOKEN_PREFIX) :])))
    return Case.from_json(obj)
