"""Hardening: a backend that returns the wrong shapes or dtypes or raises a CUDA error is recorded and the run
goes on; malformed specs, unknown backends, bad ``module:attr`` and unwritable report directories exit 2 and
leave nothing behind."""

import json

import pytest

import conformance.registry


def test_wrong_outputs_and_cuda_errors_are_recorded_and_the_run_goes_on(run_report, tmp_path):
    for backend, status, message in (
        ("wrong_shape", "fail", "out: shape (3,), but reference gives (4,)"),
        ("cuda_error", "error", "backend raised RuntimeError: CUDA error: an illegal memory access"),
    ):
        outcome = run_report(backend, tmp_path / backend, "--spec", "glu.*")
        assert outcome.code == 1, outcome.err
        report = json.loads((tmp_path / backend / "report.json").read_text())
        rows = {r["id"]: r for r in report["results"]}
        bad = [r for r in rows.values() if r["contract"] == "glu.interleave" and r["kind"] == "conformance"]
        assert bad and all(r["status"] == status for r in bad), [r["message"] for r in bad]
        assert any(message in r["message"] for r in bad), bad[0]["message"]
        assert rows["glu.deinterleave"]["status"] == "pass"  # the next contract still ran, in the same worker


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        ("no-such-backend", "unknown backend 'no-such-backend'"),
        ("os:nothing_here", "cannot load backend 'os:nothing_here'"),
        ("no_such_module_anywhere:backend", "No module named 'no_such_module_anywhere'"),
        ("os:getcwd", "expected a conformance.backends.Backend"),
    ],
)
@pytest.mark.parametrize("isolation", ["none", "process"])
def test_bad_backends_exit_2_and_write_nothing(cli, tmp_path, backend, message, isolation):
    report = tmp_path / "new" / "reports"
    outcome = cli("run", "--backend", backend, "--spec", "glu.*", "--isolation", isolation, "--report", report)
    assert outcome.code == 2 and message in outcome.err, outcome.err
    assert not (tmp_path / "new").exists()


def test_a_malformed_spec_exits_2_naming_the_file_and_writes_nothing(cli, tmp_path, monkeypatch):
    specs = tmp_path / "specs" / "glu"
    specs.mkdir(parents=True)
    (specs / "broken.yaml").write_text("contract: glu.broken\nversion: 1\nparams: [not, a, mapping\n")
    monkeypatch.setattr(conformance.registry, "default_spec_dir", lambda: tmp_path / "specs")
    report = tmp_path / "reports"
    outcome = cli("run", "--backend", "reference", "--spec", "glu.*", "--isolation", "none", "--report", report)
    assert outcome.code == 2 and "broken.yaml" in outcome.err, outcome.err
    assert not report.exists()


def test_an_unwritable_report_directory_exits_2(cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    outcome = cli("run", "--backend", "reference", "--spec", "glu.*", "--isolation", "none", "--report", blocker / "r")
    assert outcome.code == 2 and "cannot write reports to" in outcome.err
    assert blocker.read_text() == ""
