"""The example plugin under ``examples/vendor_plugin`` passes its conformance run as ``docs/writing-a-backend.md``
tells an outside author to run it (from the repository root, ``module:attr``, nothing registered)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]

pytest.importorskip("ml_dtypes")


def _qconform(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "conformance.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The run docs/writing-a-backend.md shows: the example plugin on cast.fp8 at smoke; its outcome and report."""
    report_dir = tmp_path_factory.mktemp("example") / "vendor"
    done = _qconform("run", "--backend", "examples.vendor_plugin:backend", "--spec", "cast.fp8", "--profile", "smoke",
                     "--quiet", "--report", str(report_dir))  # fmt: skip
    return done, report_dir


def test_the_example_vendor_plugin_is_conformant_on_the_rows_it_claims(example_run):
    done, report_dir = example_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("conformant on the 8 rows it implements (17 of 25 not implemented)"), done.stdout
    report = json.loads((report_dir / "report.json").read_text())
    rows = {r["id"]: r for r in report["results"]}
    assert rows["cast.fp8[,invalid-input]"]["status"] == "not-implemented"  # validates_inputs is off by default
    assert rows["cast.fp8[,invalid-input]"]["message"] == "the backend does not promise argument errors"
    assert {r["status"] for r in rows.values() if r["params"].get("rounding") == "rne"} == {"pass"}
    assert report["runs"][0]["backend"]["info"]["vendor_runtime"] == "0.1.0"
    assert "17 rows that no backend implements are hidden" in (report_dir / "report.md").read_text()


def test_dry_run_lists_what_the_example_plugin_claims_and_runs_nothing(tmp_path):
    done = _qconform("run", "--backend", "examples.vendor_plugin:backend", "--spec", "cast.fp8", "--dry-run",
                     "--report", str(tmp_path / "r"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "cast.fp8[format=float8_e5m2,overflow=saturate,rounding=rne]: implemented" in lines
    assert (
        "cast.fp8[format=float8_e5m2,overflow=saturate,rounding=rtz]: n/i: vendor_runtime rounds to nearest even only"
        in lines
    )
    assert "cast.fp8[,invalid-input]: n/i: the backend does not promise argument errors" in lines
    assert lines[-1] == "8 of 25 rows implemented by vendor-example"
    assert not (tmp_path / "r").exists()  # nothing written


def test_the_example_claims_file_bundles_and_verifies(example_run, tmp_path):
    (ran, report_dir), bundle = example_run, tmp_path / "vendor.zip"
    assert ran.returncode == 0, ran.stdout + ran.stderr
    made = _qconform("bundle", "--report", str(report_dir), "--claims", "examples/vendor_plugin/claims.yaml",
                     "-o", str(bundle))  # fmt: skip
    assert made.returncode == 0 and "consistent: 8 claimed row(s) passed" in made.stdout, made.stdout + made.stderr
    verified = _qconform("verify", str(bundle))
    assert verified.returncode == 0, verified.stdout


def test_the_plugin_in_writing_a_backend_md_loads_and_claims_what_the_page_says(tmp_path):
    import re

    page = (ROOT / "docs" / "writing-a-backend.md").read_text()
    (tmp_path / "my_plugin.py").write_text(re.search(r"```python\n# my_plugin.py\n(.*?)```", page, re.S).group(1))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--backend", "my_plugin:backend", "--spec",
                           "cast.fp8", "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "4 of 25 rows implemented by my-plugin"
