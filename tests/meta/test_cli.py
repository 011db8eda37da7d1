"""The command line: reports, replay, exit codes."""

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema

from conformance.case import decode_token
from conformance.cli import main

SCHEMA = json.loads((Path(__file__).parents[2] / "conformance" / "schemas" / "report.schema.json").read_text())


def test_run_writes_three_reports_that_match_the_schema(tmp_path, capsys):
    code = main(
        ["run", "--backend", "reference", "--spec", "glu.*", "--profile", "smoke", "--report", str(tmp_path), "--quiet"]
    )
    assert code == 0
    report = json.loads((tmp_path / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["verdict"] == "conformant"
    rows = sum(len(s["rows"]) for s in report["specs"])  # every glu contract's rows, invalid-input rows too
    assert rows >= 4 and report["summary"]["pass"] == rows
    assert "| `glu.interleave` |" in (tmp_path / "report.md").read_text()
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == str(rows) and suite.get("failures") == "0"
    assert f"conformant: {rows} pass" in capsys.readouterr().out


def test_failing_run_exits_1_and_its_replay_reproduces_the_failure(tmp_path, capsys):
    backend = "conformance.plugins.planted:negative_zero_flushed"
    args = [
        "run",
        "--backend",
        backend,
        "--spec",
        "cast.fp8",
        "--profile",
        "smoke",
        "--report",
        str(tmp_path),
        "--isolation",
        "none",
    ]
    assert main(args) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    failed = [r for r in report["results"] if r["status"] == "fail"]
    assert failed and all(r["replay"].startswith(f"qconform replay --backend {backend} ") for r in failed)
    assert "## Counterexamples" in (tmp_path / "report.md").read_text()
    token = failed[0]["replay"].split()[-1].strip("'")
    assert decode_token(token).contract == "cast.fp8"
    capsys.readouterr()
    assert main(["replay", "--backend", backend, token]) == 1
    assert "but reference gives 0x80 (-0.0)" in capsys.readouterr().out
    assert main(["replay", "--backend", "reference", token]) == 0


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main(["run", "--backend", "no-such-backend", "--spec", "glu.*"]) == 2
    assert "unknown backend 'no-such-backend'" in capsys.readouterr().err
    assert main(["run", "--backend", "reference", "--spec", "nope.*"]) == 2
    assert main(["run", "--backend", "os:nothing_here", "--spec", "glu.*", "--isolation", "none"]) == 2
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", "--backend", "reference", "--spec", "glu.*", "--report", str(blocker / "sub")]) == 2
    assert "cannot write reports" in capsys.readouterr().err


def test_list_and_show(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "cast.fp8" in out and "overflow in ['saturate', 'nonsaturating']" in out
    assert main(["show", "glu.interleave"]) == 0
    assert "contract: glu.interleave" in capsys.readouterr().out


def test_where_selects_rows_by_params(tmp_path, capsys):
    args = [
        "run",
        "--backend",
        "reference",
        "--spec",
        "cast.fp8",
        "--profile",
        "smoke",
        "--isolation",
        "none",
        "--quiet",
    ]
    assert main([*args, "--where", "rounding == 'rtz' and format == 'float8_e5m2'", "--report", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "report.json").read_text())["results"]
    assert [(r["params"]["format"], r["params"]["rounding"]) for r in rows] == [("float8_e5m2", "rtz")] * 2
    assert main([*args, "--where", "no_such_param == 1"]) == 2
    assert "unknown names ['no_such_param']" in capsys.readouterr().err
