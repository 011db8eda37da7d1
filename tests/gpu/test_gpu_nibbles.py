"""``fast.pack.nibbles`` / ``fast.unpack.nibbles`` on CUDA: the Triton kernels against the reference on
2^26 random codes, both orders, and the range check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fast import pack, unpack
from reference import pack as reference_pack

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("order", pack.NIBBLE_ORDERS)
def test_kernels_match_reference(monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    monkeypatch.setenv("QCONFORM_FAST_PATH", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    codes = torch.randint(0, 16, (1 << 13, 1 << 13), dtype=torch.uint8, device="cuda")
    packed = pack.nibbles(codes, order=order)["packed"]
    expected = reference_pack.nibbles(codes.cpu().numpy(), order=order)["packed"]
    assert np.array_equal(packed.cpu().numpy(), expected)
    assert torch.equal(unpack.nibbles(packed, order=order)["codes"], codes)
    codes[77, 4001] = 16
    with pytest.raises(ValueError, match=r"codes\[77, 4001\]=16"):
        pack.nibbles(codes, order=order)
