"""``fast.group`` (layout, split, stack, quantize, tp_partition) and ``fast.glu.interleave_grouped`` on CPU.

Grouped quantization runs the torch paths and, in Triton's interpreter with small members, the Triton
kernels of the member quantizers; both are compared with ``reference.group`` (padding masked) on fuzzed
member counts and shapes.  Argument errors must name the member and the constraint.
"""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fast.group
import fast.group.launch
import reference.glu
import reference.group
from fast.glu import interleave, interleave_grouped
from fast.group import layout, quantize, split, stack, tp_partition

PATH_ENV = "QCONFORM_FAST_PATH"
EXAMPLES = settings(max_examples=25, deadline=None, derandomize=True)
RECIPES = [("fp8_tensor", "none"), ("mxfp8", "1d"), ("mxfp8", "2d"), ("fp8_block", "1d"), ("fp8_block", "2d"),
           ("nvfp4", "1d"), ("nvfp4", "2d")]  # fmt: skip
DIVISOR = {"mxfp8": 32, "nvfp4": 16}
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


@st.composite
def members(draw: st.DrawFn, recipe: str = "none", max_dim: int = 48) -> tuple[list[int], list[int]]:
    step = DIVISOR.get(recipe, 1)
    n = draw(st.integers(1, 4), label="num_members")
    dims = st.integers(0, max_dim // step).map(lambda d: d * step)
    lists = []
    for name in ("first_dims", "last_dims"):
        equal = draw(st.booleans(), label=f"{name} all equal")
        lists.append(
            [draw(dims, label=name)] * n if equal else draw(st.lists(dims, min_size=n, max_size=n), label=name)
        )
    return lists[0], lists[1]


def special_buffer(total: int, dtype: str, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Values over many binades with zeros, NaN, Inf and subnormals: the tensor and its NumPy carrier."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(total) * np.exp2(rng.integers(-20, 20, total))).astype(np.float32)
    where = rng.integers(0, max(total, 1), total // 50)
    x[where] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40], dtype=np.float32), where.size)
    tensor = torch.from_numpy(x).to(DTYPES[dtype])
    return tensor, tensor.float().numpy() if dtype != "float16" else tensor.numpy()


def assert_matches(got: dict[str, torch.Tensor], expected: dict[str, np.ndarray], what: str) -> None:
    """Same names and shapes; bytes equal outside the padding; FP8 NaN codes equal as NaN codes."""
    __tracebackhide__ = True
    assert sorted(got) == sorted(k for k in expected if not k.endswith("_padding")), what
    for name, tensor in got.items():
        ours, theirs = tensor.numpy(), expected[name]
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (name, what)
        keep = ~expected.get(f"{name}_padding", np.zeros(theirs.shape, dtype=bool))
        same = ours.view(f"u{ours.itemsize}") == theirs.view(f"u{theirs.itemsize}")
        if name in ("data", "columnwise_data"):  # E4M3 codes: 0x7F and 0xFF are both NaN
            same |= ((ours & 0x7F) == 0x7F) & ((theirs & 0x7F) == 0x7F)
        bad = np.flatnonzero(~same & keep)
        assert not bad.size, f"{name}[{bad[0]}]={ours[bad[0]]!r}, but reference gives {theirs[bad[0]]!r} [{what}]"


# %% layout, split, stack


@EXAMPLES
@given(shapes=members(), seed=st.integers(0, 2**16), recipe=st.sampled_from(["none", "fp8_tensor", "fp8_block"]))
def test_layout_matches_reference(shapes: tuple[list[int], list[int]], seed: int, recipe: str):
    first_dims, last_dims = shapes
    total = sum(m * k for m, k in zip(first_dims, last_dims, strict=True))
    data = torch.randint(0, 256, (total,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))
    kwargs = {"num_members": len(first_dims), "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe,
              "block": "1d" if recipe == "fp8_block" else "none"}  # fmt: skip
    got = layout(data, **kwargs)
    expected = reference.group.layout(data.numpy(), **kwargs)
    assert sorted(got) == sorted(expected)
    for name, value in got.items():
        assert np.array_equal(value.numpy(), expected[name]), name
    assert total == 0 or got["data"].data_ptr() != data.data_ptr()  # stacked into a new buffer


