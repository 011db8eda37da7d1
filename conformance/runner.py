"""Run specs against a backend: examples, boundary cases, random cases, invalid inputs.

For each contract and each combination of its finite parameters the runner

1. runs the spec's regression ``examples`` (checking the reference against ``expect``),
2. runs every boundary case (``strategies.boundary_cases``),
3. runs ``profile`` many hypothesis cases, seeded from ``--seed`` and the combination id, up to
   16 to a hypothesis example (``cases_per_example``; one backend batch each), letting hypothesis
   shrink the first failing example to a minimal counterexample (with profile ``exhaustive``,
   casts sweep all 2^32 float32 inputs instead; see ``exhaustive.py``),

and stops the combination at its first failure.  A failure on an elementwise contract is
minimized further to the offending elements alone.  Invalid-input checks form one extra
row per contract.  A backend that raises, or returns outputs of the wrong kind, fails the row
(``error`` where it raised); one that kills its process or hangs past the timeout makes the row
``crashed``; the run goes on either way.

For a contract whose outputs have a tolerance (``ulp``, ``close``, ``bound``), each row also
counts how much of the tolerance its elements use (``compare.tolerance_usage``) in the bins of
``ERROR_BIN_EDGES``, over the cases before its first failure: the report's error-distribution
plot.  ``run`` takes a ``shard`` (``shard.py``) and hands each finished row to ``on_result``, so
a caller can write results as they come.

With a ``database`` (a hypothesis ``ExampleDatabase``, e.g. ``DirectoryBasedExampleDatabase``), each
row first replays the failing cases stored under its row id (``database_key``), stores the case of a
new failure there, and lets hypothesis replay and store its own failing examples too (``random_settings``).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import hypothesis.strategies as st
import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis.database import ExampleDatabase

from conformance import exhaustive
from conformance.carriers import carrier_to_bits
from conformance.case import Case, TensorBits, decode_token
from conformance.compare import Mismatch, compare_outputs, tolerance_usage
from conformance.expr import evaluate as evaluate_expr
from conformance.expr import names_in
from conformance.registry import Spec
from conformance.shard import Shard
from conformance.strategies import boundary_cases, case_strategy, literal_case
from conformance.values import values_to_bits
from conformance.worker import CallOutcome, Request, SupportsFailed

__all__ = [
    "ERROR_BIN_EDGES",
    "STATUSES",
    "BackendHandle",
    "ComboResult",
    "Runner",
    "batches",
    "cases_per_example",
    "combo_id",
    "database_key",
    "random_case_lists",
    "random_settings",
    "row_id",
    "row_seed",
    "select_rows",
]

STATUSES = ("pass", "fail", "error", "crashed", "not-implemented")
"""A row's status: ``crashed`` is a backend process that died or hung past the timeout."""
ERROR_BIN_EDGES = (0.0, *(2.0**k for k in range(-20, 1, 2)), math.inf)
"""Upper edges of the bins of the share of its tolerance an element uses (``compare.tolerance_usage``):
bin ``i`` holds the shares in ``(edges[i-1], edges[i]]``, so bin 0 the exact elements, then ``(0, 2^-20]``,
``(2^-20, 2^-18]``, ..., ``(2^-2, 1]``, and the last ``(1, inf]``: the elements outside the tolerance."""


class BackendHandle(Protocol):
    description: dict[str, Any]

    def unsupported_reason(self, contract: str, params: Mapping[str, Any]) -> str | None: ...
    def sweep_chunk(
        self, contract: str, params: Mapping[str, Any], start: int, count: int, shm_name: str
    ) -> str | None: ...
    def call(
        self, contract: str, inputs: Mapping[str, np.ndarray], dtypes: Mapping[str, str], params: Mapping[str, Any]
    ) -> CallOutcome: ...
    def submit(self, contract: str, requests: Sequence[Request]) -> Callable[[], list[CallOutcome]]: ...


