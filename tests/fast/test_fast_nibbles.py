"""``fast.pack.nibbles`` / ``fast.unpack.nibbles``: the Triton kernels (in the interpreter) against the
torch path, round trips, and the range check the pack kernel folds in."""

from __future__ import annotations

import pytest
import torch

from fast import pack, unpack

pytest.importorskip("triton")


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Call ``fn`` once per path: ``run(fn, *args, **kwargs) -> (torch result, triton result)``."""

    def run(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        results = []
        for path in ("torch", "triton"):
            monkeypatch.setenv("QCONFORM_FAST_PATH", path)
            results.append(fn(*args, **kwargs))
        return results

    return run


@pytest.mark.parametrize("order", pack.NIBBLE_ORDERS)
@pytest.mark.parametrize("shape", [(7, 10), (3, 2, 64), (4100,)])
def test_kernels_match_the_torch_path_and_round_trip(paths, order: str, shape: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    codes = torch.randint(0, 16, shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(len(shape)))
    by_torch, by_triton = paths(pack.nibbles, codes, order=order)
    assert torch.equal(by_torch["packed"], by_triton["packed"])
    by_torch, by_triton = paths(unpack.nibbles, by_triton["packed"], order=order)
    assert torch.equal(by_torch["codes"], by_triton["codes"])
    assert torch.equal(by_triton["codes"], codes)


def test_pack_kernel_names_the_first_code_above_15(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QCONFORM_FAST_PATH", "triton")
    codes = torch.zeros((3, 8), dtype=torch.uint8)
    codes[1, 5] = 16
    codes[2, 0] = 200
    with pytest.raises(ValueError, match=r"codes\[1, 5\]=16, but codes must be 0..15"):
        pack.nibbles(codes)
