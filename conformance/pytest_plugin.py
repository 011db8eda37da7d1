"""pytest integration: every spec row runs as a test against a chosen backend.

Any test that asks for the ``qconform_row`` fixture is parametrized over every contract x
parameter set (plus one invalid-input row per contract); ``qconform_check`` runs a row and
fails the test with the counterexample and its replay command::

    def test_contract(qconform_row, qconform_check):
        qconform_check(qconform_row)

    pytest --qconform-backend fast --qconform-profile smoke --qconform-spec 'cast.*'

Rows a backend does not implement are skipped with the backend's reason.  This module
imports neither torch nor the backends at load time.

Many processes and GPUs of one host: run through pytest-xdist, one worker per GPU, each worker's
backend process pinned to its own GPU with ``CUDA_VISIBLE_DEVICES`` (``--qconform-gpus``, the GPU
of worker ``gwN`` being the ``N % len``-th of the list)::

    pytest tests/test_contracts.py -n 2 --qconform-gpus 0,1 --qconform-backend fast --qconform-profile default

xdist spreads the rows over the workers; each row runs the same cases wherever it lands (its
seed is ``--qconform-seed`` and the row id).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conformance.errors import ContractViolation
from conformance.registry import Spec, load_specs
from conformance.runner import Runner, combo_id

Row = tuple[Spec, dict[str, Any] | None]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("qconform", "qconform conformance rows")
    group.addoption("--qconform-backend", default="fast", help="backend name or module:attr (default: fast)")
    group.addoption("--qconform-profile", default="smoke", choices=["smoke", "default", "thorough"])
    group.addoption("--qconform-seed", type=int, default=0)
    group.addoption("--qconform-spec", default="*", help="glob over contract ids")
    group.addoption(
        "--qconform-gpus",
        default=None,
        metavar="LIST",
        help="comma-separated GPU ids: pytest-xdist worker gwN gets CUDA_VISIBLE_DEVICES=LIST[N %% len(LIST)]",
    )


def worker_gpu(gpus: str, worker: str) -> str:
    """The GPU of xdist worker ``worker`` (``gw3``) among ``gpus`` (``"0,1"``): round robin."""
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if not ids:
        raise pytest.UsageError(f"--qconform-gpus {gpus!r}: expected comma-separated GPU ids, e.g. 0,1")
    return ids[int(worker.removeprefix("gw")) % len(ids)]


def pytest_configure(config: pytest.Config) -> None:
    """Pin this xdist worker (and the backend process it starts) to its GPU, before anything uses CUDA."""
    gpus, worker = config.getoption("qconform_gpus"), os.environ.get("PYTEST_XDIST_WORKER")
    if gpus is not None and worker is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = worker_gpu(gpus, worker)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "qconform_row" not in metafunc.fixturenames:
        return
    specs = load_specs(metafunc.config.getoption("qconform_spec"))
    rows: list[Row] = [(spec, combo) for spec in specs for combo in [*spec.param_combinations(), None]]
    ids = [combo_id(s.contract, c) if c is not None else combo_id(s.contract, {}, "invalid-input") for s, c in rows]
    metafunc.parametrize("qconform_row", rows, ids=ids)


@pytest.fixture(scope="session")
def qconform_runner(pytestconfig: pytest.Config) -> Iterator[Runner]:
    from conformance.worker import IsolatedBackend

    handle = IsolatedBackend(pytestconfig.getoption("qconform_backend"))
    try:
        yield Runner(
            handle, profile=pytestconfig.getoption("qconform_profile"), seed=pytestconfig.getoption("qconform_seed")
        )
    finally:
        handle.close()


@pytest.fixture
def qconform_check(qconform_runner: Runner, pytestconfig: pytest.Config) -> Callable[[Row], None]:
    def check(row: Row) -> None:
        __tracebackhide__ = True
        spec, combo = row
        result = qconform_runner.run_invalid(spec) if combo is None else qconform_runner.run_combo(spec, combo)
        if result.status == "not-implemented":
            pytest.skip(result.message)
        if result.status in ("fail", "error", "crashed"):
            detail = [f"{result.id}: {result.status}: {result.message}"]
            if result.case is not None:
                backend = pytestconfig.getoption("qconform_backend")
                detail += [
                    f"case: {result.case.describe()}",
                    f"replay: qconform replay --backend {backend} {result.case.token()}",
                ]
            raise ContractViolation("\n".join(detail))

    return check