def combo_id(contract: str, params: Mapping[str, Any], suffix: str = "") -> str:
    inner = ",".join(f"{k}={v}" for k, v in params.items())
    return f"{contract}[{inner}{suffix}]" if (inner or suffix) else contract


def row_id(spec: Spec, combo: Mapping[str, Any] | None) -> str:
    """The id of a report row: a parameter set of ``spec``, or its invalid-input row for ``None``."""
    return combo_id(spec.contract, {}, ",invalid-input") if combo is None else combo_id(spec.contract, combo)


def _bin_counts(shares: np.ndarray) -> np.ndarray:
    """How many of ``shares`` fall in each bin of ``ERROR_BIN_EDGES``."""
    index = np.searchsorted(np.asarray(ERROR_BIN_EDGES), shares, side="left")
    return np.bincount(index, minlength=len(ERROR_BIN_EDGES))


@dataclass
class Evaluation:
    status: str  # pass | fail | error | crashed (stop the row, do not shrink) | skipped (the backend's NotSupported)
    message: str = ""
    mismatches: list[Mismatch] = field(default_factory=list)
    error_counts: dict[str, np.ndarray] = field(default_factory=dict)  # per toleranced output: bin counts


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
    error_counts: dict[str, np.ndarray] = field(default_factory=dict)
    """Per output with a tolerance, elements per bin of ``ERROR_BIN_EDGES`` (module docstring)."""
    other_failures: list[tuple[Case, Evaluation]] = field(default_factory=list)
    """Further failing deterministic cases, one per distinct failure class (``failure_class``) other than the
    first's, each minimized, at most ``MAX_DISTINCT_FAILURES - 1``; ``message`` lists them too."""
    skipped: int = 0
    """Cases the backend turned down by raising ``conformance.backends.NotSupported`` (not in ``cases``)."""
    skip_reason: str = ""

    def skip(self, evaluation: Evaluation) -> bool:
        """Count a case the backend raised ``NotSupported`` for (and undo its count in ``cases``); whether it was."""
        if evaluation.status != "skipped":
            return False
        self.cases -= 1
        self.skipped += 1
        self.skip_reason = self.skip_reason or evaluation.message
        return True

    def settle_skips(self) -> None:
        """A row whose every case was turned down is *not-implemented* with the backend's reason; a row that passed
        with some turned down says how many in its message."""
        if not self.skipped or self.status != "pass":
            return
        if self.cases == 0:
            self.status = "not-implemented"
            self.message = f"every case raised NotSupported ({self.skipped}): {self.skip_reason}"
        else:
            self.message = f"{self.skipped} case(s) raised NotSupported, not counted: {self.skip_reason}"

    @property
    def id(self) -> str:
        return combo_id(self.contract, self.params, ",invalid-input" if self.kind == "invalid-input" else "")

    def count_errors(self, evaluation: Evaluation) -> None:
        """Add the error distribution of one evaluated case."""
        for name, counts in evaluation.error_counts.items():
            self.error_counts[name] = self.error_counts.get(name, 0) + counts


MAX_DISTINCT_FAILURES = 4
"""The most distinct failure classes a row's deterministic cases report (so one benign difference does not hide
a real one); the first failing case is the row's ``case``, the others go to ``other_failures``."""


def failure_class(case: Case, evaluation: Evaluation) -> tuple[str, str]:
    """What makes two failures distinct: the first differing output (or the status) and the case's kind (an
    example, or the value class of a boundary case: the part of its label before the first ``/``)."""
    output = evaluation.mismatches[0].output if evaluation.mismatches else evaluation.status
    kind = "example" if case.label.startswith("example:") else case.label.split("/")[0]
    return output, kind


class _Failed(Exception):
    """Raised inside the hypothesis property to mark a failing case."""


class _Abort(BaseException):
    """Stops hypothesis at once (crash or timeout): shrinking would restart the worker per step."""