def test_split_gives_views_equal_to_the_members_and_stack_inverts_it():
    originals = [torch.randn(3, 4), torch.randn(0, 4), torch.randn(2, 5)]
    data = stack(originals)
    assert data.shape == (12 + 0 + 10,)
    views = split(data, [0, 12, 12, 22], [(3, 4), (0, 4), (2, 5)])
    for view, original in zip(views, originals, strict=True):
        assert torch.equal(view, original)
    assert views[0].untyped_storage().data_ptr() == data.untyped_storage().data_ptr()  # views, no copies
    views[2][1, 1] = 7.0
    assert data[12 + 5 + 1] == 7.0
    assert torch.equal(stack(views), data)


@pytest.mark.parametrize(
    ("offsets", "shapes", "match"),
    [
        ([0, 6, 4, 10], [(2, 3), (0, 1), (2, 3)], r"offsets\[2\]=4 < offsets\[1\]=6.*must not decrease"),
        ([0, 6, 9], [(2, 3), (2, 2)], r"member 1 of shape \(2, 2\) between offsets 6 and 9.*exactly its 4"),
        ([0, 6, 10], [(2, 3), (2, 2)], r"offsets ending at 10, but data holds 12 elements"),
        ([1, 7, 12], [(2, 3), (2, 3)], r"starting at 0"),
        ([0, 6], [(2, 3), (2, 3)], r"one entry per member plus one"),
    ],
)
def test_split_rejects_bad_offsets_naming_member_and_constraint(offsets: list[int], shapes: list[Any], match: str):
    with pytest.raises(ValueError, match=match):
        split(torch.zeros(12), offsets, shapes)


def test_split_and_stack_reject_bad_buffers_and_members():
    with pytest.raises(ValueError, match=r"data.shape=\(3, 4\).*1-D"):
        split(torch.zeros(3, 4), [0, 12], [(3, 4)])
    with pytest.raises(TypeError, match="data of type ndarray"):
        split(np.zeros(4), [0, 4], [(2, 2)])
    with pytest.raises(ValueError, match=r"member 1 with dtype torch.float16.*member 0 has dtype torch.float32"):
        stack([torch.zeros(2, 2), torch.zeros(2, 2, dtype=torch.float16)])
    with pytest.raises(ValueError, match=r"member 0 of shape \(4,\).*2-D"):
        stack([torch.zeros(4)])
    with pytest.raises(ValueError, match="no members"):
        stack([])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_members": 2, "first_dims": [1, 2, 3], "last_dims": [1, 1]}, r"first_dims with 3 entries.*num_members=2"),
        ({"num_members": 2, "first_dims": [1, 1], "last_dims": [2, -2]}, r"last_dims\[1\]=-2.*\(member 1\)"),
        ({"num_members": 2, "first_dims": [2, 1], "last_dims": [2, 2]}, r"data with 5 elements.*add up to 6"),
        ({"num_members": 2, "first_dims": [32, 40], "last_dims": [32, 32], "recipe": "mxfp8", "block": "1d"},
         r"member 1 of shape \(40, 32\).*multiples of 32"),
        ({"num_members": 1, "first_dims": [1], "last_dims": [5], "recipe": "nvfp4", "block": "none"},
         r"recipe='nvfp4' and block='none'"),
    ],
)  # fmt: skip
def test_layout_rejects_bad_members(kwargs: dict[str, Any], match: str):
    with pytest.raises(ValueError, match=match):
        layout(torch.zeros(5), **kwargs)


# %% quantize


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_quantize_torch_path_matches_reference(monkeypatch: pytest.MonkeyPatch, recipe: str, block: str, data: Any):
    monkeypatch.setenv(PATH_ENV, "torch")
    first_dims, last_dims = data.draw(members(recipe, max_dim=160 if recipe == "fp8_block" else 64), label="members")
    dtype = data.draw(st.sampled_from(list(DTYPES)), label="dtype")
    usage = data.draw(st.sampled_from(["both", "rowwise", "columnwise"]), label="usage")
    layout_choice = data.draw(st.sampled_from(["compact", "swizzled"] if recipe == "mxfp8" else ["compact"]))
    total = sum(m * k for m, k in zip(first_dims, last_dims, strict=True))
    tensor, carrier = special_buffer(total, dtype, data.draw(st.integers(0, 2**16), label="seed"))
    kwargs = {"num_members": len(first_dims), "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe,
              "block": block, "scale_layout": layout_choice, "usage": usage, "x_dtype": dtype}  # fmt: skip
    assert_matches(quantize(tensor, **kwargs), reference.group.quantize(carrier, **kwargs), str(kwargs))


