"""``fast.group`` and ``fast.glu.interleave_grouped`` on a CUDA device against ``reference``, bit for bit.

Grouped quantization runs the member quantizers' Triton kernels on ragged members (an empty one among
them, dims that are not multiples of 128) holding special values (NaN, Inf, subnormals, zero blocks), and
on fuzzed member counts and shapes; every grouped buffer must hold, member by member, the reference's bytes
(scale padding masked; FP8 NaN codes compared as NaN codes: the GPU drops a NaN product's sign).

Run with ``pytest tests/gpu/test_gpu_group.py -m gpu`` (part of ``nox -s gpu``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import reference.glu
import reference.group
from fast.buffers import quantizer
from fast.glu import interleave_grouped
from fast.group import layout, quantize, tp_partition
from fast.group.members import EMPTY_MEMBER, GROUPED

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

PATH_ENV = "QCONFORM_FAST_PATH"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
RECIPES = [("fp8_tensor", "none"), ("mxfp8", "1d"), ("mxfp8", "2d"), ("fp8_block", "1d"), ("fp8_block", "2d"),
           ("nvfp4", "1d"), ("nvfp4", "2d")]  # fmt: skip
DIVISOR = {"mxfp8": 32, "nvfp4": 16}
RAGGED = {
    "any": ([1000, 0, 129, 3, 2053], [700, 700, 257, 5, 130]),
    "mxfp8": ([256, 0, 32, 1024, 96], [512, 64, 96, 160, 32]),
    "nvfp4": ([256, 0, 16, 1024, 80], [512, 64, 48, 160, 16]),
}
"""Five members per recipe: one empty, none of the others a multiple of 128 in both dims."""


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@pytest.fixture(autouse=True)
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every member quantizer runs its Triton kernels (an error if Triton is missing, never a silent fallback)."""
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def special_buffer(total: int, dtype: str, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Values over many binades, zero runs and scattered NaN, Inf, subnormals: the CUDA tensor and its carrier."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(total) * np.exp2(rng.integers(-20, 20, total))).astype(np.float32)
    if total >= 4096:
        x[:4096] = 0.0  # zero blocks at the start of member 0
    where = rng.integers(0, max(total, 1), total // 500)
    x[where] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0, 1e-40, 3e4], dtype=np.float32), where.size)
    tensor = torch.from_numpy(x).to(DTYPES[dtype])
    carrier = tensor.float().numpy() if dtype != "float16" else tensor.numpy()
    return tensor.cuda(), carrier


def assert_matches(got: dict[str, torch.Tensor], expected: dict[str, np.ndarray], what: str) -> None:
    __tracebackhide__ = True
    assert sorted(got) == sorted(k for k in expected if not k.endswith("_padding")), what
    for name, tensor in got.items():
        ours, theirs = tensor.cpu().numpy(), expected[name]
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (name, what)
        keep = ~expected.get(f"{name}_padding", np.zeros(theirs.shape, dtype=bool))
        same = ours.view(f"u{ours.itemsize}") == theirs.view(f"u{theirs.itemsize}")
        if name in ("data", "columnwise_data"):  # E4M3 codes: 0x7F and 0xFF are both NaN
            same |= ((ours & 0x7F) == 0x7F) & ((theirs & 0x7F) == 0x7F)
        bad = np.flatnonzero(~same & keep)
        if bad.size:
            pytest.fail(f"{bad.size} of {ours.size} {name} differ [{what}]; first at {bad[0]}: "
                        f"{ours[bad[0]]!r}, but reference gives {theirs[bad[0]]!r}")  # fmt: skip


