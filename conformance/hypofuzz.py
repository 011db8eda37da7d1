"""The rows of a selection as ordinary hypothesis tests, for HypoFuzz (``hypothesis fuzz``) or plain pytest.

``fuzz_targets(backend, spec, where)`` returns one ``@given`` test function per conformance row, named
``test_`` and the row id (non-identifiers as ``_``), each drawing that row's cases boundary-first
(``conformance.testing.cases``) and failing, with the engine's message and a replay command, where the
backend disagrees with the reference (``Runner.evaluate``).  A test module puts them in its namespace, so
pytest, and HypoFuzz through pytest's collection, find them; ``examples/test_fuzz_targets.py`` does so,
with the backend, specs and rows from ``QCONFORM_FUZZ_BACKEND``, ``QCONFORM_FUZZ_SPEC`` and
``QCONFORM_FUZZ_WHERE``.  Each test's hypothesis database key is its backend and row id (hypothesis keys a
test by its source, which every generated test shares), so HypoFuzz keeps a corpus per backend and row.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings

from conformance.case import Case
from conformance.registry import Spec, load_specs
from conformance.runner import Runner, row_id, select_rows
from conformance.testing import cases
from conformance.worker import InProcessBackend

__all__ = ["fuzz_targets"]


@functools.cache
def _runner(backend: str, timeout: float) -> Runner:
    return Runner(InProcessBackend(backend, timeout))


def _target(spec: Spec, combo: dict[str, Any], backend: str, timeout: float, max_examples: int) -> Callable[..., None]:
    name = "test_" + re.sub(r"\W+", "_", row_id(spec, combo)).strip("_")

    def conforms(case: Case) -> None:
        evaluation = _runner(backend, timeout).evaluate(spec, case)
        assert evaluation.status == "pass", (
            f"{evaluation.status}: {evaluation.message}\n{case.describe()}\n"
            f"replay: qconform replay --backend {backend} '{case.token()}'"
        )

    conforms.__name__ = conforms.__qualname__ = name
    conforms._hypothesis_internal_add_digest = f"{backend}|{row_id(spec, combo)}".encode()  # type: ignore[attr-defined]
    strategy = cases(spec.contract, **combo)
    chosen = settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck))
    return chosen(given(strategy)(conforms))


def fuzz_targets(
    backend: str = "reference",
    spec: str = "cast.fp8",
    where: str | None = None,
    *,
    timeout: float = 120.0,
    max_examples: int = 20,
    module: str | None = None,
) -> dict[str, Callable[..., None]]:
    """One hypothesis test per conformance row of ``spec`` (a glob) and ``where``, against ``backend`` (a
    registered name or ``module:attr``, run in this process), by name; ``max_examples`` is what plain pytest
    runs (HypoFuzz runs them until stopped); ``module`` sets the tests' ``__module__``."""
    targets = {}
    for row_spec, combo in select_rows(load_specs(spec), where):
        if combo is None:
            continue  # invalid-input rows have no cases to draw
        test = _target(row_spec, combo, backend, timeout, max_examples)
        if module is not None:
            test.__module__ = module
        targets[test.__name__] = test
    return targets
