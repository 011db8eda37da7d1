"""Conversions between the engine's NumPy carriers and torch tensors (torch imported lazily).

Importing this module (the first call of a torch backend in a process) sets torch's CPU threads to
``QCONFORM_TORCH_THREADS`` (default 1): conformance cases are small, and on a busy machine (xdist
workers, ``--jobs``, the reference beside the backend) torch's thread pool spins for each op, which
measured a few times to 25 times slower per call than one thread.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

__all__ = ["to_numpy", "to_tensor"]

torch.set_num_threads(max(1, int(os.environ.get("QCONFORM_TORCH_THREADS", "1"))))

_TORCH_DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
    # unsigned 16/32-bit tensors exist since torch 2.3 (limited ops: enough to carry bits)
    **{name: getattr(torch, name) for name in ("uint16", "uint32") if hasattr(torch, name)},
}


def to_tensor(carrier: np.ndarray, dtype: str, device: str) -> torch.Tensor:
    """A contiguous tensor of the logical ``dtype`` on ``device``, built bit for bit.

    bfloat16 is built from its bits, not with ``.to(torch.bfloat16)``: on CPU that
    conversion turns every NaN into 0xFFFF (a negative NaN), which would hide the sign.
    """
    if carrier.size == 0:  # NumPy gives empty arrays zero strides, which torch's stride checks reject
        return torch.empty(carrier.shape, dtype=_TORCH_DTYPES[dtype], device=device)
    array = np.array(carrier, copy=True, order="C")
    if dtype in ("uint16", "uint32"):  # build from the signed view: from_numpy lacks some unsigned dtypes
        signed = torch.from_numpy(array.view(f"int{array.dtype.itemsize * 8}"))
        return signed.view(_TORCH_DTYPES[dtype]).to(device)
    if dtype == "bfloat16":
        bits = (array.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)
        return torch.from_numpy(bits).view(torch.bfloat16).to(device)
    return torch.from_numpy(array).to(_TORCH_DTYPES[dtype]).to(device).contiguous()


def to_numpy(value: Any) -> np.ndarray:
    """NumPy carrier of an output: bfloat16 as uint16 bits, float8 codes as uint8."""
    if not isinstance(value, torch.Tensor):
        return np.asarray(value)
    tensor = value.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    if tensor.element_size() == 1 and tensor.dtype.is_floating_point:
        return tensor.view(torch.uint8).numpy()
    if tensor.dtype in (getattr(torch, "uint16", None), getattr(torch, "uint32", None)):
        signed = {2: torch.int16, 4: torch.int32}[tensor.element_size()]
        return tensor.view(signed).numpy().view(f"uint{8 * tensor.element_size()}")
    return tensor.numpy()
