"""Spec features the blockwise recipes brought: ``$param`` input dtypes, conditional expressions, palettes."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.errors import SpecError
from conformance.expr import evaluate
from conformance.registry import load_spec, load_specs
from conformance.strategies import boundary_cases, case_strategy

GOOD = Path(__file__).parents[2] / "specs" / "glu" / "interleave.yaml"
(BLOCK,) = load_specs("quant.fp8_block")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "glu" / "interleave.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _with_dtype_param(values: str) -> str:
    text = GOOD.read_text()
    text = text.replace("params:\n", f"params:\n  w_dtype:\n    values: {values}\n    default: float16\n", 1)
    return text.replace("dtypes: [float32, bfloat16, float16, uint8]", "dtypes: [$w_dtype]", 1)


def test_conditional_expressions_evaluate_only_the_branch_taken():
    assert evaluate("[1, K] if block == '1x128' else [K, 1]", {"block": "1x128", "K": 3}) == [1, 3]
    assert evaluate("missing if False else 7", {}) == 7
    assert evaluate("round_up(M if rowwise else K, 4)", {"rowwise": False, "M": 1, "K": 5}) == 8


def test_a_dtype_param_gives_every_case_of_a_row_its_dtype(tmp_path):
    spec = load_spec(_write(tmp_path, _with_dtype_param("[float16, bfloat16]")))
    assert [c["w_dtype"] for c in spec.param_combinations()] == ["float16", "bfloat16"]
    for dtype in ("float16", "bfloat16"):
        fixed = {"w_dtype": dtype}
        assert {c.inputs["w"].dtype for c in boundary_cases(spec, spec.with_defaults(fixed))} == {dtype}


def test_a_dtype_param_must_name_dtypes(tmp_path):
    with pytest.raises(SpecError, match=r"inputs\.w\.dtypes\.0: got '\$w_dtype', expected a dtype or a \$param"):
        load_spec(_write(tmp_path, _with_dtype_param("[float16, e4m3]")))
    text = GOOD.read_text().replace("dtypes: [float32, bfloat16, float16, uint8]", "dtypes: [$nothing]", 1)
    with pytest.raises(SpecError, match=r"inputs\.w\.dtypes\.0"):
        load_spec(_write(tmp_path, text))


@settings(max_examples=15, deadline=None)
@given(st.data())
def test_palette_arrays_keep_dims_dtype_and_draw_few_values(data):
    fixed = {"x_dtype": "float32", "block": "1x128", "format": "float8_e4m3fn", "power_2_scale": True}
    fixed.update(epsilon=0.0, usage="both")
    case = data.draw(case_strategy(BLOCK, fixed))
    x = case.inputs["x"]
    assert x.dtype == "float32"
    assert x.shape[-1] % 128 <= 5 and x.shape[-2] % 128 <= 5
    if x.bits.size > 256:  # a palette of 256 values (before the block classes act)
        assert len(set(x.bits.reshape(-1).tolist())) <= 256 + x.bits.size // 128 + 1


def test_block_spec_boundary_cases_reach_two_full_blocks_and_ragged_tails():
    fixed = BLOCK.with_defaults({})
    shapes = {c.inputs["x"].shape for c in boundary_cases(BLOCK, fixed)}
    assert (0, 0) in shapes and (129, 129) in shapes and (1, 259, 259) in shapes