@pytest.mark.parametrize(("recipe", "block"), RECIPES)
def test_quantize_triton_kernels_match_reference(monkeypatch: pytest.MonkeyPatch, recipe: str, block: str):
    """The member quantizers' Triton kernels (interpreted): ragged members, an empty one, every copy."""
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    first_dims, last_dims = ([32, 0, 64], [64, 32, 32]) if recipe in DIVISOR else ([5, 0, 130], [130, 3, 7])
    total = sum(m * k for m, k in zip(first_dims, last_dims, strict=True))
    tensor, carrier = special_buffer(total, "bfloat16", seed=len(recipe))
    kwargs = {"num_members": 3, "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe, "block": block,
              "usage": "both", "x_dtype": "bfloat16"}  # fmt: skip
    assert_matches(quantize(tensor, **kwargs), reference.group.quantize(carrier, **kwargs), str(kwargs))


GROUPED_KERNEL_DIMS = {"fp8_tensor": [0, 1, 7, 64, 65, 130], "fp8_block": [0, 1, 7, 64, 65, 130, 256],
                      "mxfp8": [0, 32, 96, 128, 160, 288, 384], "nvfp4": [0, 16, 48, 144]}  # fmt: skip
"""Member dims of the grouped kernels' fuzzed cases: empty members, tails of every tile, whole tiles (MXFP8: Ks that
are multiples of 128 stage the rowwise scales of both usages)."""


@pytest.mark.parametrize(("recipe", "block"), [("fp8_tensor", "none"), ("mxfp8", "1d"), ("mxfp8", "2d"),
                                               ("fp8_block", "1d"), ("fp8_block", "2d"), ("nvfp4", "1d"),
                                               ("nvfp4", "2d")])  # fmt: skip
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_grouped_kernels_match_reference(monkeypatch: pytest.MonkeyPatch, recipe: str, block: str, data: Any):
    """Every recipe on the Triton path: grouped kernels for all members (a table search per tile; the amax
    pass's and NVFP4's persistent programs cross members, NVFP4's amax pass with an evict-last tail; MXFP8 in
    both scale layouts, members padded to 128-row scale tiles), on fuzzed member counts (1 to 9: table widths 2
    to 16) and shapes (empty members, ragged tiles and chunks)."""
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(fast.group.launch, "AMAX_CHUNK", (64, 2, 4))  # several amax chunks per member and program
    # NVFP4: 3 chunks evict-last
    monkeypatch.setattr(fast.group.launch, "nvfp4_kept_bytes", lambda x, columnwise: 3 * 64 * x.element_size())
    n = data.draw(st.integers(1, 9), label="num_members")
    dims = st.lists(st.sampled_from(GROUPED_KERNEL_DIMS[recipe]), min_size=n, max_size=n)
    first_dims, last_dims = data.draw(dims, label="first_dims"), data.draw(dims, label="last_dims")
    usage = data.draw(st.sampled_from(["both", "rowwise", "columnwise"]), label="usage")
    dtype = data.draw(st.sampled_from(list(DTYPES)), label="dtype")
    layouts = ["compact", "swizzled"] if recipe == "mxfp8" else ["compact"]
    scale_layout = data.draw(st.sampled_from(layouts), label="scale_layout")
    total = sum(m * k for m, k in zip(first_dims, last_dims, strict=True))
    tensor, carrier = special_buffer(total, dtype, data.draw(st.integers(0, 2**16), label="seed"))
    kwargs = {"num_members": n, "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe,
              "block": block, "scale_layout": scale_layout, "usage": usage, "x_dtype": dtype}  # fmt: skip
    assert_matches(quantize(tensor, **kwargs), reference.group.quantize(carrier, **kwargs), str(kwargs))


@pytest.mark.parametrize("usage", ["both", "rowwise", "columnwise"])
@pytest.mark.parametrize("block", ["1d", "2d"])
@pytest.mark.parametrize(("recipe", "scale_layout"), [("nvfp4", "compact"), ("mxfp8", "compact"),
                                                      ("mxfp8", "swizzled")])  # fmt: skip
