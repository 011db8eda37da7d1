"""Batching does not blur what a backend did: the case that raises, kills its process or hangs is the one
recorded, a hang costs the timeout once, and ``--jobs`` gives the rows that one process gives."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from conformance.registry import load_specs
from conformance.runner import Runner, cases_per_example
from conformance.worker import IsolatedBackend

(INTERLEAVE,) = load_specs("glu.interleave")


def _row(test_backends: str, backend: str, timeout: float = 60.0):
    handle = IsolatedBackend(f"{test_backends}:{backend}", timeout)
    try:
        start = time.perf_counter()
        result = Runner(handle, profile="default", seed=0).run_combo(INTERLEAVE, {})
        return result, time.perf_counter() - start
    finally:
        handle.close()


def test_rows_of_the_default_profile_batch_their_random_cases():
    assert cases_per_example(200) == 10 and cases_per_example(20) == 1 and cases_per_example(2000) == 16


def test_the_case_that_raises_is_the_one_recorded(test_backends):
    result, _ = _row(test_backends, "raises_on_one_case")
    assert result.status == "error" and "planted:" in result.message
    assert result.case is not None and result.case.inputs["w"].bits.size > 40
    assert f"planted: {result.case.inputs['w'].bits.size} elements" in result.message


def test_the_case_that_kills_the_process_is_the_one_recorded(test_backends):
    result, _ = _row(test_backends, "crashes_on_one_case")
    assert result.status == "crashed" and "exit code 139" in result.message, result.message
    assert result.case is not None and result.case.inputs["w"].bits.size > 40
    assert "did not crash" not in result.message  # it crashed alone too: the case itself did it


def test_a_hang_costs_the_timeout_once(test_backends):
    result, seconds = _row(test_backends, "hangs_on_one_case", timeout=3.0)
    assert result.status == "crashed" and "timeout" in result.message
    assert result.case is not None and result.case.inputs["w"].bits.size > 40
    assert seconds < 3.0 * 2, f"the row took {seconds:.1f} s: the hang was waited for more than once"


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_jobs_give_the_rows_one_process_gives(cli, test_backends, tmp_path, isolation):
    runs = {}
    for jobs in ("1", "2"):
        report = tmp_path / f"jobs{jobs}"
        args = ["run", "--backend", f"{test_backends}:reference_subset", "--spec", "glu.*", "--profile", "smoke"]
        outcome = cli(*args, "--isolation", isolation, "--jobs", jobs, "--quiet", "--report", report)
        assert outcome.code == 0, outcome.err
        results = json.loads((report / "report.json").read_text())["results"]
        runs[jobs] = [(r["id"], r["status"], r["cases"], r["message"]) for r in results]
    assert runs["1"] == runs["2"] and len(runs["1"]) >= 3


def test_jobs_must_be_positive(capsys):
    from conformance.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", "--backend", "reference", "--jobs", "0"])
    assert exit_.value.code == 2 and "--jobs: expected a whole number >= 1" in capsys.readouterr().err


def test_the_parse_cache_follows_the_file(tmp_path, monkeypatch):
    """A spec parsed once is served from the cache; a changed text is parsed anew, and its error keeps its line."""
    from conformance.errors import SpecError
    from conformance.registry import load_spec

    monkeypatch.setenv("QCONFORM_CACHE_DIR", str(tmp_path / "cache"))
    source = INTERLEAVE.path.read_text()
    path = tmp_path / "glu" / "interleave.yaml"
    path.parent.mkdir()
    path.write_text(source)
    assert load_spec(path).raw == INTERLEAVE.raw
    assert list((tmp_path / "cache" / "specs").iterdir())
    assert load_spec(path).raw == INTERLEAVE.raw  # from the cache
    path.write_text(source.replace("contract: glu.interleave", "contract: glu.interleave\nbogus_key: 1"))
    with pytest.raises(SpecError, match=r"interleave.yaml:\d+: <top>: Additional properties"):
        load_spec(path)
    np.testing.assert_equal(load_spec(INTERLEAVE.path).raw["contract"], "glu.interleave")
