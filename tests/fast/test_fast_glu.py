"""``fast.glu.interleave`` / ``deinterleave`` (TransformerEngine PR #3078) on CPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fast.glu import deinterleave, interleave

Regroup = Callable[..., dict[str, torch.Tensor]]
EXAMPLES = settings(max_examples=50, deadline=None, derandomize=True)
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.uint8, torch.int64, torch.bool]


def interleaved_rows(rows: int, block_size: int) -> list[int]:
    """Source row of each output row, written out block by block: W0:k, V0:k, Wk:2k, Vk:2k, ..."""
    half, order = rows // 2, []
    for start in range(0, half, block_size):
        order += list(range(start, start + block_size))
        order += list(range(half + start, half + start + block_size))
    return order


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes, dtypes and bytes (NaN payloads and signed zeros included)."""
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


@st.composite
def glu_weights(draw: st.DrawFn) -> tuple[torch.Tensor, int]:
    """A weight whose dim 0 is a multiple of 2*block_size, with up to 2 trailing dims, any dtype and random bits."""
    block_size = draw(st.integers(1, 5), label="block_size")
    blocks_per_half = draw(st.integers(0, 4), label="blocks_per_half")
    trailing = draw(st.lists(st.integers(0, 4), max_size=2), label="trailing")
    dtype = draw(st.sampled_from(DTYPES), label="dtype")
    seed = draw(st.integers(0, 2**31), label="seed")
    shape = (2 * block_size * blocks_per_half, *trailing)
    high = 2 if dtype == torch.bool else 256  # a bool byte other than 0 or 1 is not a valid bool
    size = (*shape, torch.empty((), dtype=dtype).element_size())
    bits = torch.randint(0, high, size, dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    return bits.view(dtype).reshape(shape), block_size


@EXAMPLES
@given(glu_weights())
def test_interleave_moves_whole_rows(case: tuple[torch.Tensor, int]) -> None:
    w, block_size = case
    out = interleave(w, block_size=block_size)["out"]
    assert out.is_contiguous()
    assert same_bits(out, w[interleaved_rows(w.shape[0], block_size)])


@EXAMPLES
@given(glu_weights())
def test_round_trips(case: tuple[torch.Tensor, int]) -> None:
    w, block_size = case
    back = deinterleave(interleave(w, block_size=block_size)["out"], block_size=block_size)["out"]
    assert same_bits(back, w)
    forth = interleave(deinterleave(w, block_size=block_size)["out"], block_size=block_size)["out"]
    assert same_bits(forth, w)


def test_small_example() -> None:
    w = torch.tensor([0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0])
    assert interleave(w, block_size=2)["out"].tolist() == [0.0, 1.0, 10.0, 11.0, 2.0, 3.0, 12.0, 13.0]
    assert interleave(w, block_size=1)["out"].tolist() == [0.0, 10.0, 1.0, 11.0, 2.0, 12.0, 3.0, 13.0]
    assert deinterleave(w, block_size=1)["out"].tolist() == [0.0, 2.0, 10.0, 12.0, 1.0, 3.0, 11.0, 13.0]


def test_matches_the_te_formula_on_a_weight() -> None:
    """TE: reshape to (2, d0/(2k), k, *rest), swap the first two axes, reshape back."""
    w = torch.randn(2 * 96, 40, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    te = w.reshape(2, 96 // 32, 32, 40).transpose(0, 1).reshape(w.shape)
    assert same_bits(interleave(w, block_size=32)["out"], te)


@pytest.mark.parametrize("regroup", [interleave, deinterleave])
def test_output_is_a_new_tensor(regroup: Regroup) -> None:
    """With one block per half the result equals ``w`` but must not alias it."""
    w = torch.arange(8.0).reshape(4, 2)
    out = regroup(w, block_size=2)["out"]
    assert torch.equal(out, w)
    out.zero_()
    assert w.sum().item() == 28.0


def test_non_contiguous_input() -> None:
    w = torch.arange(48.0).reshape(6, 8).t()  # shape (8, 6), strides (1, 8)
    out = interleave(w, block_size=2)["out"]
    assert out.is_contiguous()
    assert torch.equal(out, w[interleaved_rows(8, 2)])


@pytest.mark.parametrize("regroup", [interleave, deinterleave])
@pytest.mark.parametrize("bad", [0, -2, True, 2.0, "4", None])
def test_rejects_bad_block_size(regroup: Regroup, bad: object) -> None:
    with pytest.raises(ValueError, match=rf"block_size={bad!r}.*positive"):
        regroup(torch.zeros(8), block_size=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("regroup", [interleave, deinterleave])
def test_rejects_zero_dimensional(regroup: Regroup) -> None:
    with pytest.raises(ValueError, match=r"w with shape \(\), but w must have at least 1 dimension"):
        regroup(torch.tensor(1.0), block_size=1)


@pytest.mark.parametrize("regroup", [interleave, deinterleave])
def test_rejects_indivisible_dim0(regroup: Regroup) -> None:
    with pytest.raises(ValueError) as info:
        regroup(torch.zeros(10, 3), block_size=3)
    assert str(info.value) == "Got block_size=3 and w.shape[0]=10, but w.shape[0] must be divisible by 2*block_size=6"


def test_rejects_non_tensors() -> None:
    with pytest.raises(TypeError, match="w of type list"):
        interleave([1.0, 2.0], block_size=1)  # type: ignore[arg-type]


def test_input_not_aligned_to_eight_bytes() -> None:
    """A view starting 2 bytes into its storage: blocks cannot move as 8-byte integers, the result is the same."""
    base = torch.randn(1 + 8 * 4, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    w = base[1:].view(8, 4)
    assert same_bits(interleave(w, block_size=2)["out"], w[interleaved_rows(8, 2)])
    assert same_bits(interleave(w.clone(), block_size=2)["out"], w[interleaved_rows(8, 2)])
