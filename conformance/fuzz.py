"""``qconform fuzz``: spend a time or case budget on a selection of rows, round after round, with fresh seeds.

Round 0 runs every selected row as ``run`` does (the failures stored in the database replayed first, then
the regression examples and boundary cases, then ``FIRST_ROUND_CASES`` random cases), seeded with the base
seed.  Each later round ``r`` runs only random cases, seeded with ``round_seed(base, r)``, on the rows that
have passed so far (a row stops at its first failure, as in ``run``: a failure is final, reported and
stored in the database).  A round's size doubles the work done so far (at least ``MIN_ROUND_S`` seconds, or
``FIRST_ROUND_CASES`` cases per row), capped by what is left of the budget, and is spread across the rows in
proportion to their weight (``row_weight``: more parameters, and failures stored for the row by earlier
runs, weigh more), converted to cases with each row's measured seconds per case.  A round is stopped at
the budget's end between rows; a row's random cases are never cut short.

Each row keeps, in ``fuzz-summary.json``, the seed and case count of every round it ran, and the command
that reproduces it: ``qconform run --seed S --cases N --spec C --where P`` draws the same random cases (after
the boundary cases, and exactly so where the database held nothing for the row).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.registry import Spec
from conformance.runner import ComboResult, row_id

__all__ = [
    "DATABASE_ENV",
    "DEFAULT_DATABASE",
    "FIRST_ROUND_CASES",
    "Budget",
    "FuzzRow",
    "Fuzzer",
    "default_database",
    "parse_duration",
    "round_seed",
    "row_weight",
    "where_of",
]

DEFAULT_DATABASE = "~/.cache/qconform/fuzz-db"
"""Where ``qconform fuzz`` keeps its failure database unless ``--database`` or ``DATABASE_ENV`` says."""
DATABASE_ENV = "QCONFORM_FUZZ_DB"
FIRST_ROUND_CASES = 20
"""Random cases per row in round 0 (the ``smoke`` profile's count)."""
PROGRESS_EVERY_S = 30.0
"""Within a long round, a progress line at most this often (and one at each round's end)."""
MIN_ROUND_S = 1.0
"""The shortest round after round 0 of a time budget, in seconds."""
MAX_ROW_CASES = 100_000
"""The most random cases one row gets in one round (a row's hypothesis run stays a few minutes at most)."""
KNOWN_FAILURE_WEIGHT = 4.0
"""How much more of the budget a row gets whose failures an earlier run stored (it passes now: a fix)."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smh]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``--for``: ``30s``, ``10m``, ``1.5h`` or plain seconds; ``ValueError`` unless positive and finite."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"expected a duration like 30s, 10m or 1h, got {text!r}")
    seconds = float(match[1]) * _UNIT_S[match[2]]
    if not (0 < seconds < math.inf):
        raise ValueError(f"expected a positive duration, got {text!r}")
    return seconds


def default_database() -> Path:
    """``$QCONFORM_FUZZ_DB``, else ``~/.cache/qconform/fuzz-db``."""
    return Path(os.environ.get(DATABASE_ENV) or DEFAULT_DATABASE).expanduser()


def round_seed(base: int, index: int) -> int:
    """The ``--seed`` of round ``index``: the base seed plus the round's index (round 0 is the base seed)."""
    return base + index


def row_weight(spec: Spec, known_failure: bool) -> float:
    """A row's share of a round: one plus its contract's parameter count (more to explore), times
    ``KNOWN_FAILURE_WEIGHT`` where the database held failures of it."""
    return (1.0 + len(spec.params)) * (KNOWN_FAILURE_WEIGHT if known_failure else 1.0)


def where_of(combo: Mapping[str, Any]) -> str | None:
    """A ``--where`` that selects exactly the row of ``combo`` (``None`` for a contract without params)."""
    return " and ".join(f"{k} == {v!r}" for k, v in combo.items()) or None


@dataclass(frozen=True)
class Budget:
    """``--for`` seconds or ``--cases`` cases (one of them)."""

    seconds: float | None = None
    cases: int | None = None

    def describe(self) -> str:
        return f"{self.seconds:g} s" if self.seconds is not None else f"{self.cases} cases"


@dataclass
class FuzzRow:
    """One row of the selection and what the fuzz did with it."""

    spec: Spec
    combo: dict[str, Any] | None
    weight: float
    result: ComboResult | None = None
    rounds: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return row_id(self.spec, self.combo)

    @property
    def active(self) -> bool:
        """Whether later rounds fuzz it: a conformance row that has passed so far."""
        return self.combo is not None and self.result is not None and self.result.status == "pass"

    def add(self, result: ComboResult, round_index: int, seed: int, cases: int) -> None:
        """Merge one round's result: counts add up, the first failure stays."""
        self.rounds.append({"round": round_index, "seed": seed, "random_cases": cases, "cases": result.cases,
                            "status": result.status})  # fmt: skip
        if self.result is None:
            self.result = result
            return
        merged = self.result
        merged.cases += result.cases
        merged.duration_s += result.duration_s
        for name, counts in result.error_counts.items():
            merged.error_counts[name] = merged.error_counts.get(name, 0) + counts
        if result.status != "pass":
            merged.status, merged.message = result.status, result.message
            merged.case, merged.mismatches = result.case, result.mismatches

    def summary(self, backend: str) -> dict[str, Any]:
        """The row's part of ``fuzz-summary.json``: status, cases, and each round with its reproducing command."""
        rounds = []
        for r in self.rounds:
            command = ["qconform", "run", "--backend", backend, "--spec", self.spec.contract]
            where = where_of(self.combo or {})
            if where:
                command += ["--where", where]
            command += ["--seed", str(r["seed"]), "--cases", str(r["random_cases"])]
            rounds.append({**r, "reproduce": shlex.join(command)})
        result = self.result
        return {
            "id": self.id,
            "weight": self.weight,
            "status": None if result is None else result.status,
            "cases": 0 if result is None else result.cases,
            "duration_s": 0.0 if result is None else round(result.duration_s, 4),
            "rounds": rounds,
        }


Execute = Callable[[Sequence[tuple[FuzzRow, int]], int, bool, Callable[[], bool], Callable[[ComboResult], None]], None]
"""``execute(rows_and_cases, seed, boundary, stop, on_result)``: run each row with that many random cases under
that seed (its examples and boundary cases too where ``boundary``), checking ``stop()`` between rows where it
can, handing each result to ``on_result`` as it finishes."""


class Fuzzer:
    """Rounds over ``rows`` within ``budget`` (module docstring); ``execute`` runs one round's rows."""

    def __init__(
        self,
        rows: Sequence[FuzzRow],
        budget: Budget,
        base_seed: int,
        execute: Execute,
        *,
        log: Callable[[str], None] = lambda line: None,
        on_row: Callable[[FuzzRow, ComboResult], None] = lambda row, result: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.rows, self.budget, self.base_seed = list(rows), budget, base_seed
        self.execute, self.log, self.on_row, self.clock = execute, log, on_row, clock
        self.rounds: list[dict[str, Any]] = []
        self.start = clock()
        self.cases = 0

    def spent(self) -> bool:
        if self.budget.seconds is not None:
            return self.clock() - self.start >= self.budget.seconds
        return self.budget.cases is not None and self.cases >= self.budget.cases

    @property
    def failures(self) -> int:
        return sum(1 for r in self.rows if r.result is not None and r.result.status not in ("pass", "not-implemented"))

    def run(self) -> None:
        """Round 0, then rounds until the budget is spent or no row is left to fuzz."""
        index = 0
        plan = [(row, FIRST_ROUND_CASES) for row in self.rows]
        while plan:
            self._round(index, plan)
            index += 1
            if self.spent():
                break
            plan = self._plan([row for row in self.rows if row.active])

    def _plan(self, active: Sequence[FuzzRow]) -> list[tuple[FuzzRow, int]]:
        """Each active row's random cases in the next round (module docstring)."""
        if not active:
            return []
        total = sum(row.weight for row in active)
        if self.budget.seconds is not None:
            elapsed = self.clock() - self.start
            round_s = min(self.budget.seconds - elapsed, max(MIN_ROUND_S, elapsed))
            plan = []
            for row in active:
                assert row.result is not None
                per_case = row.result.duration_s / max(row.result.cases, 1)
                cases = round_s * row.weight / total / max(per_case, 1e-6)
                plan.append((row, int(min(max(cases, 1), MAX_ROW_CASES))))
            return plan
        assert self.budget.cases is not None
        size = min(self.budget.cases - self.cases, max(FIRST_ROUND_CASES * len(active), self.cases))
        return [(row, int(min(max(size * row.weight / total, 1), MAX_ROW_CASES))) for row in active]

    def _round(self, index: int, plan: Sequence[tuple[FuzzRow, int]]) -> None:
        seed = round_seed(self.base_seed, index)
        by_id = {row.id: (row, cases) for row, cases in plan}
        started, cases_before = self.clock(), self.cases
        ran = 0
        last_line = started

        def finished(result: ComboResult) -> None:
            nonlocal ran, last_line
            row, cases = by_id[result.id]
            row.add(result, index, seed, cases)
            self.cases += result.cases
            ran += 1
            self.on_row(row, result)
            if self.clock() - last_line >= PROGRESS_EVERY_S and ran < len(plan):
                last_line = self.clock()
                self._progress(index, seed, f"{ran}/{len(plan)} rows so far", started, cases_before)

        self.execute(plan, seed, index == 0, self.spent, finished)
        duration = self.clock() - started
        self.rounds.append({"round": index, "seed": seed, "boundary": index == 0, "rows": ran,
                            "cases": self.cases - cases_before, "duration_s": round(duration, 3)})  # fmt: skip
        self._progress(index, seed, f"{ran} rows", started, cases_before)

    def _progress(self, index: int, seed: int, rows: str, started: float, cases_before: int) -> None:
        """A progress line: the round's rows, cases and cases/s; rows covered, cases, failures and budget in all."""
        cases = self.cases - cases_before
        rate = cases / max(self.clock() - started, 1e-9)
        covered = sum(1 for row in self.rows if row.result is not None)
        elapsed = self.clock() - self.start
        self.log(
            f"qconform fuzz: round {index} (seed {seed}): {rows}, {cases:,} cases, {rate:,.0f} cases/s; "
            f"{covered}/{len(self.rows)} rows covered, {self.cases:,} cases in all, {self.failures} failing, "
            f"{elapsed:.0f} s of {self.budget.describe()}"
        )

    def summary(self, backend: str, database: str | None, interrupted: bool) -> dict[str, Any]:
        """``fuzz-summary.json``: the budget, the base seed, each round, each row's rounds."""
        return {
            "backend": backend,
            "base_seed": self.base_seed,
            "budget": {"seconds": self.budget.seconds, "cases": self.budget.cases},
            "database": database,
            "interrupted": interrupted,
            "duration_s": round(self.clock() - self.start, 3),
            "cases": self.cases,
            "rounds": self.rounds,
            "rows": [row.summary(backend) for row in self.rows],
        }