def test_grouped_kernels_on_whole_tiles(
    monkeypatch: pytest.MonkeyPatch, recipe: str, scale_layout: str, block: str, usage: str
):
    """The grouped NVFP4 and MXFP8 kernels' unmasked variants (every non-empty member a whole number of tiles:
    NVFP4's 128 x 64 or 128 x 32 elements, rowwise 2 or 16 rows x 2048; ``fast.group.launch.MX_TILES``), their
    programs crossing members and an empty one, against the reference."""
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    first_dims, last_dims = [128, 0, 128], [2048, 64, 2048]
    tensor, carrier = special_buffer(2 * 128 * 2048, "bfloat16", seed=3)
    kwargs = {"num_members": 3, "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe, "block": block,
              "scale_layout": scale_layout, "usage": usage, "x_dtype": "bfloat16"}  # fmt: skip
    assert_matches(quantize(tensor, **kwargs), reference.group.quantize(carrier, **kwargs), str(kwargs))


def test_grouped_nvfp4_keeps_nothing_in_l2_for_a_large_columnwise_operand(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_grouped_kept_bytes``: the single quantizer's share of L2 (``fast.quant.nvfp4.launch.kept_bytes``) for the
    rowwise operand alone and for buffers up to 4 times the L2; none for a columnwise operand above that (its tiles
    run M first; see ``nvfp4_grouped``); the interpreter keeps none either way."""
    l2 = 50 << 20
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(L2_cache_size=l2))

    def buffer(nbytes: int, device: str = "cuda") -> Any:
        return types.SimpleNamespace(device=torch.device(device), numel=lambda: nbytes // 2, element_size=lambda: 2)

    small, large = buffer(4 * l2), buffer(4 * l2 + 2)
    assert fast.group.launch._grouped_kept_bytes(small, columnwise=True) == int(0.3 * l2)
    assert fast.group.launch._grouped_kept_bytes(large, columnwise=True) == 0
    assert fast.group.launch._grouped_kept_bytes(large, columnwise=False) == int(0.45 * l2)
    assert fast.group.launch._grouped_kept_bytes(buffer(4 * l2 + 2, "cpu"), columnwise=True) == 0


def test_grouped_mxfp8_stages_row_scales(monkeypatch: pytest.MonkeyPatch) -> None:
    """MXFP8 rowwise + columnwise, compact: the grouped kernel stages the rowwise scales and one copy kernel moves
    every member's into its padded compact matrix (Ks of 3, 8 and 1 words, an empty member, rows padded to 128)."""
    pytest.importorskip("triton")
    monkeypatch.setenv(PATH_ENV, "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    copies: list[int] = []
    unstage = fast.group.launch._unstage_mx_row_scales
    monkeypatch.setattr(fast.group.launch, "_unstage_mx_row_scales", lambda *args: copies.append(1) or unstage(*args))
    first_dims, last_dims = [96, 0, 32, 160], [384, 128, 1024, 128]
    total = sum(m * k for m, k in zip(first_dims, last_dims, strict=True))
    tensor, carrier = special_buffer(total, "bfloat16", seed=5)
    kwargs = {"num_members": 4, "first_dims": first_dims, "last_dims": last_dims, "recipe": "mxfp8", "block": "1d",
              "scale_layout": "compact", "usage": "both", "x_dtype": "bfloat16"}  # fmt: skip
    assert_matches(quantize(tensor, **kwargs), reference.group.quantize(carrier, **kwargs), str(kwargs))
    assert copies == [1]


STACKING = [
    # (recipe, block, first_dims, last_dims, usage, scale_layout, stacked)
    ("mxfp8", "1d", [128, 0, 256, 32], [96] * 4, "both", "compact", True),  # whole 128-row scale tiles between
    ("mxfp8", "2d", [256, 128], [64, 64], "both", "compact", True),
    ("mxfp8", "1d", [256, 128], [64, 64], "rowwise", "swizzled", True),
    ("mxfp8", "1d", [256, 128], [64, 64], "both", "swizzled", False),  # columnwise swizzle tiles the transpose
    ("mxfp8", "1d", [96, 128], [64, 64], "both", "compact", False),  # padding rows after member 0's scales
    ("mxfp8", "1d", [128, 128], [64, 32], "both", "compact", False),  # two Ks
    ("fp8_block", "1d", [128, 128, 128], [130] * 3, "both", "compact", True),  # transposed ones: one copy each
    ("fp8_block", "1d", [256, 256], [64, 64], "rowwise", "compact", True),
    ("fp8_block", "2d", [512, 512], [136, 136], "both", "compact", True),
    ("fp8_block", "2d", [128, 128], [64, 64], "rowwise", "compact", True),
    ("fp8_block", "2d", [128, 128], [64, 64], "both", "compact", False),  # columnwise scales padded per member
    ("fp8_block", "1d", [128, 256], [64, 64], "both", "compact", False),  # two shapes
    ("fp8_block", "1d", [64, 64], [64, 64], "both", "compact", False),  # a 128-row block would cross members
]


@pytest.mark.parametrize(("recipe", "block", "first_dims", "last_dims", "usage", "scale_layout", "stacked"), STACKING)
def test_members_that_stack_are_quantized_in_one_call(
    monkeypatch: pytest.MonkeyPatch,
    recipe: str,
    block: str,
    first_dims: list[int],
    last_dims: list[int],
    usage: str,
    scale_layout: str,
    stacked: bool,
):
    """Members whose stacked ``[sum(M), K]`` quantization gives the grouped buffers
    (``fast.group.members.stacked_call``) take one quantizer call; the bytes are the reference's either way."""
    monkeypatch.setenv(PATH_ENV, "torch")
    seen: list[tuple[int, ...]] = []
    real = fast.group.quantizer

    def counting(*args: Any) -> Any:
        member = real(*args)
        return lambda x: seen.append(tuple(x.shape)) or member(x)

    monkeypatch.setattr(fast.group, "quantizer", counting)
    total = sum(m * k for m, k in zip(first_dims, last_dims, strict=True))
    tensor, carrier = special_buffer(total, "bfloat16", seed=total)
    kwargs = {"num_members": len(first_dims), "first_dims": first_dims, "last_dims": last_dims, "recipe": recipe,
              "block": block, "usage": usage, "scale_layout": scale_layout, "x_dtype": "bfloat16"}  # fmt: skip
    assert_matches(quantize(tensor, **kwargs), reference.group.quantize(carrier, **kwargs), str(kwargs))
    assert len(seen) == (1 if stacked else sum(1 for m, k in zip(first_dims, last_dims, strict=True) if m * k))


def test_quantize_writes_each_member_in_place_of_one_allocation(monkeypatch: pytest.MonkeyPatch):
    """Member i's data is the member quantizer's output at offset i; the buffers are single 1-D tensors (scale
    padding, don't-care, is left out of the comparison)."""
    monkeypatch.setenv(PATH_ENV, "torch")
    from fast.quant import mx

    first_dims, last_dims = [32, 64], [64, 32]
    tensor, _ = special_buffer(32 * 64 + 64 * 32, "bfloat16", seed=1)
    out = quantize(tensor, num_members=2, first_dims=first_dims, last_dims=last_dims, recipe="mxfp8", block="1d")
    for name in ("data", "scales", "columnwise_data", "columnwise_scales"):
        assert out[name].dim() == 1 and out[name].is_contiguous()
    member = mx(tensor[2048:].view(64, 32), format="float8_e4m3fn", scale_rule="rceil", usage="both")
    assert torch.equal(out["data"][2048:], member["data_rowwise"].reshape(-1))
    assert torch.equal(out["scales"][512:].view(128, 4)[:64, :1], member["scale_rowwise"][:64, :1])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"recipe": "none", "block": "none"}, ValueError, r"recipe='none'"),
        ({"recipe": "fp8_block", "block": "1d", "scale_layout": "swizzled"}, ValueError, r"only mxfp8"),
        ({"recipe": "fp8_tensor", "block": "none", "usage": "transpose"}, ValueError, r"usage='transpose'"),
        ({"recipe": "fp8_tensor", "block": "none", "x_dtype": "float16"}, ValueError, r"x_dtype='float16'.*same dtype"),
        ({"recipe": "nvfp4", "block": "1d"}, ValueError, r"member 0 of shape \(1, 2\).*multiples of 16"),
    ],
)
def test_quantize_rejects_bad_arguments(kwargs: dict[str, Any], error: type, match: str):
    with pytest.raises(error, match=match):
        quantize(torch.zeros(4), num_members=2, first_dims=[1, 1], last_dims=[2, 2], **kwargs)
    with pytest.raises(ValueError, match=r"stride \(2,\).*contiguous"):
        quantize(torch.zeros(8)[::2], num_members=1, first_dims=[2], last_dims=[2], recipe="fp8_tensor", block="none")
    with pytest.raises(TypeError, match=r"data.dtype=torch.int32"):
        quantize(torch.zeros(4, dtype=torch.int32), num_members=1, first_dims=[2], last_dims=[2], recipe="fp8_tensor",
                 block="none")  # fmt: skip