def random_settings(max_examples: int, database: ExampleDatabase | None = None) -> settings:
    """How a row draws its random cases: no deadline, quiet, seeded by the caller; with a ``database`` (a
    hypothesis ``ExampleDatabase``) the failures stored under the row's key (``database_key``) are replayed
    first and new ones stored, without one (the default of ``run``: reports stay reproducible) nothing is."""
    return settings(
        max_examples=max_examples,
        database=database,
        deadline=None,
        derandomize=False,
        phases=(Phase.generate, Phase.shrink) if database is None else (Phase.reuse, Phase.generate, Phase.shrink),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


def row_seed(seed_value: int, spec: Spec, combo: Mapping[str, Any]) -> int:
    """The hypothesis seed of a row's random cases: ``--seed`` and the row id, nothing else."""
    return zlib.crc32(f"{seed_value}|{combo_id(spec.contract, combo)}".encode())


def database_key(spec: Spec, combo: Mapping[str, Any], per_example: int | None = None) -> bytes:
    """The keys of a row in an example database: with ``per_example``, hypothesis's choice sequences of its
    failing examples of that many cases (hypothesis would key them by the test function's source, the same
    for every row; a sequence of 16 cases replayed as 10 would lose the last six, so each list size has its
    own key); without, the row's failing cases themselves, as replay tokens (``Case.token``), replayed first
    by every run with that database, whatever its profile."""
    row = combo_id(spec.contract, combo)
    return f"qconform:{row}".encode() if per_example is None else f"qconform:{row}|{per_example}".encode()


CASES_PER_EXAMPLE = 16
"""The most random cases one hypothesis example holds (``cases_per_example``)."""
BATCH_CASES = 64
"""The most deterministic cases one backend batch holds (``batches``)."""
BATCH_BYTES = 32 << 20
"""The most input bytes one batch of deterministic cases holds (``batches``)."""


def cases_per_example(n: int) -> int:
    """How many random cases one hypothesis example draws for a row of ``n``: enough to share hypothesis's
    cost per example and the round trip to the backend, few enough that a row has at least 20 examples (so
    ``smoke``'s 20 cases are 20 examples of one case, as hypothesis would draw them one by one)."""
    return max(1, min(CASES_PER_EXAMPLE, n // 20))


def random_case_lists(spec: Spec, combo: Mapping[str, Any], n: int) -> st.SearchStrategy[list[Case]]:
    """One hypothesis example of a row's random cases: a list of ``cases_per_example(n)`` cases."""
    k = cases_per_example(n)
    return st.lists(case_strategy(spec, combo), min_size=k, max_size=k)


def batches(cases: Iterable[Case]) -> Iterator[list[Case]]:
    """``cases`` in order, in lists of at most ``BATCH_CASES`` cases and ``BATCH_BYTES`` of inputs."""
    batch: list[Case] = []
    size = 0
    for case in cases:
        nbytes = sum(t.bits.nbytes for t in case.inputs.values())
        if batch and (len(batch) == BATCH_CASES or size + nbytes > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(case)
        size += nbytes
    if batch:
        yield batch


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
        database: ExampleDatabase | None = None,
        cases: int | None = None,
        boundary: bool = True,
    ):
        self.quiet_sweep = quiet_sweep
        self.database = database
        """Where random rows replay and store their failures (``random_settings``); ``None``: nowhere."""
        self.cases = cases
        """Random cases per row; ``None``: the profile's count (``Spec.examples_for``)."""
        self.boundary = boundary
        """Whether rows run their regression examples and boundary cases (``deterministic_cases``)."""
        self.handle = handle
        self.profile = profile
        self.seed = seed
        self.progress = progress or (lambda line: None)

    # -- one case ----------------------------------------------------------------------------
    @staticmethod
    def reference_outputs(spec: Spec, case: Case) -> dict[str, np.ndarray]:
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
        return self.evaluate_many(spec, [case])[0]

    def evaluate_many(self, spec: Spec, cases: Sequence[Case]) -> list[Evaluation]:
        """The cases' evaluations, in order, up to the first crash or timeout (the backend process died there:
        later cases did not run).  The backend gets all the cases in one batch; the reference runs meanwhile."""
        collect = self.handle.submit(spec.contract, [(c.carriers(), c.dtypes(), c.params) for c in cases])
        references: list[dict[str, np.ndarray] | str] = []
        for case in cases:
            try:
                references.append(self.reference_outputs(spec, case))
            except Exception as exc:
                references.append(f"the reference failed on a valid case: {type(exc).__name__}: {exc}")
        outcomes = collect()
        return [self._judge(spec, case, ref, got) for case, ref, got in zip(cases, references, outcomes, strict=False)]

    def _judge(
        self, spec: Spec, case: Case, reference: dict[str, np.ndarray] | str, outcome: CallOutcome
    ) -> Evaluation:
        if isinstance(reference, str):
            return Evaluation("error", reference)
        if outcome.kind == "raised" and "NotSupported" in outcome.exc_bases:
            return Evaluation("skipped", outcome.message.splitlines()[0] if outcome.message else outcome.exc_type)
        if outcome.kind == "raised":
            return Evaluation("error", f"backend raised {outcome.exc_type}: {outcome.message}")
        if outcome.kind in ("crash", "timeout"):
            return Evaluation("crashed", f"backend {outcome.kind}: {outcome.message}")
        outputs = spec.active_outputs(case.params)
        dtypes = {name: spec.output_dtype(name, case.dtypes()) for name in outputs}
        mismatches = compare_outputs(outputs, dtypes, case.params, reference, outcome.outputs)
        usage = tolerance_usage(outputs, dtypes, case.params, reference, outcome.outputs)
        counts = {name: _bin_counts(shares) for name, shares in usage.items()}
        if mismatches:
            return Evaluation("fail", mismatches[0].message, mismatches, counts)
        return Evaluation("pass", error_counts=counts)

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
    def run(
        self,
        specs: Iterable[Spec],
        where: str | None = None,
        shard: Shard | None = None,
        on_result: Callable[[ComboResult], None] | None = None,
    ) -> list[ComboResult]:
        """The rows ``select_rows`` picks; ``on_result`` sees each row as it finishes."""
        return self.run_rows(select_rows(specs, where, shard), on_result)

    def run_rows(
        self, rows: Iterable[tuple[Spec, dict[str, Any] | None]], on_result: Callable[[ComboResult], None] | None = None
    ) -> list[ComboResult]:
        """Run ``rows`` (as ``select_rows`` gives them) in order; ``on_result`` sees each row as it finishes."""
        results: list[ComboResult] = []
        for spec, combo in rows:
            result = self.run_invalid(spec) if combo is None else self.run_combo(spec, combo)
            results.append(result)
            if on_result is not None:
                on_result(result)
        return results

    def run_combo(self, spec: Spec, combo: Mapping[str, Any]) -> ComboResult:
        start = time.perf_counter()
        result = ComboResult(spec.contract, dict(combo), "pass")
        try:
            reason = self.handle.unsupported_reason(spec.contract, spec.with_defaults(combo))
        except Exception as exc:  # supports() raised: this row is an error, the run goes on
            failed = exc if isinstance(exc, SupportsFailed) else SupportsFailed("error", f"{type(exc).__name__}: {exc}")
            result.status, result.message = failed.status, failed.message
            result.duration_s = time.perf_counter() - start
            return result
        if reason is not None:
            result.status, result.message = "not-implemented", reason
            return result
        if not (
            self._replay_stored(spec, combo, result) or (self.boundary and self._deterministic(spec, combo, result))
        ):
            if self.profile == "exhaustive" and exhaustive.eligible(spec):
                self._sweep(spec, combo, result)  # every float32 input: random cases would add nothing
            else:
                self._random_cases(spec, combo, result)
        result.settle_skips()
        if self.database is not None and result.case is not None and result.status in ("fail", "error", "crashed"):
            self.database.save(database_key(spec, combo), result.case.token().encode())
        result.duration_s = time.perf_counter() - start
        return result

    def _replay_stored(self, spec: Spec, combo: Mapping[str, Any], result: ComboResult) -> bool:
        """Replay the row's failing cases stored in the database (``database_key``), dropping those that now
        pass; whether one still fails (recorded, so the row stops there)."""
        if self.database is None:
            return False
        key = database_key(spec, combo)
        for blob in sorted(self.database.fetch(key), key=len):
            try:
                case = decode_token(blob.decode())
            except Exception:  # not a token of this suite's (an older format): useless, drop it
                self.database.delete(key, blob)
                continue
            evaluation = self.evaluate(spec, case)
            result.cases += 1
            if evaluation.status == "pass":
                self.database.delete(key, blob)
                continue
            self._record(result, case, evaluation)
            result.message = f"{evaluation.message} (a failure stored in the database, replayed first)"
            return True
        return False

    def _deterministic(self, spec: Spec, combo: Mapping[str, Any], result: ComboResult) -> bool:
        """Run the row's examples and boundary cases in batches (``batches``); whether one did not pass.

        After a failing (``fail``) case the row's other deterministic cases still run, and the first case of each
        further distinct ``failure_class`` is kept (minimized), up to ``MAX_DISTINCT_FAILURES``; an error or a
        crash stops the row there."""
        failures: dict[tuple[str, str], tuple[Case, Evaluation]] = {}
        stopped = False
        for batch in batches(self.deterministic_cases(spec, combo)):
            evaluations = self.evaluate_many(spec, batch)
            for case, evaluation in zip(batch, evaluations, strict=False):
                result.cases += 1
                if result.skip(evaluation):
                    continue
                if case.label.startswith("example:") and (problem := self._check_expectation(spec, case)):
                    failures[("expectation", case.label)] = (case, Evaluation("error", problem))
                    stopped = True
                    break
                result.count_errors(evaluation)
                if evaluation.status == "pass":
                    continue
                key = failure_class(case, evaluation)
                if key not in failures and len(failures) < MAX_DISTINCT_FAILURES:
                    failures[key] = self._minimize(spec, case, evaluation)
                if evaluation.status != "fail" or len(failures) == MAX_DISTINCT_FAILURES:
                    stopped = True
                    break
            if stopped:
                break
        if not failures:
            return False
        first, *others = failures.values()
        self._record(result, *first)
        result.other_failures = others
        if others:
            also = "; ".join(f"[{c.label}] {e.message.splitlines()[0] if e.message else e.status}" for c, e in others)
            result.message = f"{result.message}\nalso {len(others)} other distinct failure(s): {also}"
        return True

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

    @staticmethod
    def deterministic_cases(spec: Spec, combo: Mapping[str, Any]) -> Iterator[Case]:
        """A row's regression examples, then its boundary cases."""
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
        """The row's random cases, drawn by hypothesis ``cases_per_example`` at a time (one backend batch each)
        and shrunk, all of a failing example's cases together, to a minimal counterexample."""
        n = spec.examples_for(self.profile) if self.cases is None else self.cases
        if n == 0:
            return
        state: dict[str, Any] = {"failure": None}
        per_example = cases_per_example(n)

        @given(random_case_lists(spec, combo, n))
        def conforms(cases: list[Case]) -> None:
            for case, evaluation in zip(cases, self.evaluate_many(spec, cases), strict=False):
                result.cases += 1
                if state["failure"] is None and result.skip(evaluation):
                    continue
                if evaluation.status == "skipped":  # while shrinking: not a failure
                    result.cases -= 1
                    continue
                if state["failure"] is None:  # not while shrinking
                    result.count_errors(evaluation)
                if evaluation.status == "pass":
                    continue
                state["failure"] = (case, evaluation)
                if evaluation.status == "crashed":
                    raise _Abort
                raise _Failed(evaluation.message)

        # settings after the seed: ``seed`` turns the database off, the settings put back the runner's
        seeded = random_settings(-(-n // per_example), self.database)(seed(row_seed(self.seed, spec, combo))(conforms))
        seeded._hypothesis_internal_database_key = database_key(spec, combo, per_example)  # type: ignore[attr-defined]
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
            if not entries:
                why = "no invalid-input cases in the spec"
            elif spec.contract not in self.handle.description.get("contracts", [spec.contract]):
                why = f"backend {self.handle.description.get('name', '?')!r} does not implement {spec.contract}"
            else:
                why = "the backend does not promise argument errors"
            result.status, result.message = "not-implemented", why
            return result
        for entry in entries:
            params = spec.with_defaults(entry.get("params") or {})
            case = literal_case(spec, params, entry["inputs"], f"invalid:{entry['name']}")
            result.cases += 1
            problem = self._check_raises(spec, case, entry)
            if problem is not None:
                self._record(result, case, problem)
                break
        result.duration_s = time.perf_counter() - start
        return result

    def _check_raises(self, spec: Spec, case: Case, entry: Mapping[str, Any]) -> Evaluation | None:
        """``None`` when the reference and the backend both raise as ``entry`` says, else what went wrong."""
        expected = f"{entry['raises']} naming {entry['match']}"
        try:
            spec.reference_function()(**case.carriers(), **case.params)
        except Exception as exc:
            if not _raised_as_expected(type(exc).__name__, [c.__name__ for c in type(exc).__mro__], str(exc), entry):
                message = f"the reference raised {type(exc).__name__}: {exc}; the spec expects {expected}"
                return Evaluation("error", message)
        else:
            message = f"the reference accepted invalid input {entry['name']!r}; the spec expects {entry['raises']}"
            return Evaluation("error", message)
        outcome = self.handle.call(spec.contract, case.carriers(), case.dtypes(), case.params)
        if outcome.kind == "ok":
            return Evaluation("fail", f"{entry['name']}: expected {expected}, but the backend returned outputs")
        if outcome.kind != "raised":
            return Evaluation("crashed", f"{entry['name']}: backend {outcome.kind}: {outcome.message}")
        if not _raised_as_expected(outcome.exc_type, list(outcome.exc_bases), outcome.message, entry):
            first_line = outcome.message.splitlines()[0] if outcome.message else ""
            return Evaluation("fail", f"{entry['name']}: expected {expected}, got {outcome.exc_type}: {first_line}")
        return None


def select_rows(
    specs: Iterable[Spec], where: str | None = None, shard: Shard | None = None
) -> list[tuple[Spec, dict[str, Any] | None]]:
    """The rows of ``specs`` in run order, as (spec, parameter set), ``None`` for a contract's invalid-input
    row; with ``where`` (an expression over params) only the parameter sets where it holds, with ``shard``
    only the rows of that shard."""
    rows = [(spec, combo) for spec in specs for combo in [*spec.param_combinations(), None]]
    if where is not None:
        rows = [(s, c) for s, c in rows if c is not None and _holds(where, s.with_defaults(c))]
    if shard is not None:
        rows = [(s, c) for s, c in rows if shard.holds(row_id(s, c))]
    return rows


def _holds(where: str, params: Mapping[str, Any]) -> bool:
    """``where`` over a row's params; a name the row lacks makes it false, not an error (any other failure to
    evaluate, ``block_size.shape`` of an int, is a ``SpecError`` naming the expression)."""
    if names_in(where) - set(params):
        return False
    return bool(evaluate_expr(where, params))


def _raised_as_expected(exc_type: str, bases: list[str], message: str, entry: Mapping[str, Any]) -> bool:
    return entry["raises"] in (exc_type, *bases) and all(m in message for m in entry["match"])
