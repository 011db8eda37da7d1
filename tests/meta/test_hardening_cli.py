"""Issue #29: honest verdicts, bounded expressions, refused alias bombs, messages instead of tracebacks,
positive timeouts, isolated replay, a ``supports()`` that raises, interrupts, and the backend-load message.

Each test here fails on 3adef16 (the commit the issue audited).  Most run in this process with
``--isolation none``; the few that need a worker or a signal spawn one."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import conformance.registry
from conformance.cli import main
from conformance.errors import SpecError
from conformance.expr import evaluate
from conformance.registry import load_spec, load_specs
from conformance.runner import Runner

SPECS = Path(conformance.registry.__file__).parents[1] / "specs"
GLU = "glu.*interleave"  # glu.deinterleave and glu.interleave: four rows


def _spec_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, change) -> Path:
    """``specs/glu/<name>.yaml`` copied under ``tmp_path/specs`` with ``change(text)`` applied; the registry
    reads that directory for the rest of the test."""
    target = tmp_path / "specs" / "glu" / f"{name}.yaml"
    target.parent.mkdir(parents=True)
    target.write_text(change((SPECS / "glu" / f"{name}.yaml").read_text()))
    monkeypatch.setattr(conformance.registry, "default_spec_dir", lambda: tmp_path / "specs")
    return target


# -- 1. an empty selection -------------------------------------------------------------------
def test_a_where_that_selects_no_row_is_a_usage_error_naming_the_values(cli, tmp_path):
    report = tmp_path / "r"
    outcome = cli("run", "--backend", "reference", "--spec", "cast.fp8", "--where", "rounding == 'rn'",
                  "--isolation", "none", "--quiet", "--report", report)  # fmt: skip
    assert outcome.code == 2, outcome.out + outcome.err
    assert "--where \"rounding == 'rn'\" selects no row" in outcome.err
    assert "rounding takes ['rne', 'rtz', 'stochastic']" in outcome.err
    assert outcome.out == "" and not report.exists()


# -- 2. verdicts that say what they cover ------------------------------------------------------
def test_a_verdict_says_which_rows_it_covers(run_report, cli, tmp_path):
    partial = run_report("glu_only", tmp_path / "partial", "--spec", GLU, "--isolation", "none")
    assert partial.code == 0, partial.err
    headline = "conformant on the 2 rows it implements (2 of 4 not implemented)"
    assert partial.out.startswith(f"{headline}: 2 pass, 0 fail, 0 error, 0 crashed, 2 not-implemented")
    report = json.loads((tmp_path / "partial" / "report.json").read_text())
    assert report["verdict"] == "conformant" and report["headline"] == headline
    assert [c["headline"] for c in report["column_verdicts"]] == [headline]
    assert f"**Verdict: {headline}**" in (tmp_path / "partial" / "report.md").read_text()
    assert f'<span class="verdict-word">{headline}</span>' in (tmp_path / "partial" / "report.html").read_text()
    rows = {r["id"]: r for r in report["results"]}
    assert (
        rows["glu.deinterleave[,invalid-input]"]["message"] == "backend 'glu-only' does not implement glu.deinterleave"
    )

    whole = run_report("reference_subset", tmp_path / "whole", "--spec", GLU, "--isolation", "none")
    assert whole.out.startswith("conformant: 4 pass"), whole.out  # bare: every row ran
    merged = cli("report", "merge", tmp_path / "partial" / "report.json", tmp_path / "whole" / "report.json",
                 "--report", tmp_path / "merged")  # fmt: skip
    assert merged.code == 0, merged.err
    lines = merged.out.splitlines()
    assert lines[0].startswith("conformant on the 6 rows the backends implement (2 of 8 not implemented): 6 pass")
    assert lines[1] == f"  glu-only (cpu): {headline}: 2 pass, 0 fail, 0 error, 0 crashed, 2 not-implemented"
    assert lines[2] == "  subset (cpu): conformant: 4 pass, 0 fail, 0 error, 0 crashed, 0 not-implemented"
    md = (tmp_path / "merged" / "report.md").read_text()
    assert f"- `glu-only (cpu)`: **{headline}**" in md and "- `subset (cpu)`: **conformant**" in md


# -- 3. bounded expressions ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("9**9**9 == 1", "exponent 387420489 is beyond 1100"),
        ("2**65", "beyond 2^64"),
        ("3**41 * 3**41", "beyond 2^64"),
        ("[0] * 10**9", "a sequence longer than 4096"),
        ("'%0999999999d' % 1", "Mod does not apply to a str"),
        ("1 // 0", "ZeroDivisionError"),
    ],
)
def test_expressions_are_bounded(source, message):
    start = time.perf_counter()
    with pytest.raises(SpecError, match=re.escape(message)) as raised:
        evaluate(source, {})
    assert source in str(raised.value) and time.perf_counter() - start < 0.5


def test_an_unbounded_where_or_spec_constraint_is_a_usage_error(cli, tmp_path, monkeypatch):
    args = ("run", "--backend", "reference", "--spec", "glu.*", "--isolation", "none", "--quiet")
    outcome = cli(*args, "--where", "9**9**9 == 1")
    assert outcome.code == 2 and "expression '9**9**9 == 1': exponent 387420489" in outcome.err
    path = _spec_copy(
        tmp_path,
        monkeypatch,
        "deinterleave",
        lambda t: t.replace("\ninputs:", 'constraints: ["9**9**9 > 0"]\n\ninputs:'),
    )
    outcome = cli(*args)
    assert outcome.code == 2 and f"{path}: constraints: expression '9**9**9 > 0'" in outcome.err, outcome.err


# -- 4. YAML alias bombs -------------------------------------------------------------------------
EXAMPLE_INPUTS = "inputs: {w: {dtype: float32, values: [0.0, 10.0, 1.0, 11.0]}}"


def test_a_yaml_alias_bomb_is_refused_at_load_with_file_and_line(tmp_path, monkeypatch):
    levels = ["          - &l0 [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]"]
    levels += [f"          - &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 6)]
    bomb = "inputs:\n      w:\n        dtype: float32\n        values:\n" + "\n".join(levels)
    path = _spec_copy(tmp_path, monkeypatch, "deinterleave", lambda t: t.replace(EXAMPLE_INPUTS, bomb))
    line = 1 + path.read_text().splitlines().index(levels[4])  # the first level past 100,000 nodes (111,111)
    with pytest.raises(SpecError, match=rf"deinterleave\.yaml:{line}: YAML aliases expand this value to more than"):
        load_spec(path)
    path.write_text(path.read_text().replace(levels[1], "          - &l1 [*l1]"))
    with pytest.raises(SpecError, match="a YAML alias refers to the node that contains it"):
        load_spec(path)
    assert load_spec(SPECS / "linear" / "quantized.yaml")  # aliases that stay small (merge keys) still load


# -- 5. messages, not tracebacks --------------------------------------------------------------------
def test_show_takes_a_glob_as_run_does(cli):
    outcome = cli("show", "glu.*")
    assert (
        outcome.code == 0 and "contract: glu.deinterleave" in outcome.out and "contract: glu.interleave" in outcome.out
    )


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("qc1:not-base64!!", "is not a whole replay token"),
        ("qc1:eNqrVkrOz0vOz03NS1GyUqiu", "is not a whole replay token"),  # a truncated token
        ("no/such/case.json", "no case file 'no/such/case.json'"),
    ],
)
def test_replay_of_a_bad_token_or_file_is_a_usage_error(cli, case, message):
    outcome = cli("replay", "--backend", "reference", "--isolation", "none", case)
    assert outcome.code == 2 and message in outcome.err, outcome.err


def test_a_where_that_cannot_be_evaluated_is_a_usage_error(cli):
    outcome = cli("run", "--backend", "reference", "--spec", "glu.*", "--isolation", "none", "--quiet",
                  "--where", "block_size.shape == 1")  # fmt: skip
    assert outcome.code == 2 and ".shape reads an input's shape, but block_size is 4" in outcome.err, outcome.err


def test_a_closed_stdout_is_not_a_traceback():
    command = f"{sys.executable} -m conformance.cli show 'glu.*' | head -1"
    process = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    assert process.stdout.startswith("# ") and process.stderr == "", process.stderr


# -- 6. timeouts -----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "soon"])
@pytest.mark.parametrize("command", ["run", "replay", "vectors check"])
def test_a_non_positive_timeout_is_a_usage_error(capsys, value, command):
    with pytest.raises(SystemExit) as exited:
        rest = ["--backend", "reference", "--spec", "glu.interleave", "--isolation", "none", "--quiet"]
        main([*command.split(), "--timeout", value, *(rest if command == "run" else ["x"])])
    assert exited.value.code == 2
    assert "argument --timeout: expected a " in capsys.readouterr().err


# -- 7. replay isolated ------------------------------------------------------------------------------
def test_replay_runs_isolated_and_says_crashed_or_timeout(cli, test_backends):
    spec = load_specs("glu.deinterleave")[0]
    token = next(Runner.deterministic_cases(spec, {})).token()
    hung = cli("replay", "--backend", f"{test_backends}:hangs", "--timeout", "1", token)
    assert hung.code == 1 and "crashed: backend timeout: no answer within 1 s" in hung.out, hung.out + hung.err
    spec = load_specs("glu.interleave")[0]
    token = next(Runner.deterministic_cases(spec, {})).token()
    died = cli("replay", "--backend", f"{test_backends}:crashes", "--isolation", "process", token)
    assert died.code == 1 and "crashed: backend crash: the backend process died (exit code 139)" in died.out


# -- 8. supports() that raises -----------------------------------------------------------------------
@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_supports_that_raises_is_an_error_row_and_the_run_goes_on(run_report, tmp_path, isolation):
    outcome = run_report("supports_raises", tmp_path, "--spec", "decode.fp8", "--isolation", isolation)
    assert outcome.code == 1, outcome.err
    rows = {r["id"]: r for r in json.loads((tmp_path / "report.json").read_text())["results"]}
    bad = rows["decode.fp8[format=float8_e5m2]"]
    assert bad["status"] == "error"
    assert bad["message"] == "the backend's supports() for decode.fp8 raised KeyError: 'no table for float8_e5m2'"
    assert rows["decode.fp8[format=float8_e5m2fnuz]"]["status"] == "pass"  # the next row still ran


# -- 9. interrupts -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("how", "isolation"), [("SIGINT to the process group", "process"), ("SIGTERM", "none")])
def test_an_interrupted_run_writes_an_incomplete_report_and_exits_130(test_backends, tmp_path, how, isolation):
    report = tmp_path / "r"
    command = [sys.executable, "-m", "conformance.cli", "run", "--backend", f"{test_backends}:hangs_late",
               "--spec", "glu.*", "--profile", "smoke", "--quiet", "--isolation", isolation,
               "--report", str(report)]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    journal = report / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:  # the two glu.deinterleave rows, then the hang
        if journal.exists() and journal.read_text().count('"result"') >= 2:
            break
        time.sleep(0.2)
    time.sleep(0.5)
    if how.startswith("SIGINT"):
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C at a terminal does
    else:
        process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "qconform: interrupted after 2 of 7 rows (5 not run); wrote the incomplete report to" in err
    assert "to finish, run it again: qconform run" in err
    assert out.startswith("incomplete: 2 pass")
    written = json.loads((report / "report.json").read_text())
    assert written["verdict"] == "incomplete" and "was interrupted: 5 of its 7 rows not run" in written["incomplete"][0]
    assert written["runs"][0]["rows_not_run"][0] == "glu.interleave" and not journal.exists()


# -- also: the backend-load message, the current directory on the import path ------------------------------
@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_backend_that_cannot_load_is_named_once(cli, tmp_path, monkeypatch, isolation):
    (tmp_path / "broken_plugin_29.py").write_text("raise RuntimeError('no device here')\n")
    monkeypatch.chdir(tmp_path)
    outcome = cli("run", "--backend", "broken_plugin_29:backend", "--spec", "glu.*", "--isolation", isolation)
    assert outcome.code == 2, outcome.err
    assert outcome.err.count("cannot load backend") == 1 and "RuntimeError: no device here" in outcome.err, outcome.err


def test_a_module_attr_backend_is_imported_from_the_current_directory(cli, tmp_path, monkeypatch):
    (tmp_path / "local_plugin_29.py").write_text(
        "from conformance.backends import Backend\nimport reference.glu\n"
        "def backend():\n    return Backend(name='local', device='cpu', array_kind='numpy',\n"
        "                   contracts={'glu.interleave': reference.glu.interleave})\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    outcome = cli("run", "--backend", "local_plugin_29:backend", "--spec", "glu.interleave", "--isolation", "none",
                  "--quiet", "--profile", "smoke")  # fmt: skip
    assert outcome.code == 0 and outcome.out.startswith("conformant on the 1 row it implements"), outcome.out


def test_an_interrupted_run_with_jobs_stops_its_workers_and_exits_130(test_backends, tmp_path):
    report = tmp_path / "r"
    command = [sys.executable, "-m", "conformance.cli", "run", "--backend", f"{test_backends}:hangs_late",
               "--spec", "glu.*", "--profile", "smoke", "--quiet", "--jobs", "2", "--report", str(report)]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    journal = report / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:  # rows finish in one worker, one hangs
        if journal.exists() and journal.read_text().count('"result"') >= 2:
            break
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    written = json.loads((report / "report.json").read_text())
    assert written["verdict"] == "incomplete" and "glu.interleave" in written["runs"][0]["rows_not_run"]