# %% tp_partition


@EXAMPLES
@given(parallel=st.sampled_from(["column", "row"]), tp_size=st.integers(1, 4), data=st.data())
def test_tp_partition_matches_reference_and_torch_chunk(parallel: str, tp_size: int, data: Any):
    rank = data.draw(st.integers(0, tp_size - 1), label="rank")
    lead = data.draw(st.lists(st.integers(0, 3), max_size=1), label="num_gemms")
    out_dim = data.draw(st.integers(0, 5), label="out") * (tp_size if parallel == "column" else 1)
    in_dim = data.draw(st.integers(0, 5), label="in") * (tp_size if parallel == "row" else 1)
    w = torch.arange(math.prod(lead) * out_dim * in_dim, dtype=torch.int32).reshape(*lead, out_dim, in_dim)
    got = tp_partition(w, parallel=parallel, tp_size=tp_size, rank=rank)
    expected = reference.group.tp_partition(w.numpy(), parallel=parallel, tp_size=tp_size, rank=rank)
    assert np.array_equal(got["shard"].numpy(), expected["shard"])
    assert got["partition_dim"].tolist() == expected["partition_dim"].tolist()
    dim = int(expected["partition_dim"][0])
    assert torch.equal(got["shard"], torch.chunk(w, tp_size, dim=dim)[rank] if w.shape[dim] else got["shard"])
    assert got["shard"].is_contiguous()
    if got["shard"].numel():
        assert got["shard"].untyped_storage().data_ptr() != w.untyped_storage().data_ptr()  # its own storage