@pytest.mark.parametrize("usage", ["both", "rowwise", "columnwise"])
@pytest.mark.parametrize(("recipe", "block"), RECIPES)
def test_ragged_members_match_reference(recipe: str, block: str, usage: str) -> None:
    first_dims, last_dims = RAGGED.get(recipe, RAGGED["any"])
    total = sum(m * k for m, k in zip(first_dims, last_dims, strict=True))
    for dtype in ("bfloat16", "float32") if usage == "both" else ("bfloat16",):
        tensor, carrier = special_buffer(total, dtype, seed=len(recipe) + len(usage))
        layouts = ["compact", "swizzled"] if recipe == "mxfp8" else ["compact"]
        for scale_layout in layouts:
            kwargs = {"num_members": 5, "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe,
                      "block": block, "scale_layout": scale_layout, "usage": usage, "x_dtype": dtype}  # fmt: skip
            assert_matches(quantize(tensor, **kwargs), reference.group.quantize(carrier, **kwargs), str(kwargs))


STACKED = [
    ("mxfp8", "1d", "compact", [256, 0, 1024, 128, 96], [512] * 5),
    ("mxfp8", "1d", "swizzled", [256, 0, 1024, 128, 96], [512] * 5),
    ("fp8_block", "1d", "compact", [512] * 4, [1000] * 4),
    ("fp8_block", "2d", "compact", [512] * 4, [1000] * 4),
]
"""Members that stack (``fast.group.members.stacked_call``): one quantizer launch on the stacked view."""


@pytest.mark.parametrize("usage", ["both", "rowwise", "columnwise"])
@pytest.mark.parametrize(("recipe", "block", "scale_layout", "first_dims", "last_dims"), STACKED)
def test_stacked_members_match_reference(
    recipe: str, block: str, scale_layout: str, first_dims: list[int], last_dims: list[int], usage: str
) -> None:
    tensor, carrier = special_buffer(sum(m * k for m, k in zip(first_dims, last_dims, strict=True)), "bfloat16", 3)
    kwargs = {"num_members": len(first_dims), "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe,
              "block": block, "scale_layout": scale_layout, "usage": usage, "x_dtype": "bfloat16"}  # fmt: skip
    assert_matches(quantize(tensor, **kwargs), reference.group.quantize(carrier, **kwargs), str(kwargs))


