"""The ``bound`` comparison (a per-element tolerance from a reference magnitude) and the GEMM specs' bounds:
they accept the reference's own neighbours and reject perturbed results and planted bugs.

Planted bugs run through the engine in-process (:class:`Planted`): the reference with one plausible
kernel bug (a scale taken from the wrong block, a group boundary off by one row), which a ``smoke`` run
must flag; an accumulator of the input dtype (bfloat16) must fall outside the bound too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference.gemm
import reference.linear
from conformance.compare import compare_outputs
from conformance.registry import load_spec
from conformance.runner import Runner
from conformance.worker import CallOutcome
from reference._opmath import bfloat16_from_float64
from reference.formats import get_format

SPECS = Path(__file__).parents[2] / "specs"
BOUND = {
    "y": {
        "dtype": "float32",
        "shape": "x.shape",
        "compare": {"kind": "bound", "magnitude": "mag", "atol": 0, "rtol": "0.5 if wide else 0.0", "mtol": 0.01,
                    "why": "t"},
    }
}  # fmt: skip


def _compare(ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> list:
    bits = {"y": np.asarray(ref["y"], dtype=np.float32).view(np.uint32), "mag": ref["mag"]}
    return compare_outputs(BOUND, {"y": "float32"}, params, bits, got)


def test_bound_scales_with_the_magnitude_of_each_element() -> None:
    ref = {"y": np.array([1.0, 1.0, 0.0], dtype=np.float32), "mag": np.array([1.0, 100.0, 100.0])}
    got = np.array([1.009, 1.9, -0.99], dtype=np.float32)
    assert _compare(ref, {"y": got}, {"wide": False}) == []
    (m,) = _compare(ref, {"y": np.array([1.011, 1.9, -0.99], dtype=np.float32)}, {"wide": False})
    assert m.count == 1 and m.elements[0]["index"] == [0]
    assert "allowed |difference| <= 0.01 there" in m.message and m.elements[0]["allowed"] == "0.01"


def test_bound_tolerances_are_expressions_over_params() -> None:
    ref = {"y": np.array([2.0], dtype=np.float32), "mag": np.array([0.0])}
    got = {"y": np.array([2.9], dtype=np.float32)}
    assert len(_compare(ref, got, {"wide": False})) == 1
    assert _compare(ref, got, {"wide": True}) == []


def test_bound_nan_equals_nan_and_infinity_only_itself() -> None:
    ref = {"y": np.array([np.nan, np.inf, np.inf], dtype=np.float32), "mag": np.full(3, np.inf)}
    assert _compare(ref, {"y": np.array([np.nan, np.inf, np.inf], dtype=np.float32)}, {"wide": False}) == []
    (m,) = _compare(ref, {"y": np.array([1.0, -np.inf, 5.0], dtype=np.float32)}, {"wide": False})
    assert m.count == 3


# -- the GEMM specs' bounds ------------------------------------------------------------------------
def _rule(contract: str) -> dict[str, Any]:
    family, name = contract.split(".")
    return dict(load_spec(SPECS / family / f"{name}.yaml").outputs)


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_group_gemm_bound_rejects_two_ulps_and_a_swapped_group() -> None:
    rng = np.random.default_rng(0)
    a = np.abs(rng.standard_normal((12, 64))).astype(np.float32)  # positive: abs_dot equals |out|
    a = (a.view(np.uint32) & 0xFFFF0000).view(np.float32)
    b = (np.abs(rng.standard_normal((3, 64, 16))).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    params = {"form": "2d_3d", "groups": 3, "group_sizes": (4, 0, 8)}
    ref = reference.gemm.grouped(a, b, **params)
    outputs, dtypes = _rule("group.gemm"), {"out": "bfloat16"}
    reference_bits = {"out": _bf16_bits(ref["out"]), "abs_dot": ref["abs_dot"]}
    one_ulp = (_bf16_bits(ref["out"]) + np.uint16(1)).astype(np.uint16)
    assert compare_outputs(outputs, dtypes, params, reference_bits, {"out": one_ulp}) == []
    two_ulps = _bf16_bits(ref["out"])
    two_ulps[5, 3] += 2
    (m,) = compare_outputs(outputs, dtypes, params, reference_bits, {"out": two_ulps})
    assert m.count == 1 and m.elements[0]["index"] == [5, 3]
    swapped = reference.gemm.grouped(a, b[[2, 1, 0]], **params)["out"]
    (m,) = compare_outputs(outputs, dtypes, params, reference_bits, {"out": _bf16_bits(swapped)})
    assert m.count > 0.9 * ref["out"].size


def test_gemm_scaled_bound_rejects_a_scale_from_the_neighbouring_block() -> None:
    rng = np.random.default_rng(1)
    positive = np.unique(np.abs(get_format("float8_e4m3fn").finite_magnitudes)).astype(np.float32)
    a, b = rng.choice(positive, (4, 256)), rng.choice(positive, (16, 256))
    scale_a = np.array([[1.0, 2.0]] * 4, dtype=np.float32)
    scale_b = np.array([[1.0, 1.0]] * 16, dtype=np.float32)
    params = {"scaling_a": "1x128", "scaling_b": "1x128", "format_a": "float8_e4m3fn", "format_b": "float8_e4m3fn",
              "out_dtype": "float32"}  # fmt: skip
    ref = reference.gemm.scaled(a, b, scale_a, scale_b, **params)
    wrong = reference.gemm.scaled(a, b, scale_a[:, ::-1].copy(), scale_b, **params)
    reference_bits = {"out": ref["out"].view(np.uint32), "abs_dot": ref["abs_dot"]}
    outputs, dtypes = _rule("gemm.scaled"), {"out": "float32"}
    assert compare_outputs(outputs, dtypes, params, reference_bits, {"out": ref["out"] * np.float32(1 + 2**-12)}) == []
    (m,) = compare_outputs(outputs, dtypes, params, reference_bits, {"out": wrong["out"]})
    assert m.count == ref["out"].size


# -- planted bugs through the engine ---------------------------------------------------------------
class Planted:
    """An in-process backend handle around one buggy NumPy implementation of one contract."""

    def __init__(self, contract: str, fn: Callable[..., Mapping[str, np.ndarray]]):
        self.contract, self.fn = contract, fn
        self.description: dict[str, Any] = {"name": "planted", "validates_inputs": []}

    def unsupported_reason(self, contract: str, params: Mapping[str, Any]) -> str | None:
        return None if contract == self.contract else "not planted"

    def call(
        self, contract: str, inputs: Mapping[str, np.ndarray], dtypes: Mapping[str, str], params: Mapping[str, Any]
    ) -> CallOutcome:
        return CallOutcome("ok", {k: np.asarray(v) for k, v in self.fn(**inputs, **params).items()})

    def submit(self, contract: str, requests: Sequence[Any]) -> Callable[[], list[CallOutcome]]:
        return lambda: [self.call(contract, *request) for request in requests]

    def sweep_chunk(self, contract: str, params: Mapping[str, Any], start: int, count: int, shm: str) -> str | None:
        raise NotImplementedError


def _scale_from_the_next_block(a: np.ndarray, b: np.ndarray, scale_a: np.ndarray, scale_b: np.ndarray, **params: Any):
    """1x128 scales of ``a`` read one block to the right (the last block keeps its own)."""
    shifted = np.concatenate([scale_a[:, 1:], scale_a[:, -1:]], axis=1) if params["scaling_a"] == "1x128" else scale_a
    return reference.gemm.scaled(a, b, shifted, scale_b, **params)


def _boundary_one_row_late(a: np.ndarray, b: np.ndarray, *, form: str, groups: int, group_sizes: Any):
    """Each group after the first starts one row late (an offset read as ``offs[g] + 1``)."""
    sizes = list(group_sizes)
    if groups > 1 and sizes[0] > 0:
        sizes[0], sizes[1] = sizes[0] - 1, sizes[1] + 1
    return reference.gemm.grouped(a, b, form=form, groups=groups, group_sizes=sizes)


def test_group_gemm_bound_rejects_a_bfloat16_accumulator() -> None:
    """Every partial sum rounded to bfloat16 (an accumulator of the input dtype), K = 64 terms in order."""
    rng = np.random.default_rng(2)
    a = bfloat16_from_float64(rng.standard_normal((8, 64)))
    b = bfloat16_from_float64(rng.standard_normal((1, 64, 8)))
    params = {"form": "2d_3d", "groups": 1, "group_sizes": (8,)}
    ref = reference.gemm.grouped(a, b, **params)
    acc = np.zeros((8, 8), dtype=np.float32)
    for k in range(64):
        acc = bfloat16_from_float64(acc + a[:, k : k + 1].astype(np.float64) * b[0, k])
    reference_bits = {"out": _bf16_bits(ref["out"]), "abs_dot": ref["abs_dot"]}
    (m,) = compare_outputs(_rule("group.gemm"), {"out": "bfloat16"}, params, reference_bits, {"out": _bf16_bits(acc)})
    assert m.count > 8


def _linear_not_quantized(x: np.ndarray, w: np.ndarray, b: np.ndarray, dy: np.ndarray, *, recipe: str):
    """The layer run in high precision whatever the recipe (a quantizer silently skipped)."""
    return reference.linear.quantized(x, w, b, dy, recipe="none")


def _linear_wgrad_with_rowwise_x(x: np.ndarray, w: np.ndarray, b: np.ndarray, dy: np.ndarray, *, recipe: str):
    """wgrad on the rowwise copy of ``x`` (blocked along K) instead of the columnwise one (blocked along M)."""
    out = reference.linear.quantized(x, w, b, dy, recipe=recipe)
    x_row, _ = reference.linear._dequantize(x, recipe, "x")
    _, dy_col = reference.linear._dequantize(dy, recipe, "dy")
    out["dw"] = bfloat16_from_float64(dy_col.T.astype(np.float64) @ x_row.astype(np.float64))
    return out


@pytest.mark.parametrize(
    ("contract", "planted", "combo"),
    [
        ("gemm.scaled", _scale_from_the_next_block,
         {"scaling_a": "1x128", "scaling_b": "1x128", "format_a": "float8_e4m3fn", "format_b": "float8_e4m3fn",
          "out_dtype": "bfloat16"}),
        ("group.gemm", _boundary_one_row_late, {"form": "2d_3d"}),
        ("linear.quantized", _linear_not_quantized, {"recipe": "fp8_tensor"}),
        ("linear.quantized", _linear_not_quantized, {"recipe": "nvfp4"}),
        ("linear.quantized", _linear_wgrad_with_rowwise_x, {"recipe": "mxfp8"}),
        ("linear.quantized", _linear_not_quantized, {"recipe": "fp8_block"}),
    ],
)  # fmt: skip
def test_planted_gemm_bug_is_caught(contract: str, planted: Callable[..., Any], combo: dict[str, Any]) -> None:
    family, name = contract.split(".")
    spec = load_spec(SPECS / family / f"{name}.yaml")
    result = Runner(Planted(contract, planted), profile="smoke", seed=0).run_combo(spec, combo)
    assert result.status == "fail", (result.status, result.message)
    assert "but reference gives" in result.message and "allowed |difference|" in result.message