def test_tp_partition_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"w.shape\[1\]=3 \(the out axis\).*tp_size=2"):
        tp_partition(torch.zeros(2, 3, 4), parallel="column", tp_size=2, rank=0)
    with pytest.raises(ValueError, match=r"rank=2 and tp_size=2"):
        tp_partition(torch.zeros(4, 4), parallel="row", tp_size=2, rank=2)
    with pytest.raises(ValueError, match=r"w.shape=\(4,\)"):
        tp_partition(torch.zeros(4), parallel="row", tp_size=1, rank=0)
    with pytest.raises(TypeError, match="w of type ndarray"):
        tp_partition(np.zeros((2, 2)), parallel="row", tp_size=1, rank=0)


# %% glu.interleave_grouped


@EXAMPLES
@given(
    block_size=st.integers(1, 4),
    blocks=st.integers(0, 3),
    gemms=st.integers(0, 3),
    rest=st.lists(st.integers(1, 5), max_size=1),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.uint8, torch.int64]),
    direction=st.sampled_from(["interleave", "deinterleave"]),
)
def test_interleave_grouped_is_the_per_member_contract(
    block_size: int, blocks: int, gemms: int, rest: list[int], dtype: torch.dtype, direction: str
):
    shape = (gemms, 2 * block_size * blocks, *rest)
    w = torch.arange(math.prod(shape)).reshape(shape).to(dtype)
    out = interleave_grouped(w, block_size=block_size, direction=direction)["out"]
    expected = reference.glu.interleave_grouped(w.float().numpy(), block_size=block_size, direction=direction)
    assert out.is_contiguous() and out.dtype == dtype
    assert np.array_equal(out.float().numpy(), expected["out"])
    if direction == "interleave":
        for g in range(gemms):
            assert torch.equal(out[g], interleave(w[g], block_size=block_size)["out"])


def test_interleave_grouped_of_a_non_contiguous_weight():
    w = torch.arange(2 * 8 * 6, dtype=torch.bfloat16).reshape(2, 8, 6)[:, :, ::2]
    out = interleave_grouped(w, block_size=2)["out"]
    assert torch.equal(out, torch.stack([interleave(w[g].contiguous(), block_size=2)["out"] for g in range(2)]))


def test_interleave_grouped_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"block_size=3 and w.shape\[1\]=10"):
        interleave_grouped(torch.zeros(1, 10), block_size=3)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        interleave_grouped(torch.zeros(4), block_size=1)
    with pytest.raises(ValueError, match="direction='sideways'"):
        interleave_grouped(torch.zeros(1, 4), block_size=1, direction="sideways")
