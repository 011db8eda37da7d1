"""Three engine rules the int4 and affine specs rely on.

- A ``constraint`` that reads finite parameters only removes whole rows (a zero-point domain that
  exists for one mapping only is not a row for the others).
- An output ``shape`` may name dims: the runner reads them back from the inputs' shapes (an
  input that exists under one ``when`` only still gives its dims).
- ``codes`` / ``all_codes`` classes of integer inputs may name an integer format (``int8``,
  ``int4``, ``uint4``, or ``$param`` naming one): codes ``0 .. 2**bits - 1``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings

from conformance.registry import load_spec
from conformance.runner import Runner
from conformance.strategies import boundary_cases, case_strategy
from conformance.values import boundary_pool

SPEC = """\
contract: toy.rows
version: 1
summary: rows, dims and integer codes
sources: ["tests/meta/test_rows_dims_and_int_codes.py"]
params:
  mapping: {values: [symmetric, asymmetric], default: asymmetric}
  domain: {values: [int, float], default: int}
  width: {values: [int8, int4], default: int4}
constraints:
  - "domain != 'float' or mapping == 'asymmetric'"
dims:
  N: {min: 1, max: 3}
  K: {min: 2, max: 6, multiple_of: 2}
inputs:
  q:
    dtypes: [uint8]
    shape: [N, K]
    values: [{class: all_codes, format: $width}]
    when: "domain == 'int'"
  p:
    dtypes: [int32]
    shape: [N, K]
    values: [{class: codes, format: uint4}]
    when: "domain == 'float'"
outputs:
  out:
    dtype: uint8
    shape: "[N, K // 2]"
    compare: {kind: bitwise}
"""


def toy(tmp_path: Path) -> Path:
    path = tmp_path / "toy" / "rows.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SPEC)
    return path


def test_param_only_constraints_remove_rows(tmp_path: Path) -> None:
    spec = load_spec(toy(tmp_path))
    rows = spec.param_combinations()
    assert {"mapping": "symmetric", "domain": "float", "width": "int8"} not in rows
    assert len(rows) == 6  # 2 * 2 * 2, less the two symmetric float rows


def test_output_shapes_read_dims_from_the_inputs_present(tmp_path: Path) -> None:
    spec = load_spec(toy(tmp_path))
    assert spec.dims_of({"q": (3, 4)}) == {"N": 3, "K": 4}
    assert spec.dims_of({"p": (2, 6)}) == {"N": 2, "K": 6}
    assert spec.dims_of({"q": (3, 4, 5)}) == {}, "a rank the declaration does not have gives nothing"


def test_integer_code_formats(tmp_path: Path) -> None:
    assert boundary_pool({"class": "all_codes", "format": "int8"}, "uint8").tolist() == list(range(256))
    assert boundary_pool({"class": "codes", "format": "uint4"}, "int32").tolist() == list(range(16))
    spec = load_spec(toy(tmp_path))
    for case in boundary_cases(spec, {"mapping": "asymmetric", "domain": "int", "width": "int4"}):
        assert case.inputs["q"].bits.max() <= 15

    @settings(max_examples=20, deadline=None, database=None)
    @given(case_strategy(spec, {"mapping": "asymmetric", "domain": "int", "width": "int8"}))
    def drawn(case):  # type: ignore[no-untyped-def]
        assert set(case.inputs) == {"q"}
        assert case.inputs["q"].bits.dtype == np.uint8

    drawn()


def half_columns(q: np.ndarray | None = None, p: np.ndarray | None = None, **params: str) -> dict[str, np.ndarray]:
    source = q if q is not None else p
    assert source is not None
    return {"out": np.zeros((source.shape[0], source.shape[1] // 2), dtype=np.uint8)}


class NoBackend:
    """``reference_outputs`` needs no backend."""

    def __init__(self) -> None:
        self.description: dict[str, object] = {}


def test_runner_checks_output_shapes_named_by_dims(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    spec = load_spec(toy(tmp_path))
    monkeypatch.setattr(type(spec), "reference_function", lambda self: half_columns)
    runner = Runner(NoBackend(), profile="smoke")  # type: ignore[arg-type]
    for combo in spec.param_combinations():
        for case in boundary_cases(spec, spec.with_defaults(combo)):
            (source,) = case.inputs.values()
            assert runner.reference_outputs(spec, case)["out"].shape == (source.shape[0], source.shape[1] // 2)
