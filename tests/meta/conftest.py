"""Fixtures of the engine tests: the backends of ``qconform_test_backends`` made loadable, a way to run
the command line in this process, and one merged report (several backends, a failure, a crash, a hang,
a contract with a tolerance) that the report, browser and bundle tests read."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main

HERE = Path(__file__).parent
BACKENDS = "qconform_test_backends"


@dataclass
class Outcome:
    """What one ``qconform`` command did."""

    code: int
    out: str
    err: str


def qconform(*args: str | Path) -> Outcome:
    """Run ``qconform ARGS`` in this process, capturing its output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return Outcome(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="session")
def test_backends() -> Iterator[str]:
    """``qconform_test_backends`` on ``sys.path`` (a spawned worker inherits it) and on ``PYTHONPATH``
    (for ``qconform`` subprocesses); the module name, for ``--backend qconform_test_backends:<name>``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(HERE))
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        yield BACKENDS


@pytest.fixture(scope="session")
def cli() -> Callable[..., Outcome]:
    """``cli(*args)`` runs ``qconform ARGS`` in this process: its exit code, stdout and stderr."""
    return qconform


def _run_report(test_backends: str, backend: str, report: Path, *args: str) -> Outcome:
    command = ["run", "--backend", f"{test_backends}:{backend}", "--profile", "smoke", "--quiet", "--report", report]
    return qconform(*command, *args)


@pytest.fixture(scope="session")
def run_report(test_backends: str) -> Callable[..., Outcome]:
    """``run_report(backend, report_dir, *args)``: ``qconform run`` of a test backend, smoke profile."""
    return lambda backend, report, *args: _run_report(test_backends, backend, report, *args)


@pytest.fixture(scope="session")
def matrix_report(test_backends: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A report merged from five runs: the reference subset, a crash, a hang, a contract within its
    tolerance and a planted bug.  ``dir`` is its directory, ``report`` its ``report.json``."""
    root = tmp_path_factory.mktemp("matrix")
    rne_e4m3 = "format == 'float8_e4m3fn' and rounding == 'rne'"
    runs = [
        ("reference_subset", "glu.*", ["--isolation", "none"]),
        ("crashes", "glu.*", []),
        ("hangs", "glu.*", ["--timeout", "1"]),
        ("one_ulp_off", "int4.tinygemm_mm", ["--isolation", "none", "--where", "group_size == 32"]),
        ("negative_zero_flushed", "cast.fp8", ["--isolation", "none", "--where", rne_e4m3]),
    ]
    for backend, spec, extra in runs:
        outcome = _run_report(test_backends, backend, root / backend, "--spec", spec, *extra)
        assert outcome.code in (0, 1), outcome.err
    merged = root / "merged"
    outcome = qconform("report", "merge", *(root / b / "report.json" for b, _, _ in runs), "--report", merged)
    assert outcome.code == 1, outcome.err
    return {"dir": merged, "report": json.loads((merged / "report.json").read_text()), "out": outcome.out}


def _copy_report(source: Path, target: Path, **changes: Any) -> Path:
    report = json.loads((source / "report.json").read_text())
    for key, value in changes.items():
        if key in report["runs"][0]:
            for run in report["runs"]:
                run[key] = value
        else:
            report[key] = value
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(report))
    return target


@pytest.fixture(scope="session")
def copy_report() -> Callable[..., Path]:
    """``copy_report(source_dir, target_file, **changes)``: a copy of ``source_dir/report.json`` with
    top-level keys, or keys of every run, changed."""
    return _copy_report
