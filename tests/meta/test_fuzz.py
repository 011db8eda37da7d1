"""``qconform fuzz`` and the failure database: a short budget, a planted bug found, stored and replayed first,
the round planner, bad arguments and Ctrl-C (``conformance/fuzz.py``, ``Runner.database``)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis.database import DirectoryBasedExampleDatabase

from conformance.cli import main
from conformance.fuzz import Budget, Fuzzer, FuzzRow, parse_duration, round_seed
from conformance.registry import load_specs
from conformance.runner import ComboResult, Runner, database_key, select_rows
from conformance.worker import InProcessBackend

SCHEMA = json.loads((Path(__file__).parents[2] / "conformance" / "schemas" / "report.schema.json").read_text())
ONE_ROW = "format == 'float8_e4m3fn' and rounding == 'rne' and overflow == 'saturate'"
ROW_ID = "cast.fp8[format=float8_e4m3fn,overflow=saturate,rounding=rne]"


def _fuzz(cli: Any, tmp_path: Path, backend: str, *args: str) -> Any:
    return cli("fuzz", "--backend", backend, "--spec", "cast.fp8", "--where", ONE_ROW, "--isolation", "none",
               "--database", tmp_path / "db", "--quiet", *args)  # fmt: skip


def _row(report: Path) -> dict[str, Any]:
    (row,) = json.loads((report / "report.json").read_text())["results"]
    return row


def test_a_short_fuzz_of_the_reference_passes_and_says_how_to_reproduce_each_round(cli, tmp_path):
    outcome = _fuzz(cli, tmp_path, "reference", "--cases", "300", "--seed", "7", "--report", tmp_path / "r")
    assert outcome.code == 0, outcome.err
    assert "base seed 7" in outcome.err and outcome.out.startswith("conformant")
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["runs"][0]["profile"] == "fuzz" and report["runs"][0]["seed"] == 7
    summary = json.loads((tmp_path / "r" / "fuzz-summary.json").read_text())
    assert summary["base_seed"] == 7 and summary["cases"] >= 300 and len(summary["rounds"]) >= 2
    (row,) = summary["rows"]
    assert row["id"] == ROW_ID and row["status"] == "pass" and row["cases"] == _row(tmp_path / "r")["cases"]
    assert [r["seed"] for r in row["rounds"]] == [round_seed(7, i) for i in range(len(row["rounds"]))]
    later = row["rounds"][1]
    assert later["reproduce"].endswith(f"--seed {round_seed(7, 1)} --cases {later['random_cases']}")
    assert "--where 'format == '\"'\"'float8_e4m3fn'\"'\"'" in later["reproduce"]  # shell-quoted, whole


def test_a_time_budget_is_kept(cli, tmp_path):
    start = time.monotonic()
    outcome = _fuzz(cli, tmp_path, "reference", "--for", "2s", "--report", tmp_path / "r")
    assert outcome.code == 0, outcome.err
    assert time.monotonic() - start < 10
    summary = json.loads((tmp_path / "r" / "fuzz-summary.json").read_text())
    assert summary["budget"] == {"seconds": 2.0, "cases": None} and summary["duration_s"] >= 2.0


def test_a_planted_bug_is_stored_then_replayed_first_by_the_next_run(cli, test_backends, tmp_path):
    planted = f"{test_backends}:negative_zero_flushed"
    found = _fuzz(cli, tmp_path, planted, "--cases", "50", "--report", tmp_path / "first")
    assert found.code == 1 and "FAIL " + ROW_ID in found.out, found.out + found.err
    (spec,) = load_specs("cast.fp8")
    ((_, combo),) = select_rows([spec], ONE_ROW)
    database = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    assert len(list(database.fetch(database_key(spec, combo)))) == 1
    again = _fuzz(cli, tmp_path, planted, "--replay-only", "--report", tmp_path / "replay")
    assert again.code == 1, again.out + again.err
    row = _row(tmp_path / "replay")
    assert row["status"] == "fail" and row["cases"] == 1 and "replayed first" in row["message"]
    assert row["counterexample"] is not None
    # run --database replays it first too (before the examples and boundary cases)
    run = cli("run", "--backend", planted, "--spec", "cast.fp8", "--where", ONE_ROW, "--isolation", "none",
              "--quiet", "--database", tmp_path / "db", "--report", tmp_path / "run")  # fmt: skip
    assert run.code == 1 and _row(tmp_path / "run")["cases"] == 1
    # fixed: the stored case passes, is dropped, and replay-only has nothing left to check
    fixed = _fuzz(cli, tmp_path, "reference", "--replay-only")
    assert fixed.code == 0 and not list(database.fetch(database_key(spec, combo)))
    assert "0 cases on 0 of 0 rows" in _fuzz(cli, tmp_path, "reference", "--replay-only").err


def test_a_failure_found_by_random_cases_is_replayed_within_the_first_example(test_backends, tmp_path):
    (spec,) = load_specs("cast.fp8")
    ((_, combo),) = select_rows([spec], ONE_ROW)
    database = DirectoryBasedExampleDatabase(str(tmp_path / "db"))
    handle = InProcessBackend(f"{test_backends}:negative_zero_flushed", 60)
    first = Runner(handle, seed=1, database=database, cases=200, boundary=False).run_combo(spec, combo)
    assert first.status == "fail" and first.cases > 1
    assert list(database.fetch(database_key(spec, combo, 10)))  # hypothesis's own entry, 10 cases per example
    for seed_value, cases in ((2, 200), (3, 20)):  # another seed, another list size: the stored case first
        again = Runner(handle, seed=seed_value, database=database, cases=cases, boundary=False).run_combo(spec, combo)
        assert again.status == "fail" and again.cases == 1
    without = Runner(handle, seed=1, cases=200, boundary=False)
    assert without.database is None and without.run_combo(spec, combo).cases > 1  # run's default: no database


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rounds_double_and_spread_by_weight():
    specs = load_specs("cast.fp8")
    (spec,) = specs
    combos = spec.param_combinations()[:2]
    rows = [FuzzRow(spec, combos[0], 1.0), FuzzRow(spec, combos[1], 3.0)]
    clock = _Clock()
    plans: list[tuple[int, bool, list[int]]] = []

    def execute(plan, seed_value, boundary, stop, on_result):
        plans.append((seed_value, boundary, [n for _, n in plan]))
        for row, n in plan:
            clock.now += 0.001 * n
            on_result(ComboResult(spec.contract, dict(row.combo), "pass", cases=n, duration_s=0.001 * n))

    fuzzer = Fuzzer(rows, Budget(cases=1000), 5, execute, clock=clock)
    fuzzer.run()
    assert fuzzer.cases >= 1000 and plans[0] == (5, True, [20, 20])
    assert all(not boundary for _, boundary, _ in plans[1:]) and [s for s, _, _ in plans] == list(
        range(5, 5 + len(plans))
    )
    for _, _, (light, heavy) in plans[1:]:
        assert heavy == pytest.approx(3 * light, rel=0.05)
    sizes = [sum(n) for _, _, n in plans]
    assert sizes[1] == 40 and sizes[2] == 80  # doubles the cases so far
    timed = Fuzzer([FuzzRow(spec, combos[0], 1.0)], Budget(seconds=10.0), 0, execute, clock=clock)
    clock.now = 0.0
    timed.start = 0.0
    timed.run()
    assert 10.0 <= clock.now < 12.0


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--for", "0"], "argument --for: expected a positive duration, got '0'"),
        (["--for", "abc"], "argument --for: expected a duration like 30s, 10m or 1h, got 'abc'"),
        (["--for", "10s", "--cases", "5"], "argument --cases: not allowed with argument --for"),
        (["--cases", "0"], "argument --cases: expected a whole number >= 1"),
        ([], "one of the arguments --for --cases --replay-only is required"),
    ],
)
def test_bad_budgets_are_usage_errors_naming_the_argument(capsys, args, named):
    with pytest.raises(SystemExit) as exit_:
        main(["fuzz", "--backend", "reference", *args])
    assert exit_.value.code == 2 and named in capsys.readouterr().err


def test_durations():
    assert [parse_duration(t) for t in ("30s", "10m", "1h", "1.5h", "90", " 2 s")] == [30, 600, 3600, 5400, 90, 2]
    for bad in ("", "-1s", "1d", "inf", "1e400"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)


def test_ctrl_c_stops_a_fuzz_with_its_reports(tmp_path):
    report = tmp_path / "r"
    command = [sys.executable, "-m", "conformance.cli", "fuzz", "--backend", "reference", "--spec", "cast.fp8",
               "--where", "format == 'float8_e4m3fn'", "--for", "1h", "--isolation", "none",
               "--database", str(tmp_path / "db"), "--report", str(report)]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stderr is not None
    for line in process.stderr:  # round 0 over: every row has a result
        if "round 1 " in line:
            break
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    summary = json.loads((report / "fuzz-summary.json").read_text())
    assert summary["interrupted"] and len(summary["rows"]) == 6
    written = json.loads((report / "report.json").read_text())
    jsonschema.validate(written, SCHEMA)
    assert len(written["results"]) == 6 and written["runs"][0]["complete"] is False


def test_the_hypofuzz_targets_are_given_tests_one_per_row_each_with_its_own_key(test_backends):
    from hypothesis.internal.reflection import function_digest

    from conformance.hypofuzz import fuzz_targets

    targets = fuzz_targets("reference", "cast.fp8", "format == 'float8_e4m3fn'", max_examples=5)
    assert len(targets) == 6 and all(name.startswith("test_cast_fp8_format_float8_e4m3fn_") for name in targets)
    inner = [t.hypothesis.inner_test for t in targets.values()]  # type: ignore[attr-defined]
    assert len({function_digest(f) for f in inner}) == 6  # one database key per row
    other = fuzz_targets("fast", "cast.fp8", "format == 'float8_e4m3fn'", max_examples=5).values()
    assert not {function_digest(f) for f in inner} & {function_digest(t.hypothesis.inner_test) for t in other}
    for test in targets.values():
        test()
    (planted,) = fuzz_targets(f"{test_backends}:negative_zero_flushed", "cast.fp8", ONE_ROW, max_examples=5).values()
    with pytest.raises(AssertionError, match="reference gives 0x80"):
        planted()


def test_replay_only_rechecks_every_row_with_stored_failures(cli, test_backends, tmp_path):
    planted, two_rows = f"{test_backends}:negative_zero_flushed", "format == 'float8_e4m3fn' and rounding == 'rne'"
    args = ["fuzz", "--backend", planted, "--spec", "cast.fp8", "--where", two_rows, "--isolation", "none",
            "--database", tmp_path / "db", "--quiet"]  # fmt: skip
    assert cli(*args, "--cases", "20").code == 1
    again = cli(*args, "--replay-only", "--report", tmp_path / "r")
    assert again.code == 1
    results = json.loads((tmp_path / "r" / "report.json").read_text())["results"]
    assert [(r["status"], r["cases"]) for r in results] == [("fail", 1), ("fail", 1)]
    summary = json.loads((tmp_path / "r" / "fuzz-summary.json").read_text())
    assert summary["replay_only"] and [len(r["rounds"]) for r in summary["rows"]] == [1, 1]


def test_run_with_a_rounds_seed_and_cases_draws_that_rounds_random_cases(tmp_path):
    """What ``fuzz-summary.json``'s ``reproduce`` promises: a later round (no boundary cases, an empty
    database) and ``run --seed S --cases N`` (boundary cases first, no database) draw the same random cases."""
    (spec,) = load_specs("cast.fp8")
    ((_, combo),) = select_rows([spec], ONE_ROW.replace("'rne'", "'stochastic'"))

    class Recording(Runner):
        seen: list[str]

        def evaluate_many(self, spec, cases):  # type: ignore[no-untyped-def]
            self.seen.extend(c.token() for c in cases)
            return super().evaluate_many(spec, cases)

    def drawn(**kw: Any) -> list[str]:
        runner = Recording(InProcessBackend("reference", 60), seed=42, cases=100, **kw)
        runner.seen = []
        assert runner.run_combo(spec, combo).status == "pass"
        return runner.seen

    fuzz_round = drawn(boundary=False, database=DirectoryBasedExampleDatabase(str(tmp_path / "db")))
    run = drawn()
    assert len(fuzz_round) == 100 and len(run) > 100 and run[-100:] == fuzz_round


def test_progress_lines_say_cases_per_second_rows_covered_and_failures():
    (spec,) = load_specs("cast.fp8")
    combos = spec.param_combinations()[:3]
    clock, lines = _Clock(), []

    def execute(plan, seed_value, boundary, stop, on_result):
        for row, n in plan:
            clock.now += 20.0  # slow rows: a line within the round too
            status = "fail" if row.combo == combos[2] else "pass"
            on_result(ComboResult(spec.contract, dict(row.combo), status, cases=n, duration_s=20.0))

    rows = [FuzzRow(spec, combo, 1.0) for combo in combos]
    Fuzzer(rows, Budget(seconds=100.0), 0, execute, log=lines.append, clock=clock).run()
    assert lines[0].startswith("qconform fuzz: round 0 (seed 0): 2/3 rows so far, 40 cases, 1 cases/s; 2/3 rows")
    assert (
        lines[1].startswith("qconform fuzz: round 0 (seed 0): 3 rows, 60 cases")
        and "1 failing, 60 s of 100 s" in lines[1]
    )
    assert lines[-1].startswith("qconform fuzz: round 1 (seed 1): 2 rows") and "3/3 rows covered" in lines[-1]


def test_a_budget_spent_before_every_row_ran_gives_an_incomplete_report(cli, tmp_path):
    outcome = cli("fuzz", "--backend", "reference", "--spec", "cast.fp8", "--where", "format == 'float8_e4m3fn'",
                  "--isolation", "none", "--database", tmp_path / "db", "--for", "0.001s",
                  "--report", tmp_path / "r")  # fmt: skip
    assert outcome.code == 0 and re.search(r"the budget ran out before [56] of 6 rows ran", outcome.err), outcome.err
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["verdict"] == "incomplete" and len(report["runs"][0]["rows_not_run"]) in (5, 6)  # a loaded machine


def test_the_default_database_is_in_the_users_cache_unless_the_environment_says(monkeypatch, tmp_path):
    from conformance.fuzz import default_database

    monkeypatch.delenv("QCONFORM_FUZZ_DB", raising=False)
    assert default_database() == Path.home() / ".cache" / "qconform" / "fuzz-db"
    monkeypatch.setenv("QCONFORM_FUZZ_DB", str(tmp_path / "shared"))
    assert default_database() == tmp_path / "shared"
