"""``reference.gemm``: hand-computed grouped and scaled products, the single rounding, empty groups, abs_dot,
argument errors, and torch's CPU ops as a second oracle within the specs' bounds.

Oracles: small integer matrices whose products are worked out by hand or by an explicit Python loop over
the contract's formula (independent of the reference's vectorized block indexing); ``torch._grouped_mm``
and ``torch._scaled_mm`` on the CPU (torch >= 2.9 / 2.13), which must land within the spec's bound.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from reference.gemm import FORMS, grouped, scaled

RNG = np.random.default_rng(20261122)


def bf16(values: object) -> np.ndarray:
    """float32 carriers of bfloat16 values (``values`` must be bfloat16 values)."""
    return np.asarray(values, dtype=np.float32)


def random_bf16(shape: tuple[int, ...]) -> np.ndarray:
    return torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))).to(torch.bfloat16).float().numpy()


# -- group.gemm: hand-computed forms ----------------------------------------------------------------
def test_2d_3d_multiplies_each_group_of_rows_by_its_matrix() -> None:
    a = bf16([[1, 2], [3, 4], [5, 6]])
    b = bf16([[[1, 0], [0, 1]], [[9, 9], [9, 9]], [[0, 1], [2, 0]]])
    result = grouped(a, b, form="2d_3d", groups=3, group_sizes=[1, 0, 2])
    np.testing.assert_array_equal(result["out"], [[1, 2], [8, 3], [12, 5]])
    np.testing.assert_array_equal(result["abs_dot"], [[1, 2], [8, 3], [12, 5]])


def test_2d_2d_splits_k_and_an_empty_group_gives_zeros() -> None:
    a = bf16([[1, 2, 3], [4, 5, 6]])
    b = bf16([[1, 1], [2, 0], [0, 3]])
    result = grouped(a, b, form="2d_2d", groups=3, group_sizes=[2, 0, 1])
    np.testing.assert_array_equal(result["out"][0], [[5, 1], [14, 4]])  # a[:, :2] @ b[:2]
    np.testing.assert_array_equal(result["out"][1], np.zeros((2, 2)))
    np.testing.assert_array_equal(result["out"][2], [[0, 9], [0, 18]])  # a[:, 2:] @ b[2:]


def test_3d_2d_gives_each_group_of_columns_its_own_a() -> None:
    a = bf16([[[1, 0]], [[0, 2]]])  # [G=2, M=1, K=2]
    b = bf16([[1, 2, 3], [4, 5, 6]])  # [K=2, S=3]
    result = grouped(a, b, form="3d_2d", groups=2, group_sizes=[1, 2])
    np.testing.assert_array_equal(result["out"], [[1, 10, 12]])


def test_abs_dot_sums_magnitudes_where_out_cancels() -> None:
    a = bf16([[1, -1]])
    b = bf16([[[3], [3]]])
    result = grouped(a, b, form="2d_3d", groups=1, group_sizes=[1])
    assert result["out"][0, 0] == 0 and result["abs_dot"][0, 0] == 6


def test_the_exact_sum_is_rounded_once_to_bfloat16() -> None:
    """1 + 2**-8 + 2**-30 rounds up to 1 + 2**-7; a float32 sum would first drop 2**-30 and tie to 1.0."""
    a = bf16([[1.0, 2.0**-8, 2.0**-30]])
    b = bf16([[[1.0], [1.0], [1.0]]])
    out = grouped(a, b, form="2d_3d", groups=1, group_sizes=[1])["out"]
    assert out[0, 0] == 1.0 + 2.0**-7
    assert np.float32(1.0) + np.float32(2.0**-8) + np.float32(2.0**-30) == np.float32(1.0 + 2.0**-8)


def test_overflow_rounds_to_infinity_and_nan_propagates() -> None:
    big = float(torch.finfo(torch.bfloat16).max)
    a = bf16([[big, big], [np.nan, 1.0]])
    b = bf16([[[1.0], [1.0]]])
    out = grouped(a, b, form="2d_3d", groups=1, group_sizes=[2])["out"]
    assert out[0, 0] == np.inf and np.isnan(out[1, 0])


@pytest.mark.parametrize("form", FORMS)
def test_all_groups_empty(form: str) -> None:
    shapes = {"2d_3d": ((0, 4), (2, 4, 3)), "2d_2d": ((2, 0), (0, 3)), "3d_2d": ((2, 2, 4), (4, 0))}
    a, b = (np.zeros(shape, dtype=np.float32) for shape in shapes[form])
    out = grouped(a, b, form=form, groups=2, group_sizes=[0, 0])["out"]
    assert out.shape == {"2d_3d": (0, 3), "2d_2d": (2, 2, 3), "3d_2d": (2, 0)}[form]
    assert not out.any()


@pytest.mark.parametrize("form", FORMS)
def test_grouped_equals_a_loop_of_products(form: str) -> None:
    sizes = [3, 0, 5, 2]
    shapes = {"2d_3d": ((10, 6), (4, 6, 5)), "2d_2d": ((4, 10), (10, 5)), "3d_2d": ((4, 3, 6), (6, 10))}
    a, b = (random_bf16(shape) for shape in shapes[form])
    out = grouped(a, b, form=form, groups=4, group_sizes=sizes)["out"]
    ends = np.cumsum(sizes)
    for g, (s, e) in enumerate(zip([0, *ends[:-1]], ends, strict=True)):
        if form == "2d_3d":
            expected = a[s:e].astype(np.float64) @ b[g]
            got = out[s:e]
        elif form == "2d_2d":
            expected = a[:, s:e].astype(np.float64) @ b[s:e]
            got = out[g]
        else:
            expected = a[g].astype(np.float64) @ b[:, s:e]
            got = out[:, s:e]
        expected_bf16 = torch.from_numpy(expected).to(torch.bfloat16).float().numpy()
        np.testing.assert_array_equal(got, expected_bf16)


# -- group.gemm: torch's CPU op as a second oracle --------------------------------------------------
@pytest.mark.parametrize("form", FORMS)
def test_torch_grouped_mm_on_cpu_is_within_the_bound(form: str) -> None:
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("torch has no _grouped_mm")
    sizes = [16, 0, 8, 24]
    shapes = {"2d_3d": ((48, 64), (4, 64, 32)), "2d_2d": ((8, 48), (48, 32)), "3d_2d": ((4, 8, 64), (64, 48))}
    a, b = (random_bf16(shape) for shape in shapes[form])
    ref = grouped(a, b, form=form, groups=4, group_sizes=sizes)
    offs = torch.tensor(np.cumsum(sizes), dtype=torch.int32)
    got = torch._grouped_mm(torch.from_numpy(a).bfloat16(), torch.from_numpy(b).bfloat16(), offs=offs).float().numpy()
    allowed = 0.00785 * np.abs(ref["out"]) + 2.0**-16 * ref["abs_dot"]  # specs/group/gemm.yaml
    assert (np.abs(got - ref["out"]) <= allowed).all()


# -- group.gemm: errors -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "a_shape", "b_shape", "fragments"),
    [
        ({"form": "2d_3d", "groups": 2, "group_sizes": [3, -1]}, (2, 4), (2, 4, 1), ["group_sizes[1]=-1", "group 1"]),
        ({"form": "2d_3d", "groups": 2, "group_sizes": [1, 2]}, (2, 4), (2, 4, 1), ["a.shape[0]=2", "= 3"]),
        ({"form": "2d_3d", "groups": 2, "group_sizes": [1, 1]}, (2, 4), (3, 4, 1), ["b.shape[0]=3", "groups = 2"]),
        ({"form": "2d_3d", "groups": 1, "group_sizes": [2]}, (2, 4), (1, 5, 1), ["a.shape[1]=4", "(K) = 5"]),
        ({"form": "2d_2d", "groups": 1, "group_sizes": [4]}, (1, 4), (3, 2), ["b.shape[0]=3", "sum(group_sizes)"]),
        ({"form": "3d_2d", "groups": 2, "group_sizes": [1, 1]}, (1, 1, 4), (4, 2), ["a.shape[0]=1", "groups = 2"]),
        ({"form": "3d_2d", "groups": 1, "group_sizes": [1]}, (4, 1), (4, 1), ["form='3d_2d'", "a [groups, M, K]"]),
        ({"form": "2d_3d", "groups": 2, "group_sizes": [1]}, (1, 4), (2, 4, 1), ["1 sizes", "groups=2"]),
        ({"form": "2d_3d", "groups": 0, "group_sizes": []}, (0, 4), (0, 4, 1), ["groups=0", ">= 1"]),
        ({"form": "4d", "groups": 1, "group_sizes": [1]}, (1, 4), (1, 4, 1), ["form='4d'", "'2d_3d'"]),
    ],
)
def test_bad_groups_and_shapes_are_named(
    kwargs: dict, a_shape: tuple[int, ...], b_shape: tuple[int, ...], fragments: list[str]
) -> None:
    with pytest.raises(ValueError) as error:
        grouped(np.ones(a_shape, dtype=np.float32), np.ones(b_shape, dtype=np.float32), **kwargs)
    assert all(fragment in str(error.value) for fragment in fragments), str(error.value)


def test_operands_that_are_not_bfloat16_values_are_a_type_error() -> None:
    with pytest.raises(TypeError, match="a of dtype float32 with values that are not bfloat16"):
        grouped(bf16([[1.0 + 2.0**-12]]), bf16([[[1.0]]]), form="2d_3d", groups=1, group_sizes=[1])
    with pytest.raises(TypeError, match="b of dtype float64"):
        grouped(bf16([[1.0]]), np.ones((1, 1, 1)), form="2d_3d", groups=1, group_sizes=[1])


# -- gemm.scaled ------------------------------------------------------------------------------------
def scaled_loop(
    a: np.ndarray, b: np.ndarray, scale_a: np.ndarray, scale_b: np.ndarray, blocks: tuple[tuple[int, int], ...]
) -> np.ndarray:
    """``sum_k A[m, k] B[n, k]`` element by element, with each scale looked up by its block (float64)."""
    (ra, ca), (rb, cb) = blocks
    out = np.zeros((a.shape[0], b.shape[0]))
    for m in range(a.shape[0]):
        for n in range(b.shape[0]):
            out[m, n] = math.fsum(
                float(a[m, k]) * float(scale_a[m // ra, k // ca]) * float(b[n, k]) * float(scale_b[n // rb, k // cb])
                for k in range(a.shape[1])
            )  # fmt: skip
    return out


def random_e4m3(rows: int, k: int) -> np.ndarray:
    """E4M3 values (float32) of moderate size."""
    values = RNG.standard_normal((rows, k))
    return torch.from_numpy(values).float().to(torch.float8_e4m3fn).float().numpy()


def powers_of_two(shape: tuple[int, int]) -> np.ndarray:
    return np.exp2(RNG.integers(-3, 4, shape)).astype(np.float32)


@pytest.mark.parametrize(
    ("scaling_a", "scaling_b", "m", "n", "k"),
    [
        ("tensorwise", "tensorwise", 3, 4, 32),
        ("rowwise", "rowwise", 5, 3, 48),
        ("1x128", "128x128", 3, 130, 300),
        ("1x128", "1x128", 4, 3, 256),
        ("128x128", "1x128", 131, 2, 129),
        ("128x128", "128x128", 129, 130, 257),
    ],
)
def test_scaled_matches_an_elementwise_loop(scaling_a: str, scaling_b: str, m: int, n: int, k: int) -> None:
    def block(scaling: str, rows: int) -> tuple[int, int]:
        return {"tensorwise": (rows, k), "rowwise": (1, k), "1x128": (1, 128), "128x128": (128, 128)}[scaling]

    (ra, ca), (rb, cb) = block(scaling_a, m), block(scaling_b, n)
    a, b = random_e4m3(m, k), random_e4m3(n, k)
    scale_a = powers_of_two((-(-m // ra), -(-k // ca)))
    scale_b = powers_of_two((-(-n // rb), -(-k // cb)))
    result = scaled(a, b, scale_a, scale_b, scaling_a=scaling_a, scaling_b=scaling_b, out_dtype="float32")
    expected = scaled_loop(a, b, scale_a, scale_b, ((ra, ca), (rb, cb)))
    np.testing.assert_array_equal(result["out"], expected.astype(np.float32))


def test_scaled_rounds_to_the_output_dtype_and_reports_abs_dot() -> None:
    """Row 0 sums to 1.5 + 2**-9: a float32 value, below half a bfloat16 ulp (2**-8) above 1.5."""
    a = np.array([[1, 1, 2.0**-9] + [0] * 13, [1, 1, 0] + [0] * 13], dtype=np.float32)
    b = np.array([[1, 0.5, 1] + [0] * 13], dtype=np.float32)
    scale = np.array([[1.0]], dtype=np.float32)
    for out_dtype, expected in (("float32", 1.5 + 2.0**-9), ("bfloat16", 1.5)):
        result = scaled(a, b, scale, scale, scaling_a="tensorwise", scaling_b="tensorwise", out_dtype=out_dtype)
        assert result["out"][0, 0] == expected and result["out"][1, 0] == 1.5
    negative = a.copy()
    negative[0, 1] = -1  # the sum cancels to 0.5 + 2**-9, abs_dot stays 1.5 + 2**-9
    result = scaled(negative, b, scale, scale, scaling_a="tensorwise", scaling_b="tensorwise", out_dtype="float32")
    assert result["out"][0, 0] == 0.5 + 2.0**-9 and result["abs_dot"][0, 0] == 1.5 + 2.0**-9


def test_scaled_nan_poisons_its_row_and_values_outside_the_format_are_named() -> None:
    a = np.ones((2, 16), dtype=np.float32)
    a[1, 3] = np.nan
    b = np.ones((2, 16), dtype=np.float32)
    scale = np.ones((1, 1), dtype=np.float32)
    out = scaled(a, b, scale, scale, scaling_a="tensorwise", scaling_b="tensorwise")["out"]
    assert (out[0] == 16).all() and np.isnan(out[1]).all()
    a[1, 3] = 512.0  # beyond E4M3 (448); E5M2 holds it
    with pytest.raises(ValueError, match=r"a\[1, 3\]=512.0, but a must hold float8_e4m3fn values"):
        scaled(a, b, scale, scale, scaling_a="tensorwise", scaling_b="tensorwise")
    scaled(a, b, scale, scale, scaling_a="tensorwise", scaling_b="tensorwise", format_a="float8_e5m2")


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("scaling", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("formats", [("float8_e4m3fn", "float8_e4m3fn"), ("float8_e5m2", "float8_e4m3fn")])
def test_torch_scaled_mm_on_cpu_is_within_the_bound(scaling: str, out_dtype: str, formats: tuple[str, str]) -> None:
    m, n, k = 7, 16, 64
    fp8 = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
    a = torch.randn(m, k).to(fp8[formats[0]])
    b = torch.randn(n, k).to(fp8[formats[1]])
    shape_a, shape_b = ((1, 1), (1, 1)) if scaling == "tensorwise" else ((m, 1), (n, 1))
    scale_a, scale_b = powers_of_two(shape_a), powers_of_two(shape_b)
    ref = scaled(
        a.float().numpy(), b.float().numpy(), scale_a, scale_b, scaling_a=scaling,
        scaling_b=scaling, format_a=formats[0], format_b=formats[1], out_dtype=out_dtype,
    )  # fmt: skip
    ta = torch.from_numpy(scale_a).reshape(()) if scaling == "tensorwise" else torch.from_numpy(scale_a)
    tb = torch.from_numpy(scale_b).reshape(()) if scaling == "tensorwise" else torch.from_numpy(scale_b).reshape(1, n)
    dtype = torch.bfloat16 if out_dtype == "bfloat16" else torch.float32
    got = torch._scaled_mm(a, b.t(), ta, tb, out_dtype=dtype).float().numpy()
    rtol = 0.00785 if out_dtype == "bfloat16" else 2.0**-21  # specs/gemm/scaled.yaml
    assert (np.abs(got - ref["out"]) <= rtol * np.abs(ref["out"]) + 2.0**-9 * ref["abs_dot"]).all()


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "fragments"),
    [
        (((2, 16), (16, 16), (1, 1), (16, 1)), {"scaling_a": "rowwise", "scaling_b": "rowwise"}, ValueError,
         ["scale_a.shape=(1, 1)", "scaling_a='rowwise'", "[2, 1]"]),
        (((2, 256), (16, 256), (2, 1), (1, 2)), {"scaling_a": "1x128", "scaling_b": "128x128"}, ValueError,
         ["scale_a.shape=(2, 1)", "[2, 2]"]),
        (((1, 16), (16, 32), (1, 1), (1, 1)), {"scaling_a": "tensorwise", "scaling_b": "tensorwise"}, ValueError,
         ["a.shape=(1, 16)", "b.shape=(16, 32)"]),
        (((1, 16), (16, 16), (1, 1), (1, 1)), {"scaling_a": "blockwise", "scaling_b": "tensorwise"}, ValueError,
         ["scaling_a='blockwise'"]),
        (((1, 16), (16, 16), (1, 1), (1, 1)), {"scaling_a": "tensorwise", "scaling_b": "tensorwise",
                                               "format_b": "float8_e4m3fnuz"}, ValueError, ["format_b="]),
        (((1, 16), (16, 16), (1, 1), (1, 1)), {"scaling_a": "tensorwise", "scaling_b": "tensorwise",
                                               "out_dtype": "float16"}, ValueError, ["out_dtype='float16'"]),
    ],
)  # fmt: skip
def test_scaled_bad_arguments_are_named(args: tuple, kwargs: dict, error: type, fragments: list[str]) -> None:
    a_shape, b_shape, sa_shape, sb_shape = args
    with pytest.raises(error) as caught:
        scaled(
            np.zeros(a_shape, dtype=np.float32), np.zeros(b_shape, dtype=np.float32),
            np.ones(sa_shape, dtype=np.float32), np.ones(sb_shape, dtype=np.float32), **kwargs,
        )  # fmt: skip
    assert all(fragment in str(caught.value) for fragment in fragments), str(caught.value)


def test_scaled_wrong_dtypes_are_type_errors() -> None:
    ones = np.ones((1, 1), dtype=np.float32)
    with pytest.raises(TypeError, match=r"a\.dtype=uint8"):
        scaled(np.zeros((1, 16), np.uint8), np.zeros((1, 16), np.float32), ones, ones, scaling_a="tensorwise",
               scaling_b="tensorwise")  # fmt: skip
    with pytest.raises(TypeError, match=r"scale_b\.dtype=float64"):
        scaled(np.zeros((1, 16), np.float32), np.zeros((1, 16), np.float32), ones, np.ones((1, 1)),
               scaling_a="tensorwise", scaling_b="tensorwise")  # fmt: skip
