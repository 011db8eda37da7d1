"""Strategies and value classes stay inside the spec's domain and reach its boundaries."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.carriers import bits_to_carrier
from conformance.registry import load_specs
from conformance.strategies import boundary_cases, case_strategy
from conformance.values import boundary_pool

(INTERLEAVE,) = load_specs("glu.interleave")
(CAST,) = load_specs("cast.fp8")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_random_cases_honour_dims_params_and_dtypes(data):
    case = data.draw(case_strategy(INTERLEAVE, {}))
    k = case.params["block_size"]
    w = case.inputs["w"]
    assert 1 <= k <= 8
    assert w.dtype in ("float32", "bfloat16", "float16", "uint8")
    assert w.shape[0] % (2 * k) == 0 and w.shape[0] <= 48
    assert 1 <= len(w.shape) <= 3 and all(1 <= d <= 5 for d in w.shape[1:])


def test_boundary_cases_include_empty_and_range_extremes():
    cases = list(boundary_cases(INTERLEAVE, {}))
    assert {c.params["block_size"] for c in cases} == {1, 4, 8}
    assert any(c.inputs["w"].shape[0] == 0 for c in cases)
    assert all(c.inputs["w"].shape[0] % (2 * c.params["block_size"]) == 0 for c in cases)


def test_midpoint_pool_holds_every_e4m3_midpoint_and_its_float32_neighbours():
    pool = bits_to_carrier(boundary_pool({"class": "midpoints", "format": "float8_e4m3fn"}, "float32"), "float32")
    for v in (464.0, 0.0009765625, 1.0625):
        assert v in pool and -v in pool
        assert np.nextafter(np.float32(v), np.float32(0)) in pool
        assert np.nextafter(np.float32(v), np.float32(np.inf)) in pool


def test_special_pool_has_signed_zeros_infinities_nans_and_format_landmarks():
    bits = boundary_pool({"class": "special", "format": "float8_e5m2"}, "float32")
    values = bits_to_carrier(bits, "float32")
    assert {0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001} <= set(bits.tolist())
    assert np.isnan(values).sum() >= 4
    assert 57344.0 in values and 61440.0 in values  # max and max + half-ulp (the overflow boundary)


def test_sixteen_bit_wide_pools_are_exhaustive():
    for dtype in ("bfloat16", "float16"):
        assert np.array_equal(np.sort(boundary_pool({"class": "wide"}, dtype)), np.arange(1 << 16))


def test_elementwise_boundary_cases_cover_each_dtype_and_class():
    labels = {c.label for c in boundary_cases(CAST, CAST.with_defaults({}))}
    for dtype in ("float32", "bfloat16", "float16"):
        for cls in ("normal", "wide", "special", "codes", "midpoints"):
            assert f"boundary:{cls}/{dtype}" in labels


def test_size_classes_plant_a_lone_extreme_late_in_a_tensor_of_several_chunks():
    """``quant.nvfp4``'s size class: 128 x 128 (past the random cases' max of 64), the largest magnitude exactly
    once, at the last element, the middle one and the first of the second 4,096-element chunk."""
    (nvfp4,) = load_specs("quant.nvfp4")
    cases = [c for c in boundary_cases(nvfp4, nvfp4.with_defaults({})) if "lone_extreme" in c.label]
    places = set()
    for case in cases:
        x = case.inputs["x"]
        assert x.shape == (128, 128)
        magnitudes = np.abs(bits_to_carrier(x.bits, x.dtype).astype(np.float64)).reshape(-1)
        (where,) = np.flatnonzero(magnitudes == magnitudes.max())
        places.add(int(where))
    assert places == {128 * 128 - 1, 128 * 64, 4096}


def test_a_size_class_must_name_declared_dims(tmp_path):
    from conformance.errors import SpecError
    from conformance.registry import load_spec

    (nvfp4,) = load_specs("quant.nvfp4")
    path = tmp_path / "quant" / "nvfp4.yaml"
    path.parent.mkdir()
    path.write_text(nvfp4.path.read_text().replace("dims: {M: 128, K: 128}", "dims: {M: 128, Q: 128}"))
    with pytest.raises(SpecError, match=r"nvfp4.yaml:\d+: inputs.x.values.\d+.dims: got \['Q'\]"):
        load_spec(path)


def test_array_classes_leave_empty_arrays_alone():
    from conformance.values import apply_block_class

    for shape in [(0,), (0, 5), (5, 0)]:
        for vc in ({"class": "lone_extreme"}, {"class": "outlier_blocks", "block": 2}, {"class": "zero_blocks"}):
            empty = np.zeros(shape, np.uint32)
            assert apply_block_class(empty, "float32", vc, np.random.default_rng(0)).shape == shape


def _nvfp4_targets(b: np.ndarray, amax: np.float32, rule: str) -> np.ndarray:
    """The float32 block-scale target of quant.nvfp4's ``scale_rule`` (the spec's doc), before its E4M3 rounding."""
    f32 = np.float32
    if rule == "te":
        return b * (f32(f32(2688) / amax) * f32(1 / 6))
    pts = amax / f32(2688) if rule == "torchao" else amax * f32(1 / 2688)
    return (b / f32(6) if rule == "torchao" else b * f32(1 / 6)) / pts


@pytest.mark.parametrize("rule", ["te", "torchao", "torchao_cuda"])
def test_scale_decision_points_put_nvfp4_block_targets_next_to_every_e4m3_midpoint(rule):
    """float32 input: every E4M3 rounding midpoint mu gets block targets below, above and within an ulp of it
    (the block amaxes are 3 ulps either side of fl32(mu / c)), under a full-mantissa S_enc; the tensor amax
    occurs once; blocks along columns for ``axis: 0``; a given amax equals the data's."""
    from conformance.values import _e4m3_midpoints

    (nvfp4,) = load_specs("quant.nvfp4")
    fixed = nvfp4.with_defaults({"scale_rule": rule, "usage": "both", "amax_source": "given"})
    cases = [c for c in boundary_cases(nvfp4, fixed) if "scale_decision_points/float32" in c.label]
    assert len(cases) == 2
    midpoints = _e4m3_midpoints().astype(np.float32)
    for case in cases:
        x = bits_to_carrier(case.inputs["x"].bits, "float32")
        blocks = np.abs(x if case.inputs["x"].shape == (64, 224) else x.T).reshape(-1, 16)
        amax = np.float32(np.abs(x).max())
        assert np.count_nonzero(np.abs(x) == amax) == 1 and np.float32(2688) / amax != 2 ** np.round(
            np.log2(2688 / amax)
        )
        given = [case.inputs[name].bits.view(np.float32)[0] for name in ("amax", "columnwise_amax")]
        assert given == [amax, amax]
        targets = _nvfp4_targets(blocks.max(axis=1)[:-1], amax, rule)
        nearest = np.searchsorted(midpoints, targets).clip(1, len(midpoints) - 1)
        below = np.abs(targets - midpoints[nearest - 1]) < np.abs(targets - midpoints[nearest])
        nearest = np.where(below, nearest - 1, nearest)
        ulps = targets.view(np.int32).astype(np.int64) - midpoints[nearest].view(np.int32).astype(np.int64)
        assert np.abs(ulps).max() <= 7  # 3 ulps of b are at most 6 of the target (c < 1 moves the binade)
        for mu in range(len(midpoints)):
            near = ulps[nearest == mu]
            assert near.min() < 0 < near.max() and np.abs(near).min() <= 1, (mu, sorted(set(near)))


