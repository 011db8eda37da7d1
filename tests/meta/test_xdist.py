"""Many processes on one host: the contract rows run under pytest-xdist, each worker pinned to its own GPU
by ``--qconform-gpus`` (shown here on the CPU with two workers: the pinning is an environment variable)."""

import os
import subprocess
import sys

import pytest

from conformance.pytest_plugin import worker_gpu

ROWS_TEST = """
import os
from pathlib import Path


def test_contract(qconform_row, qconform_check):
    qconform_check(qconform_row)
    worker = os.environ["PYTEST_XDIST_WORKER"]
    with (Path(os.environ["QCONFORM_XDIST_LOG"]) / worker).open("a") as log:
        log.write(f"{os.environ['CUDA_VISIBLE_DEVICES']} {qconform_row[0].contract}\\n")
"""


def test_workers_take_the_gpus_round_robin():
    assert [worker_gpu("0,1", f"gw{i}") for i in range(4)] == ["0", "1", "0", "1"]
    assert worker_gpu(" 3 , 5 ", "gw1") == "5"
    with pytest.raises(pytest.UsageError, match="expected comma-separated GPU ids"):
        worker_gpu(",", "gw0")


def test_two_xdist_workers_split_the_rows_each_on_its_gpu(test_backends, tmp_path):
    (tmp_path / "test_rows.py").write_text(ROWS_TEST)
    log = tmp_path / "log"
    log.mkdir()
    command = [sys.executable, "-m", "pytest", "test_rows.py", "-n", "2", "-p", "no:cacheprovider", "-q",
               "--qconform-gpus", "0,1", "--qconform-backend", f"{test_backends}:reference_subset",
               "--qconform-spec", "*.fp8", "--qconform-profile", "smoke"]  # fmt: skip
    env = dict(os.environ, QCONFORM_XDIST_LOG=str(log))
    process = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-3000:]
    # cast.fp8 and decode.fp8 pass; stochastic.fp8 (not in the backend) is skipped
    assert "30 passed, 9 skipped" in process.stdout, process.stdout[-2000:]
    lines = {worker.name: worker.read_text().splitlines() for worker in log.iterdir()}
    assert sorted(lines) == ["gw0", "gw1"] and all(lines.values())
    assert {line.split()[0] for line in lines["gw0"]} == {"0"}
    assert {line.split()[0] for line in lines["gw1"]} == {"1"}
