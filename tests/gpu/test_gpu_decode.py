"""``fast.decode`` on CUDA: the Triton kernel against the reference on every code of every format,
and on 2^26 random codes in a 2-D shape (bit for bit; NaN payloads are don't-care, signs kept)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fast import decode as fast_decode
from reference import decode as reference_decode

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

FORMATS = {
    **{f: ("fp8", 8) for f in fast_decode.FP8_FORMATS},
    **{f: ("fp6", 6) for f in fast_decode.FP6_FORMATS},
    **{f: ("fp4", 4) for f in fast_decode.FP4_FORMATS},
    "float8_e8m0fnu": ("e8m0", 8),
}


def decoded(module: object, format: str, codes: object) -> object:
    name, _ = FORMATS[format]
    kwargs = {} if name == "e8m0" else {"format": format}
    return getattr(module, name)(codes, **kwargs)["values"]


@pytest.mark.parametrize("format", FORMATS)
def test_kernel_matches_reference(monkeypatch: pytest.MonkeyPatch, format: str) -> None:
    monkeypatch.setenv("QCONFORM_FAST_PATH", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    width = FORMATS[format][1]
    every = np.arange(1 << width, dtype=np.uint8)
    generator = torch.Generator("cuda").manual_seed(0)
    random = torch.randint(0, 1 << width, (1 << 13, 1 << 13), dtype=torch.uint8, device="cuda", generator=generator)
    for codes in (torch.from_numpy(every).cuda(), random):
        got = decoded(fast_decode, format, codes).cpu().numpy().view(np.uint32)
        expected = np.asarray(decoded(reference_decode, format, codes.cpu().numpy())).view(np.uint32)
        nan = (expected & 0x7FFFFFFF) > 0x7F800000
        assert np.array_equal((got & 0x7FFFFFFF) > 0x7F800000, nan), format
        assert np.array_equal(got[~nan], expected[~nan]), format
        assert np.array_equal(got[nan] >> 31, expected[nan] >> 31), format


@pytest.mark.parametrize("format", [*fast_decode.FP6_FORMATS, *fast_decode.FP4_FORMATS])
def test_kernel_names_the_first_byte_that_is_not_a_code(monkeypatch: pytest.MonkeyPatch, format: str) -> None:
    """The kernel's range flag (a plain store by each offending byte) leads to the first such byte."""
    monkeypatch.setenv("QCONFORM_FAST_PATH", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    width = FORMATS[format][1]
    codes = torch.randint(0, 1 << width, (1 << 12, 1 << 12), dtype=torch.uint8, device="cuda")
    decoded(fast_decode, format, codes)  # valid codes leave the flag down
    codes[3000, 5], codes[1000, 77] = 255, 1 << width
    with pytest.raises(ValueError, match=rf"codes\[1000, 77\]={1 << width}, but codes must hold"):
        decoded(fast_decode, format, codes)
