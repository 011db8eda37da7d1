"""``fast.gemm`` on CPU: the torch paths and the Triton grouped GEMM (in Triton's interpreter) against the NumPy
reference within the specs' bounds, ragged and empty groups, offsets and argument errors.

The engine checks the same through the specs (``tests/test_contracts.py``); here the shapes span several of the
interpreter's 16 x 16 x 16 tiles and GROUP_M bands, ``K`` is ragged against the tile, and ``grouped_mm``'s
offsets interface is exercised directly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import reference.gemm
from fast._triton import PATH_ENV
from fast.gemm import FORMS, grouped, grouped_mm, scaled

SIZES = [21, 0, 5, 40, 16]
SHAPES = {
    "2d_3d": ((sum(SIZES), 40), (len(SIZES), 40, 35)),
    "2d_2d": ((19, sum(SIZES)), (sum(SIZES), 35)),
    "3d_2d": ((len(SIZES), 19, 40), (40, sum(SIZES))),
}
"""Ragged groups (an empty one), K = 40 (not a multiple of the 16-deep tile), N = 35, M = 19."""


def bf16_operands(form: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    a_shape, b_shape = SHAPES[form]
    return (torch.randn(shape, generator=generator).to(torch.bfloat16) for shape in (a_shape, b_shape))  # type: ignore[return-value]


def assert_within_group_bound(got: torch.Tensor, ref: dict[str, np.ndarray]) -> None:
    """specs/group/gemm.yaml's bound: 0.00785 |ref| + 2**-16 abs_dot + 2**-119."""
    __tracebackhide__ = True
    diff = np.abs(got.float().numpy() - ref["out"])
    allowed = 2.0**-119 + 0.00785 * np.abs(ref["out"]) + 2.0**-16 * ref["abs_dot"]
    assert got.shape == ref["out"].shape
    assert (diff <= allowed).all(), f"max |diff| {diff.max()}, {int((diff > allowed).sum())} elements out of bound"


def reference_grouped(a: torch.Tensor, b: torch.Tensor, form: str, sizes: list[int]) -> dict[str, np.ndarray]:
    return reference.gemm.grouped(a.float().numpy(), b.float().numpy(), form=form, groups=len(sizes), group_sizes=sizes)


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize("form", FORMS)
def test_grouped_within_the_bound_of_the_reference(form: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, path)
    a, b = bf16_operands(form)
    out = grouped(a, b, form=form, groups=len(SIZES), group_sizes=SIZES)["out"]
    assert out.dtype == torch.bfloat16
    ref = reference_grouped(a, b, form, SIZES)
    assert_within_group_bound(out, ref)
    # float32 accumulation of 40 normal products: the rounding almost never differs from the float64 one
    assert (out.float().numpy() != ref["out"]).mean() < 0.01


