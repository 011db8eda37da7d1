"""qconform's cases and checks in your own hypothesis tests.

``cases(contract, **params)`` is a hypothesis strategy of conformance cases of one contract: the
row's boundary cases first (every code, midpoint, special value and size class of its spec; shrinking
goes towards them), then random cases drawn exactly as ``qconform run`` draws them, shrinkable.  A
drawn :class:`~conformance.case.Case` carries ``params`` (every parameter, defaults filled in),
``carriers()`` (the inputs as NumPy arrays; bfloat16 as float32 holding bfloat16 values) and
``dtypes()`` (each input's logical dtype).  ``assert_conforms(case, outputs)`` checks your outputs
against the NumPy reference with the engine's comparator and raises ``AssertionError`` with the
engine's message and the case's replay command::

    from hypothesis import given
    from conformance.testing import assert_conforms, cases, tensors

    @given(cases("quant.mx", format="float8_e4m3fn", scale_rule="rceil"))
    def test_my_mx_kernel(case):
        outputs = my_kernels.mx(**tensors(case, device="cuda"), **case.params)
        assert_conforms(case, outputs)

Parameters left out of ``cases`` are drawn too (one row per test example), so
``cases("cast.fp8")`` covers every format, overflow and rounding.  ``examples/`` has a complete test.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import hypothesis.strategies as st
import numpy as np

from conformance.carriers import carrier_to_bits
from conformance.case import Case
from conformance.compare import compare_outputs
from conformance.registry import Spec, load_specs
from conformance.runner import Runner
from conformance.strategies import boundary_cases, case_strategy

__all__ = ["assert_conforms", "cases", "tensors"]


@functools.cache
def _spec(contract: str) -> Spec:
    found = load_specs(contract)
    if len(found) != 1 or found[0].contract != contract:
        raise ValueError(f"cases(): contract must name one contract exactly, got {contract!r}")
    return found[0]


def cases(contract: str, **params: Any) -> st.SearchStrategy[Case]:
    """Boundary-first, shrinkable conformance cases of ``contract`` with the finite ``params`` fixed
    (module docstring); a param the spec does not declare, or a value outside its domain, raises
    ``ValueError`` naming it."""
    spec = _spec(contract)
    rows = spec.param_combinations()
    for name, value in params.items():
        known = spec.params.get(name)
        if known is None:
            raise ValueError(f"cases({contract!r}): unknown param {name!r}; known: {sorted(spec.params)}")
        if known.values is not None and value not in known.values:
            raise ValueError(f"cases({contract!r}): {name}={value!r} is not one of {list(known.values)}")
    chosen = [row for row in rows if all(row.get(k, v) == v for k, v in params.items())]
    if not chosen:
        raise ValueError(f"cases({contract!r}, {params}): no row of the spec has these params")
    per_row = [
        st.one_of(
            st.sampled_from(list(boundary_cases(spec, spec.with_defaults({**row, **params})))),
            case_strategy(spec, {**row, **params}),
        )
        for row in chosen
    ]
    return st.one_of(per_row)


def tensors(case: Case, device: str = "cpu") -> dict[str, Any]:
    """The case's inputs as torch tensors of their logical dtypes on ``device`` (needs torch)."""
    from conformance.backends import torch_arrays

    dtypes = case.dtypes()
    return {name: torch_arrays.to_tensor(array, dtypes[name], device) for name, array in case.carriers().items()}


def assert_conforms(case: Case, outputs: Mapping[str, Any]) -> None:
    """Raise ``AssertionError`` unless ``outputs`` (NumPy arrays or torch tensors of the spec's output dtypes)
    are the contract's outputs for ``case``, compared as ``qconform run`` compares them."""
    spec = _spec(case.contract)
    reference = Runner.reference_outputs(spec, case)
    got = {name: _numpy(value) for name, value in outputs.items()}
    declared = spec.active_outputs(case.params)
    dtypes = {name: spec.output_dtype(name, case.dtypes()) for name in declared}
    missing = sorted(set(declared) - set(got))
    if missing:
        raise AssertionError(f"{case.contract}: outputs {missing} missing; the spec's outputs are {sorted(declared)}")
    for name in declared:
        carrier_to_bits(got[name], dtypes[name])  # a wrong dtype fails here with the carrier's message
    mismatches = compare_outputs(declared, dtypes, case.params, reference, got)
    if mismatches:
        lines = [m.message for m in mismatches]
        raise AssertionError(
            "\n".join([f"{case.describe()}:", *lines, f"replay: qconform replay --backend BACKEND {case.token()}"])
        )


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor: carried as the engine's torch backends carry it
        from conformance.backends import torch_arrays

        return torch_arrays.to_numpy(value)
    return np.asarray(value)