def test_scale_decision_points_in_bfloat16_hit_every_e4m3_midpoint_exactly():
    """16-bit input cannot reach a float32 ulp of mu / c: the tensor amax is 448 (S_enc = 6, c = 1 under te),
    so the block amaxes are the midpoints themselves (exact ties) and bfloat16 neighbours either side."""
    from conformance.values import _e4m3_midpoints

    (nvfp4,) = load_specs("quant.nvfp4")
    cases = [c for c in boundary_cases(nvfp4, nvfp4.with_defaults({})) if "scale_decision_points/bfloat16" in c.label]
    assert len(cases) == 2
    for case in cases:
        x = np.abs(bits_to_carrier(case.inputs["x"].bits, "bfloat16"))
        block_amax = (x if x.shape == (64, 224) else x.T).reshape(-1, 16).max(axis=1)
        assert x.max() == 448 and np.count_nonzero(x == 448) == 1
        assert set(_e4m3_midpoints().astype(np.float32)) <= set(block_amax)
        assert np.count_nonzero(block_amax < 0.999 * np.float32(_e4m3_midpoints()[-1])) > 800


@pytest.mark.parametrize("contract", ["quant.mx", "quant.nvfp4", "quant.fp8_block"])
def test_block_scaled_contracts_have_all_subnormal_boundary_cases(contract):
    """A computed amax over blocks whose every element is subnormal or 0 (float32 and bfloat16 input)."""
    (spec,) = load_specs(contract)
    found = set()
    for case in boundary_cases(spec, spec.with_defaults({})):
        x = case.inputs["x"]
        if x.dtype not in ("float32", "bfloat16") or x.bits.size == 0:
            continue
        with np.errstate(invalid="ignore"):  # NaN elements of other classes
            values = np.abs(bits_to_carrier(x.bits, x.dtype).astype(np.float64))
        if np.all(np.isfinite(values)) and values.max() > 0 and values.max() < 2.0**-126:
            found.add(x.dtype)
    assert found == {"float32", "bfloat16"} or (contract == "quant.fp8_block" and found), found
