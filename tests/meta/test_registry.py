"""Specs: every one loads and resolves; malformed ones are rejected with file, line and key."""

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import reference
from conformance.errors import SpecError
from conformance.expr import evaluate
from conformance.registry import load_spec, load_specs

GOOD = Path(__file__).parents[2] / "specs" / "glu" / "interleave.yaml"


def test_every_spec_loads_and_resolves_its_reference():
    specs = load_specs()
    assert {s.contract for s in specs} >= {"cast.fp8", "decode.fp8", "glu.interleave", "glu.deinterleave"}
    for spec in specs:
        assert callable(spec.reference_function())
        for combo in spec.param_combinations():
            assert spec.with_defaults(combo).keys() == spec.params.keys()


def test_every_public_reference_function_has_a_spec():
    contracts = {s.contract for s in load_specs()}
    for info in pkgutil.iter_modules(reference.__path__):
        if info.name == "formats":
            continue
        module = importlib.import_module(f"reference.{info.name}")
        for name in getattr(module, "__all__", []):
            if inspect.isfunction(getattr(module, name)):
                contract = f"{info.name}.{name.removesuffix('_')}"
                assert contract in contracts, f"reference.{info.name}.{name} has no spec"


def _write(tmp_path: Path, text: str, family: str = "glu", name: str = "interleave.yaml") -> Path:
    path = tmp_path / family / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ("range: [1, 8]", "range: sixteen", ":{line}: params.block_size.range: 'sixteen' is not of type 'array'"),
        ("    default: 4\n", "    default: 40\n", ":{line}: params.block_size.default: got 40, expected within [1, 8]"),
        ("kind: bitwise", "kind: bitwize", ":{line}: outputs.out.compare.kind: 'bitwize' is not one of"),
        ('multiple_of: "2 * block_size"', 'multiple_of: "2 * blocksize"', "dims.D0.multiple_of: expression"),
        ('multiple_of: "2 * block_size"', "multiple_of: \"__import__('os')\"", "the only functions are"),
        ("summary:", "summry:", "<top>: Additional properties are not allowed ('summry' was unexpected)"),
    ],
)
def test_malformed_spec_errors_name_file_line_key_and_expectation(tmp_path, old, new, fragment):
    text = GOOD.read_text()
    assert old in text
    path = _write(tmp_path, text.replace(old, new, 1))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    line = text[: text.index(old)].count("\n") + 1 + old[: len(old) - len(old.lstrip("\n"))].count("\n")
    assert str(path) in str(info.value)
    assert fragment.format(line=line) in str(info.value)


def test_spec_must_live_at_its_contract_path(tmp_path):
    path = _write(tmp_path, GOOD.read_text(), name="other.yaml")
    with pytest.raises(SpecError, match=r"must live in specs/glu/interleave.yaml"):
        load_spec(path)


def test_invalid_yaml_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(_write(tmp_path, "contract: [unclosed"))


def test_unknown_glob_lists_known_contracts():
    with pytest.raises(SpecError, match=r"no spec matches 'nope\.\*'; known contracts"):
        load_specs("nope.*")


def test_expressions_evaluate_shapes_params_and_helpers():
    assert evaluate("K % (inner_k_tiles * 16) == 0", {"K": 256, "inner_k_tiles": 8})
    assert evaluate("[N, ceil_div(K, 2)]", {"N": 3, "K": 5}) == [3, 3]
    assert evaluate("x.shape", {}, {"x": (2, 3)}) == (2, 3)
    with pytest.raises(SpecError):
        evaluate("x.__class__", {}, {"x": (1,)})


def test_outputs_with_when_exist_only_where_it_holds(tmp_path):
    rule = "compare: {kind: bitwise}"
    text = GOOD.read_text().replace(rule, rule + '\n    when: "block_size > 2"', 1)
    spec = load_spec(_write(tmp_path, text))
    (name,) = spec.outputs
    assert name in spec.active_outputs({"block_size": 4})
    assert spec.active_outputs({"block_size": 2}) == {}


def test_output_when_must_name_params_only(tmp_path):
    rule = "compare: {kind: bitwise}"
    text = GOOD.read_text().replace(rule, rule + '\n    when: "N > 2"', 1)
    with pytest.raises(SpecError, match=r"outputs\.out\.when"):
        load_spec(_write(tmp_path, text))
