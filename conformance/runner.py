"""Run specs against a backend: examples, boundary cases, random cases, invalid inputs.

For each contract and each combination of its finite parameters the runner

1. runs the spec's regression ``examples`` (checking the reference against ``expect``),
2. runs every boundary case (``strategies.boundary_cases``),
3. runs ``profile`` many hypothesis cases, seeded from ``--seed`` and the combination id,
   letting hypothesis shrink the first failure to a minimal counterexample (with profile
   ``exhaustive``, casts sweep all 2^32 float32 inputs instead; see ``exhaustive.py``),

and stops the combination at its first failure.  A failure on an elementwise contract is
minimized further to the offending elements alone.  Invalid-input checks form one extra
row per contract.  A backend that raises, crashes or hangs gives an ``error`` for that row;
the run goes on.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings

from conformance import exhaustive
from conformance.carriers import carrier_to_bits
from conformance.case import Case, TensorBits
from conformance.compare import Mismatch, compare_outputs
from conformance.errors import SpecError
from conformance.expr import evaluate as evaluate_expr
from conformance.registry import Spec
from conformance.strategies import boundary_cases, case_strategy, literal_case
from conformance.values import values_to_bits
from conformance.worker import CallOutcome

__all__ = ["BackendHandle", "ComboResult", "Runner", "combo_id"]

STATUSES = ("pass", "fail", "error", "not-implemented")


class BackendHandle(Protocol):
    description: dict[str, Any]

    def unsupported_reason(self, contract: str, params: Mapping[str, Any]) -> str | None: ...
    def sweep_chunk(
        self, contract: str, params: Mapping[str, Any], start: int, count: int, shm_name: str
    ) -> str | None: ...
    def call(
        self, contract: str, inputs: Mapping[str, np.ndarray], dtypes: Mapping[str, str], params: Mapping[str, Any]
    ) -> CallOutcome: ...


def combo_id(contract: str, params: Mapping[str, Any], suffix: str = "") -> str:
    inner = ",".join(f"{k}={v}" for k, v in params.items())
    return f"{contract}[{inner}{suffix}]" if (inner or suffix) else contract


@dataclass
class Evaluation:
    status: str  # pass | fail | error
    message: str = ""
    mismatches: list[Mismatch] = field(default_factory=list)
    fatal: bool = False  # a crash or a timeout: stop the row, do not shrink


@dataclass
class ComboResult:
    """The verdict for one contract x parameter set (one row of the conformance matrix)."""

    contract: str
    params: dict[str, Any]
    status: str
    kind: str = "conformance"  # or "invalid-input"
    cases: int = 0
    duration_s: float = 0.0
    message: str = ""
    case: Case | None = None
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def id(self) -> str:
        return combo_id(self.contract, self.params, ",invalid-input" if self.kind == "invalid-input" else "")


class _Failed(Exception):
    """Raised inside the hypothesis property to mark a failing case."""


class _Abort(BaseException):
    """Stops hypothesis at once (crash or timeout): shrinking would restart the worker per step."""


def _combo_seed(seed_value: int, identifier: str) -> int:
    return zlib.crc32(f"{seed_value}|{identifier}".encode())


class Runner:
    """Runs specs against one backend handle (isolated or in-process)."""

    def __init__(
        self,
        handle: BackendHandle,
        *,
        profile: str = "smoke",
        seed: int = 0,
        progress: Callable[[str], None] | None = None,
        quiet_sweep: bool = False,
    ):
        self.quiet_sweep = quiet_sweep
        self.handle = handle
        self.profile = profile
        self.seed = seed
        self.progress = progress or (lambda line: None)

    # -- one case ----------------------------------------------------------------------------
    def reference_outputs(self, spec: Spec, case: Case) -> dict[str, np.ndarray]:
        """The reference's outputs as bit patterns, checked against the spec's dtypes and shapes."""
        raw = dict(spec.reference_function()(**case.carriers(), **case.params))
        out: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in raw.items()}
        shapes = {name: t.shape for name, t in case.inputs.items()}
        scope = {**spec.dims_of(shapes), **case.params}
        for name, decl in spec.active_outputs(case.params).items():
            bits = carrier_to_bits(out[name], spec.output_dtype(name, case.dtypes()))
            expected_shape = tuple(evaluate_expr(decl["shape"], scope, shapes))
            if bits.shape != expected_shape:
                raise AssertionError(f"reference output {name} has shape {bits.shape}, spec says {expected_shape}")
            out[name] = bits
        return out

    def evaluate(self, spec: Spec, case: Case) -> Evaluation:
        try:
            reference = self.reference_outputs(spec, case)
        except Exception as exc:
            return Evaluation("error", f"the reference failed on a valid case: {type(exc).__name__}: {exc}")
        outcome = self.handle.call(spec.contract, case.carriers(), case.dtypes(), case.params)
        if outcome.kind == "raised":
            return Evaluation("error", f"backend raised {outcome.exc_type}: {outcome.message}")
        if outcome.kind in ("crash", "timeout"):
            return Evaluation("error", f"backend {outcome.kind}: {outcome.message}", fatal=True)
        outputs = spec.active_outputs(case.params)
        dtypes = {name: spec.output_dtype(name, case.dtypes()) for name in outputs}
        mismatches = compare_outputs(outputs, dtypes, case.params, reference, outcome.outputs)
        if mismatches:
            return Evaluation("fail", mismatches[0].message, mismatches)
        return Evaluation("pass")

    def _minimize(self, spec: Spec, case: Case, failure: Evaluation) -> tuple[Case, Evaluation]:
        """For an elementwise contract, keep only the first offending elements (if they still fail)."""
        if not (spec.elementwise and failure.mismatches and failure.mismatches[0].elements):
            return case, failure
        shape = next(iter(case.inputs.values())).shape
        if any(t.shape != shape for t in case.inputs.values()) or any(
            len(e["index"]) != len(shape) for e in failure.mismatches[0].elements
        ):
            return case, failure
        flat = [
            int(np.ravel_multi_index(tuple(e["index"]), shape)) if shape else 0 for e in failure.mismatches[0].elements
        ]
        inputs = {name: TensorBits(t.dtype, t.bits.reshape(-1)[flat]) for name, t in case.inputs.items()}
        smaller = Case(case.contract, case.params, inputs, f"{case.label} (minimized)", tuple(flat))
        again = self.evaluate(spec, smaller)
        return (smaller, again) if again.status == "fail" else (case, failure)

    # -- rows ----------------------------------------------------------------------------------
    def run(self, specs: Iterable[Spec], where: str | None = None) -> list[ComboResult]:
        """Every row of ``specs``; with ``where`` (an expression over params), only the rows where it holds."""
        rows = [(spec, combo) for spec in specs for combo in [*spec.param_combinations(), None]]
        if where is not None:
            rows = [(s, c) for s, c in rows if c is not None and _holds(where, s.with_defaults(c))]
        results: list[ComboResult] = []
        for i, (spec, combo) in enumerate(rows, 1):
            result = self.run_invalid(spec) if combo is None else self.run_combo(spec, combo)
            results.append(result)
            self.progress(
                f"[{i}/{len(rows)}] {result.id}: {result.status} ({result.cases} cases, {result.duration_s:.1f} s)"
            )
        return results

    def run_combo(self, spec: Spec, combo: Mapping[str, Any]) -> ComboResult:
        start = time.perf_counter()
        result = ComboResult(spec.contract, dict(combo), "pass")
        reason = self.handle.unsupported_reason(spec.contract, spec.with_defaults(combo))
        if reason is not None:
            result.status, result.message = "not-implemented", reason
            return result
        for case in self._deterministic_cases(spec, combo):
            result.cases += 1
            if case.label.startswith("example:") and (problem := self._check_expectation(spec, case)):
                self._record(result, case, Evaluation("error", problem))
                break
            evaluation = self.evaluate(spec, case)
            if evaluation.status != "pass":
                self._record(result, *self._minimize(spec, case, evaluation))
                break
        else:
            if self.profile == "exhaustive" and exhaustive.eligible(spec):
                self._sweep(spec, combo, result)  # every float32 input: random cases would add nothing
            else:
                self._random_cases(spec, combo, result)
        result.duration_s = time.perf_counter() - start
        return result

    def _sweep(self, spec: Spec, combo: Mapping[str, Any], result: ComboResult) -> None:
        params = spec.with_defaults(combo)
        self.progress(f"sweeping all float32 inputs of {combo_id(spec.contract, combo)}")
        _, case, message = exhaustive.sweep(
            spec,
            params,
            lambda start, n, shm: self.handle.sweep_chunk(spec.contract, params, start, n, shm),
            progress=None if self.quiet_sweep else exhaustive.stderr_progress,
        )
        result.cases += exhaustive.TOTAL
        if case is not None or message.startswith("backend error"):
            status = "fail" if case is not None else "error"
            evaluation = self.evaluate(spec, case) if case is not None else Evaluation(status, message)
            self._record(result, case, Evaluation(status, f"{message}; {evaluation.message}", evaluation.mismatches))

    def _deterministic_cases(self, spec: Spec, combo: Mapping[str, Any]) -> Iterable[Case]:
        for example in spec.raw.get("examples") or []:
            params = spec.with_defaults(example.get("params") or {})
            if all(params[k] == v for k, v in combo.items()):
                yield literal_case(spec, params, example["inputs"], f"example:{example['name']}")
        yield from boundary_cases(spec, spec.with_defaults(combo))

    def _check_expectation(self, spec: Spec, case: Case) -> str | None:
        example = next(e for e in spec.raw["examples"] if case.label == f"example:{e['name']}")
        if "expect" not in example:
            return None
        try:
            reference = self.reference_outputs(spec, case)
        except Exception as exc:
            return f"the reference failed on example {example['name']!r}: {type(exc).__name__}: {exc}"
        for name, expected in example["expect"].items():
            dtype = spec.output_dtype(name, case.dtypes())
            want = (
                np.array(expected, dtype=np.uint64).astype(reference[name].dtype)
                if "int" in dtype
                else values_to_bits(expected, dtype)
            )
            if not np.array_equal(want.reshape(reference[name].shape), reference[name]):
                got, wanted = reference[name].tolist(), want.tolist()
                return f"the reference disagrees with example {example['name']!r} on {name}: {got} != {wanted}"
        return None

    def _random_cases(self, spec: Spec, combo: Mapping[str, Any], result: ComboResult) -> None:
        n = spec.examples_for(self.profile)
        if n == 0:
            return
        state: dict[str, Any] = {"failure": None}

        @settings(
            max_examples=n,
            database=None,
            deadline=None,
            derandomize=False,
            phases=(Phase.generate, Phase.shrink),
            verbosity=Verbosity.quiet,
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        )
        @given(case_strategy(spec, combo))
        def conforms(case: Case) -> None:
            result.cases += 1
            evaluation = self.evaluate(spec, case)
            if evaluation.status == "pass":
                return
            state["failure"] = (case, evaluation)
            if evaluation.fatal:
                raise _Abort
            raise _Failed(evaluation.message)

        seeded = seed(_combo_seed(self.seed, combo_id(spec.contract, combo)))(conforms)
        try:
            seeded()
        except (_Failed, _Abort):
            pass
        except Exception as exc:  # hypothesis itself gave up (flaky backend, unsatisfiable spec)
            if state["failure"] is None:
                result.status, result.message = "error", f"hypothesis: {type(exc).__name__}: {exc}"
                return
        if state["failure"] is not None:
            self._record(result, *self._minimize(spec, *state["failure"]))

    @staticmethod
    def _record(result: ComboResult, case: Case | None, evaluation: Evaluation) -> None:
        result.status, result.message = evaluation.status, evaluation.message
        result.case, result.mismatches = case, evaluation.mismatches

    def run_invalid(self, spec: Spec) -> ComboResult:
        """Each ``invalid`` entry must raise the named error, whose message names the constraint."""
        start = time.perf_counter()
        result = ComboResult(spec.contract, {}, "pass", kind="invalid-input")
        entries = spec.raw.get("invalid") or []
        if spec.contract not in self.handle.description.get("validates_inputs", []) or not entries:
            why = (
                "no invalid-input cases in the spec" if not entries else "the backend does not promise argument errors"
            )
            result.status, result.message = "not-implemented", why
            return result
        for entry in entries:
            params = spec.with_defaults(entry.get("params") or {})
            case = literal_case(spec, params, entry["inputs"], f"invalid:{entry['name']}")
            result.cases += 1
            problem = self._check_raises(spec, case, entry)
            if problem is not None:
                status = "error" if problem.startswith("the reference") else "fail"
                self._record(result, case, Evaluation(status, problem))
                break
        result.duration_s = time.perf_counter() - start
        return result

    def _check_raises(self, spec: Spec, case: Case, entry: Mapping[str, Any]) -> str | None:
        try:
            spec.reference_function()(**case.carriers(), **case.params)
        except Exception as exc:
            if not _raised_as_expected(type(exc).__name__, [c.__name__ for c in type(exc).__mro__], str(exc), entry):
                expected = f"{entry['raises']} naming {entry['match']}"
                return f"the reference raised {type(exc).__name__}: {exc}; the spec expects {expected}"
        else:
            return f"the reference accepted invalid input {entry['name']!r}; the spec expects {entry['raises']}"
        outcome = self.handle.call(spec.contract, case.carriers(), case.dtypes(), case.params)
        if outcome.kind == "ok":
            return (
                f"{entry['name']}: expected {entry['raises']} naming {entry['match']}, but the backend returned outputs"
            )
        if outcome.kind != "raised":
            return f"{entry['name']}: backend {outcome.kind}: {outcome.message}"
        if not _raised_as_expected(outcome.exc_type, list(outcome.exc_bases), outcome.message, entry):
            first_line = outcome.message.splitlines()[0] if outcome.message else ""
            expected = f"{entry['raises']} naming {entry['match']}"
            return f"{entry['name']}: expected {expected}, got {outcome.exc_type}: {first_line}"
        return None


def _holds(where: str, params: Mapping[str, Any]) -> bool:
    """``where`` over a row's params; a name the row lacks makes it false, not an error."""
    try:
        return bool(evaluate_expr(where, params))
    except SpecError:
        return False


def _raised_as_expected(exc_type: str, bases: list[str], message: str, entry: Mapping[str, Any]) -> bool:
    return entry["raises"] in (exc_type, *bases) and all(m in message for m in entry["match"])