@st.composite
def members(draw: st.DrawFn, recipe: str) -> tuple[list[int], list[int]]:
    step = DIVISOR.get(recipe, 1)
    n = draw(st.integers(1, 8), label="num_members")
    dims = st.integers(0, 320 // step).map(lambda d: d * step)
    lists = []
    for name in ("first_dims", "last_dims"):
        equal = draw(st.booleans(), label=f"{name} all equal")
        lists.append(
            [draw(dims, label=name)] * n if equal else draw(st.lists(dims, min_size=n, max_size=n), label=name)
        )
    return lists[0], lists[1]


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
@settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_members_match_reference(recipe: str, block: str, data: Any) -> None:
    """Grouped quantize equals per-member quantize on fuzzed member counts (1-8) and shapes (up to 320)."""
    first_dims, last_dims = data.draw(members(recipe), label="members")
    total = sum(m * k for m, k in zip(first_dims, last_dims, strict=True))
    dtype = data.draw(st.sampled_from(list(DTYPES)), label="dtype")
    tensor, carrier = special_buffer(total, dtype, seed=data.draw(st.integers(0, 2**16), label="seed"))
    kwargs = {"num_members": len(first_dims), "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe,
              "block": block, "x_dtype": dtype}  # fmt: skip
    assert_matches(quantize(tensor, **kwargs), reference.group.quantize(carrier, **kwargs), str(kwargs))


@pytest.mark.parametrize("usage", ["both", "rowwise", "columnwise"])
@pytest.mark.parametrize(
    ("recipe", "block"), [("fp8_tensor", "none"), ("fp8_block", "1d"), ("nvfp4", "1d"), ("nvfp4", "2d")]
)
def test_large_members_match_the_member_quantizer(recipe: str, block: str, usage: str) -> None:
    """The grouped kernels on 67 MB of members (thousands of tiles per member, beyond L2) against the recipe's
    quantizer on each member alone, byte for byte (these dims leave no scale padding to mask)."""
    assert_members_match_the_member_quantizer(recipe, block, usage, [2048, 0, 1024, 4096], [7168, 7168, 2064, 4096])


@pytest.mark.parametrize("usage", ["both", "rowwise", "columnwise"])
@pytest.mark.parametrize("block", ["1d", "2d"])
def test_nvfp4_whole_tiles_match_the_member_quantizer(block: str, usage: str) -> None:
    """The grouped NVFP4 kernel's unmasked variant (every member a whole number of fast.quant.nvfp4's tiles: 128 x
    64 or 128 x 32 elements, rowwise 2 or 16 rows x 2048; an empty member besides) against each member alone."""
    assert_members_match_the_member_quantizer("nvfp4", block, usage, [256, 0, 128, 384], [4096, 64, 2048, 2048])


def assert_members_match_the_member_quantizer(
    recipe: str, block: str, usage: str, first_dims: list[int], last_dims: list[int]
) -> None:
    """``quantize`` of members ``first_dims[i] x last_dims[i]`` equals the recipe's quantizer on each member alone."""
    shapes = list(zip(first_dims, last_dims, strict=True))
    tensor, _ = special_buffer(sum(m * k for m, k in shapes), "bfloat16", seed=7)
    kwargs = {"num_members": len(shapes), "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe,
              "block": block}  # fmt: skip
    got = quantize(tensor, usage=usage, **kwargs)
    placed = layout(tensor, **kwargs)
    offsets = placed["offsets"].tolist()
    member_quantizer = quantizer(recipe, block, usage, "compact")
    for i, (m, k) in enumerate(shapes):
        member = member_quantizer(tensor[offsets[i] : offsets[i + 1]].view(m, k)) if m * k else {}
        for name, (source, placement, _) in GROUPED[recipe].items():
            if name not in got:
                continue
            if placement == "member":
                expected = member[source].reshape(()) if m * k else torch.tensor(EMPTY_MEMBER[name], device="cuda")
                assert torch.equal(got[name][i], expected), (name, i)
            elif placement == "scales" and m * k:
                start = placed["columnwise_scale_offsets" if name.startswith("columnwise") else "scale_offsets"][i]
                rows, cols = member[source].shape
                slot = got[name][int(start) :].as_strided((rows, cols), (round_up(cols, 4), 1))
                assert torch.equal(slot, member[source]), (name, i)
            elif m * k:
                per_byte = 2 if placement == "bytes" else 1
                chunk = got[name][offsets[i] // per_byte : offsets[i + 1] // per_byte]
                assert torch.equal(chunk, member[source].reshape(-1)), (name, i)


def test_layout_tp_partition_and_grouped_interleave_on_cuda() -> None:
    first_dims, last_dims = [256, 0, 128], [512, 512, 256]
    data = torch.arange(256 * 512 + 128 * 256, dtype=torch.int32, device="cuda")
    kwargs = {"num_members": 3, "first_dims": first_dims, "last_dims": last_dims, "recipe": "mxfp8", "block": "1d"}
    got, expected = layout(data, **kwargs), reference.group.layout(data.cpu().numpy(), **kwargs)
    for name, value in got.items():
        assert value.device.type == "cuda" and np.array_equal(value.cpu().numpy(), expected[name]), name
    w = torch.randn(8, 1024, 768, device="cuda").to(torch.bfloat16)
    for parallel in ("column", "row"):
        shard = tp_partition(w, parallel=parallel, tp_size=4, rank=3)
        ref = reference.group.tp_partition(w.float().cpu().numpy(), parallel=parallel, tp_size=4, rank=3)
        assert np.array_equal(shard["shard"].float().cpu().numpy(), ref["shard"])
        assert shard["partition_dim"].item() == ref["partition_dim"][0]
    for direction in ("interleave", "deinterleave"):
        out = interleave_grouped(w, block_size=32, direction=direction)["out"]
        ref = reference.glu.interleave_grouped(w.float().cpu().numpy(), block_size=32, direction=direction)
        assert np.array_equal(out.float().cpu().numpy(), ref["out"])