@pytest.mark.parametrize("form", FORMS)
def test_triton_kernel_equals_the_torch_path_bit_for_bit_on_exact_sums(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small integers: every partial sum is exact in float32, so any order gives the same bits."""
    generator = torch.Generator().manual_seed(1)
    a_shape, b_shape = SHAPES[form]
    a = torch.randint(-8, 9, a_shape, generator=generator).to(torch.bfloat16)
    b = torch.randint(-8, 9, b_shape, generator=generator).to(torch.bfloat16)
    outs = {}
    for path in ("torch", "triton"):
        monkeypatch.setenv(PATH_ENV, path)
        outs[path] = grouped(a, b, form=form, groups=len(SIZES), group_sizes=SIZES)["out"]
    assert torch.equal(outs["torch"].view(torch.int16), outs["triton"].view(torch.int16))
    np.testing.assert_array_equal(outs["triton"].float().numpy(), reference_grouped(a, b, form, SIZES)["out"])


def test_triton_rounds_to_nearest_even_and_keeps_special_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sums that are bfloat16 midpoints (ties to even), just above one, NaN, +-Inf, and -0 * x."""
    monkeypatch.setenv(PATH_ENV, "triton")
    rows = [
        [1.0, 2.0**-8, 0.0],  # 1 + 2**-8: a tie, to even 1.0
        [1.0 + 2.0**-7, 2.0**-8, 0.0],  # a tie, to even 1 + 2**-6
        [1.0, 2.0**-8, 2.0**-16],  # just above the tie: up
        [float("nan"), 1.0, 0.0],
        [float("inf"), 1.0, 0.0],
        [-float("inf"), 0.0, 0.0],  # -inf * 1 + 0 * 1
    ]
    a = torch.tensor(rows, dtype=torch.float32).to(torch.bfloat16)
    b = torch.ones((1, 3, 16), dtype=torch.bfloat16)
    out = grouped(a, b, form="2d_3d", groups=1, group_sizes=[len(rows)])["out"][:, 0].float()
    assert out[:3].tolist() == [1.0, 1.0 + 2.0**-6, 1.0 + 2.0**-7]
    assert torch.isnan(out[3]) and out[4] == float("inf") and out[5] == -float("inf")


@pytest.mark.parametrize("path", ["torch", "triton"])
@pytest.mark.parametrize("form", FORMS)
def test_grouped_mm_takes_torch_offsets(form: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, path)
    a, b = bf16_operands(form, seed=2)
    offs = torch.tensor(np.cumsum(SIZES), dtype=torch.int32)
    expected = grouped(a, b, form=form, groups=len(SIZES), group_sizes=SIZES)["out"]
    for check in (True, False):
        assert torch.equal(grouped_mm(a, b, offs, form=form, check_offsets=check), expected)


@pytest.mark.parametrize("path", ["torch", "triton"])
def test_all_groups_empty_and_single_rows(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PATH_ENV, path)
    empty = grouped(
        torch.zeros((0, 8), dtype=torch.bfloat16), torch.ones((2, 8, 3), dtype=torch.bfloat16),
        form="2d_3d", groups=2, group_sizes=[0, 0],
    )["out"]  # fmt: skip
    assert empty.shape == (0, 3)
    zero_k = grouped(
        torch.zeros((2, 0), dtype=torch.bfloat16), torch.zeros((0, 3), dtype=torch.bfloat16),
        form="2d_2d", groups=2, group_sizes=[0, 0],
    )["out"]  # fmt: skip
    assert zero_k.shape == (2, 2, 3) and not zero_k.float().any()
    a = torch.tensor([[2.0] * 8, [3.0] * 8], dtype=torch.bfloat16)
    b = torch.stack([torch.full((8, 1), 1.0), torch.full((8, 1), 0.5)]).to(torch.bfloat16)
    out = grouped(a, b, form="2d_3d", groups=2, group_sizes=[1, 1])["out"]
    assert out.float().flatten().tolist() == [16.0, 12.0]


@pytest.mark.parametrize(
    ("offs", "fragments"),
    [
        ([5, 3, 26, 66, 82], ["offs[1]=3 < offs[0]=5", "non-decreasing", "group 1 would have -2"]),
        ([21, 21, 26, 66, 81], ["offs[-1]=81", "a.shape[0] (rows) = 82"]),
        ([-1, 21, 26, 66, 82], ["offs[0]=-1 < 0", "group 0 would have -1"]),
    ],
)
def test_bad_offsets_are_named(offs: list[int], fragments: list[str]) -> None:
    a, b = bf16_operands("2d_3d")
    with pytest.raises(ValueError) as error:
        grouped_mm(a, b, torch.tensor(offs, dtype=torch.int32), form="2d_3d")
    assert all(fragment in str(error.value) for fragment in fragments), str(error.value)


def test_offsets_of_another_dtype_or_shape() -> None:
    a, b = bf16_operands("2d_3d")
    with pytest.raises(TypeError, match=r"offs\.dtype=int64, but offs must be int32"):
        grouped_mm(a, b, torch.tensor(np.cumsum(SIZES)), form="2d_3d")
    with pytest.raises(ValueError, match="offs must be 1-D"):
        grouped_mm(a, b, torch.tensor(np.cumsum(SIZES)[None], dtype=torch.int32), form="2d_3d")
    with pytest.raises(ValueError, match=r"b\.shape\[0\]=5, but it must be groups = 4"):
        grouped_mm(a, b, torch.tensor(np.cumsum(SIZES)[:4], dtype=torch.int32), form="2d_3d")


@pytest.mark.parametrize(
    ("kwargs", "a_shape", "b_shape", "error", "fragments"),
    [
        ({"form": "2d_3d", "groups": 2, "group_sizes": [3, -1]}, (2, 8), (2, 8, 1), ValueError,
         ["group_sizes[1]=-1", "group 1"]),
        ({"form": "2d_3d", "groups": 2, "group_sizes": [1, 2]}, (2, 8), (2, 8, 1), ValueError,
         ["a.shape[0]=2", "sum(group_sizes) = 3"]),
        ({"form": "2d_2d", "groups": 1, "group_sizes": [8]}, (1, 8), (4, 2), ValueError,
         ["b.shape[0]=4", "sum(group_sizes) = 8"]),
        ({"form": "3d_2d", "groups": 1, "group_sizes": [1]}, (8, 1), (8, 1), ValueError,
         ["form='3d_2d'", "a [groups, M, K]"]),
        ({"form": "2d_3d", "groups": 3, "group_sizes": [1, 1]}, (2, 8), (3, 8, 1), ValueError, ["2 sizes"]),
        ({"form": "3d_3d", "groups": 1, "group_sizes": [1]}, (1, 8), (1, 8, 1), ValueError, ["form='3d_3d'"]),
    ],
)  # fmt: skip
def test_grouped_bad_arguments_match_the_reference(
    kwargs: dict, a_shape: tuple[int, ...], b_shape: tuple[int, ...], error: type, fragments: list[str]
) -> None:
    with pytest.raises(error) as caught:
        grouped(torch.ones(a_shape, dtype=torch.bfloat16), torch.ones(b_shape, dtype=torch.bfloat16), **kwargs)
    assert all(fragment in str(caught.value) for fragment in fragments), str(caught.value)
    with pytest.raises(error) as caught:
        reference.gemm.grouped(np.ones(a_shape, dtype=np.float32), np.ones(b_shape, dtype=np.float32), **kwargs)
    assert all(fragment in str(caught.value) for fragment in fragments), str(caught.value)


def test_grouped_operands_of_another_dtype() -> None:
    with pytest.raises(TypeError, match=r"a\.dtype=float32, but a must be bfloat16"):
        grouped(
            torch.ones((1, 8)), torch.ones((1, 8, 1), dtype=torch.bfloat16), form="2d_3d", groups=1, group_sizes=[1]
        )


# -- gemm.scaled ------------------------------------------------------------------------------------
def fp8_values(rows: int, k: int, fmt: torch.dtype, seed: int) -> torch.Tensor:
    """float32 values of ``fmt``."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn((rows, k), generator=generator) * 4).to(fmt).float()


def scale_shape(scaling: str, rows: int, k: int) -> tuple[int, int]:
    return {"tensorwise": (1, 1), "rowwise": (rows, 1), "1x128": (rows, -(-k // 128)),
            "128x128": (-(-rows // 128), -(-k // 128))}[scaling]  # fmt: skip


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize(
    ("scaling_a", "scaling_b"),
    [("tensorwise", "tensorwise"), ("rowwise", "rowwise"), ("1x128", "128x128"), ("1x128", "1x128"),
     ("128x128", "1x128"), ("128x128", "128x128"), ("rowwise", "1x128")],
)  # fmt: skip
def test_scaled_dequantize_then_matmul_within_the_bound(scaling_a: str, scaling_b: str, out_dtype: str) -> None:
    m, n, k = 131, 144, 300  # ragged 128-blocks in every direction
    a = fp8_values(m, k, torch.float8_e4m3fn, 0)
    b = fp8_values(n, k, torch.float8_e5m2, 1)
    generator = torch.Generator().manual_seed(2)
    scale_a = torch.rand(scale_shape(scaling_a, m, k), generator=generator) + 0.5
    scale_b = torch.rand(scale_shape(scaling_b, n, k), generator=generator) + 0.5
    params = {"scaling_a": scaling_a, "scaling_b": scaling_b, "format_a": "float8_e4m3fn",
              "format_b": "float8_e5m2", "out_dtype": out_dtype}  # fmt: skip
    out = scaled(a, b, scale_a, scale_b, **params)["out"]
    ref = reference.gemm.scaled(a.numpy(), b.numpy(), scale_a.numpy(), scale_b.numpy(), **params)
    assert out.dtype == torch.float32 and out.shape == (m, n)
    rtol = 0.00785 if out_dtype == "bfloat16" else 2.0**-21  # specs/gemm/scaled.yaml
    diff = np.abs(out.numpy() - ref["out"])
    assert (diff <= rtol * np.abs(ref["out"]) + 2.0**-9 * ref["abs_dot"]).all()
    # float32 products and sums of K = 300: far inside the bound, which is sized for FP8 tensor cores
    assert (diff <= rtol * np.abs(ref["out"]) + 2.0**-14 * ref["abs_dot"]).all()
    if out_dtype == "bfloat16":
        assert torch.equal(out, out.to(torch.bfloat16).float())


@pytest.mark.parametrize(
    ("kwargs", "shapes", "error", "fragments"),
    [
        ({"scaling_a": "rowwise", "scaling_b": "rowwise"}, ((2, 16), (16, 16), (1, 1), (16, 1)), ValueError,
         ["scale_a.shape=(1, 1)", "scaling_a='rowwise'"]),
        ({"scaling_a": "tensorwise", "scaling_b": "tensorwise"}, ((1, 16), (16, 32), (1, 1), (1, 1)), ValueError,
         ["a.shape=(1, 16)", "b.shape=(16, 32)"]),
        ({"scaling_a": "tensorwise", "scaling_b": "colwise"}, ((1, 16), (16, 16), (1, 1), (1, 1)), ValueError,
         ["scaling_b='colwise'"]),
    ],
)  # fmt: skip
def test_scaled_bad_arguments_match_the_reference(
    kwargs: dict, shapes: tuple, error: type, fragments: list[str]
) -> None:
    a_shape, b_shape, sa_shape, sb_shape = shapes
    tensors = (torch.zeros(a_shape), torch.zeros(b_shape),
               torch.ones(sa_shape), torch.ones(sb_shape))  # fmt: skip
    with pytest.raises(error) as caught:
        scaled(*tensors, **kwargs)
    assert all(fragment in str(caught.value) for fragment in fragments), str(caught.value)
    with pytest.raises(error) as caught:
        reference.gemm.scaled(*(t.numpy() for t in tensors), **kwargs)
    assert all(fragment in str(caught.value) for fragment in fragments), str(caught.value)


def test_scaled_operands_and_scales_of_another_dtype_or_outside_the_format() -> None:
    row, one = torch.zeros((1, 16)), torch.ones((1, 1))
    with pytest.raises(TypeError, match=r"scale_a\.dtype=float64, but scale_a must be float32"):
        scaled(row, row, one.double(), one, scaling_a="tensorwise", scaling_b="tensorwise")
    with pytest.raises(TypeError, match=r"b\.dtype=uint8, but b must be float32"):
        scaled(row, row.to(torch.uint8), one, one, scaling_a="tensorwise", scaling_b="tensorwise")
    bad = row.clone()
    bad[0, 2] = 0.3
    for fn, array in ((scaled, lambda t: t), (reference.gemm.scaled, lambda t: t.numpy())):
        with pytest.raises(ValueError, match=r"a\[0, 2\]=0.30000001192092896, but a must hold float8_e4m3fn values"):
            fn(array(bad), array(row), array(one), array(one), scaling_a="tensorwise", scaling_b="tensorwise")
