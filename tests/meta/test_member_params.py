"""Member params (one int per member of a grouped tensor), ``sum(...)`` over members, and filled literals."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.errors import SpecError
from conformance.registry import load_spec, load_specs
from conformance.strategies import boundary_cases, case_strategy, literal_case

(LAYOUT,) = load_specs("group.layout")
GOOD = Path(__file__).parents[2] / "specs" / "group" / "layout.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "group" / "layout.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_member_params_are_not_rows_and_default_to_lists():
    assert LAYOUT.member_params == ("first_dims", "last_dims")
    assert all("first_dims" not in combo for combo in LAYOUT.param_combinations())
    defaults = LAYOUT.with_defaults({})
    assert defaults["first_dims"] == [2, 1, 0] and defaults["num_members"] == 3


def test_sums_run_over_the_members_elementwise():
    params = {"first_dims": (2, 0, 5), "last_dims": (3, 4, 1), "recipe": "none"}
    assert LAYOUT.resolve("[sum(first_dims * last_dims)]", params) == "[11]"
    assert LAYOUT.resolve("sum(round_up(first_dims, 4)) + sum(last_dims // 2)", params) == "12 + 3"
    assert LAYOUT.resolve("num_members + 1", params) == "num_members + 1"  # untouched without sum
    with pytest.raises(SpecError, match="one length"):
        LAYOUT.resolve("sum(first_dims * last_dims)", {"first_dims": [1, 2], "last_dims": [1]})


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_cases_draw_one_value_per_member_within_range_and_step(data):
    fixed = {"recipe": "mxfp8", "block": "1d"}
    case = data.draw(case_strategy(LAYOUT, fixed))
    n = case.params["num_members"]
    for name in ("first_dims", "last_dims"):
        values = case.params[name]
        assert len(values) == n and all(0 <= v <= 96 and v % 32 == 0 for v in values)
    total = sum(m * k for m, k in zip(case.params["first_dims"], case.params["last_dims"], strict=True))
    assert case.inputs["data"].shape == (total,)


def test_boundary_cases_cover_every_way_the_shapes_vary_and_an_empty_member():
    kinds, empty = set(), False
    for case in boundary_cases(LAYOUT, LAYOUT.with_defaults({"recipe": "none", "block": "none"})):
        first, last = case.params["first_dims"], case.params["last_dims"]
        kinds.add((len(set(first)) > 1, len(set(last)) > 1))
        empty |= any(m * k == 0 for m, k in zip(first, last, strict=True)) and any(
            m * k for m, k in zip(first, last, strict=True)
        )
    assert kinds == {(False, False), (True, False), (False, True), (True, True)}
    assert empty


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ("    range: [0, 96]\n", "", "'range' is a dependency of 'members'"),
        ("    default: [2, 1, 0]\n", "    default: [2, 1]\n", "expected a list of 3 ints"),
        ("    default: [2, 1, 0]\n", "    default: [2, 1, 200]\n", "within [0, 96]"),
        ('min: "sum(first_dims * last_dims)"', 'min: "sum(num_members)"', "reads no member param"),
        ('min: "sum(first_dims * last_dims)"', 'min: "sum(first_dims, last_dims)"', "sum takes one expression"),
        ("    members: num_members\n", "    members: num_member\n", "unknown names ['num_member']"),
    ],
)
def test_malformed_member_params_are_spec_errors(tmp_path, old, new, fragment):
    text = GOOD.read_text()
    assert old in text
    with pytest.raises(SpecError, match=r"first_dims|dims\.T|params") as info:
        load_spec(_write(tmp_path, text.replace(old, new, 1)))
    assert fragment in str(info.value)


def test_the_member_count_is_a_param_declared_before(tmp_path):
    text = GOOD.read_text()
    count = (
        "  num_members:\n    range: [1, 4]\n    default: 3\n"
        "    doc: The number of members (TE num_tensors), at least 1.\n"
    )
    assert count in text
    moved = text.replace(count, "", 1).replace("\nconstraints:", count + "\nconstraints:", 1)
    with pytest.raises(SpecError, match=r"params\.first_dims\.members.*unknown names \['num_members'\]"):
        load_spec(_write(tmp_path, moved))


def test_multiple_of_needs_members(tmp_path):
    text = GOOD.read_text().replace(
        "  num_members:\n    range: [1, 4]\n", "  num_members:\n    range: [1, 4]\n    multiple_of: 2\n"
    )
    with pytest.raises(SpecError, match="num_members"):
        load_spec(_write(tmp_path, text))


def test_a_literal_with_one_value_and_a_shape_fills_the_shape():
    case = literal_case(
        LAYOUT, LAYOUT.with_defaults({}), {"data": {"dtype": "uint8", "shape": [2, 3], "bits": [7]}}, "x"
    )
    assert case.inputs["data"].bits.tolist() == [[7, 7, 7], [7, 7, 7]]
