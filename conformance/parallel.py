"""Run rows in parallel worker processes on one machine (``qconform run --jobs N``).

Each of the ``N`` workers is a process of its own with its own backend handle (isolated in a child
process of the worker, or in the worker itself with ``--isolation none``), kept for the whole run,
so a backend's start-up is paid once per worker.  Rows go to whichever worker is free, one at a
time; each row draws the same cases wherever it runs (its seed is ``--seed`` and the row id), so a
run with ``--jobs N`` gives the same rows, cases and statuses as one without.  Results come back as
each row finishes, in no fixed order (the report puts them in matrix order).

A worker that dies (only possible with ``--isolation none``, where a backend crash takes the worker
with it) takes the pool down: the rows then running run again in fresh workers, each alone, and the
one whose worker dies alone is ``crashed``; nothing else is lost.
Many machines: ``--shard`` and ``report merge`` (``shard.py``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis.database import DirectoryBasedExampleDatabase

from conformance.registry import Spec, load_spec
from conformance.runner import ComboResult, Runner

__all__ = ["WorkerConfig", "run_parallel"]


@dataclass(frozen=True)
class WorkerConfig:
    """What each worker needs to build its runner: the backend and how to run it."""

    backend: str
    isolation: str
    timeout: float
    profile: str
    seed: int
    database: str | None = None
    """The directory of the failure database (``Runner.database``), or none."""
    cases: int | None = None
    """Random cases per row (``Runner.cases``); ``None``: the profile's."""
    boundary: bool = True
    """Whether rows run their examples and boundary cases (``Runner.boundary``)."""


_RUNNER: Runner | None = None


def _start_worker(config: WorkerConfig) -> None:
    global _RUNNER
    from conformance.worker import InProcessBackend, IsolatedBackend

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the process group: the parent decides
    signal.signal(signal.SIGTERM, _stop_worker)  # the parent stops a worker so: take its backend process along

    handle = (IsolatedBackend if config.isolation == "process" else InProcessBackend)(config.backend, config.timeout)
    database = None if config.database is None else DirectoryBasedExampleDatabase(config.database)
    _RUNNER = Runner(
        handle,
        profile=config.profile,
        seed=config.seed,
        quiet_sweep=True,
        database=database,
        cases=config.cases,
        boundary=config.boundary,
    )


def _stop_worker(signum: int, frame: object) -> None:
    if _RUNNER is not None:
        abort = getattr(_RUNNER.handle, "abort", None)
        if abort is not None:
            abort()
    os._exit(128 + signum)


def _run_row(path: str, combo: dict[str, Any] | None, cases: int | None = None) -> ComboResult:
    assert _RUNNER is not None
    spec = load_spec(Path(path))
    if cases is not None:
        _RUNNER.cases = cases
    return _RUNNER.run_invalid(spec) if combo is None else _RUNNER.run_combo(spec, combo)


def _lost(spec: Spec, combo: dict[str, Any] | None, why: str) -> ComboResult:
    kind = "conformance" if combo is not None else "invalid-input"
    return ComboResult(spec.contract, dict(combo or {}), "crashed", kind=kind, message=why)


def run_parallel(
    rows: Sequence[tuple[Spec, dict[str, Any] | None]],
    config: WorkerConfig,
    jobs: int,
    on_result: Callable[[ComboResult], None],
    cases: Sequence[int | None] | None = None,
) -> list[ComboResult]:
    """Run ``rows`` in ``jobs`` worker processes; ``on_result`` sees each row as it finishes (in this process).
    ``cases``, where given, holds each row's random cases (``Runner.cases``; ``None``: the config's).

    When a worker dies, every row then running is tried again in fresh workers, each alone; a row
    whose worker dies while it runs alone is ``crashed``.
    """
    results: list[ComboResult] = []
    pending = list(range(len(rows)))
    suspects: set[int] = set()
    context = multiprocessing.get_context("spawn")
    while pending:
        with ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_worker, initargs=(config,)) as pool:
            try:
                _drain(pool, rows, pending, suspects, results, on_result, jobs, cases or [config.cases] * len(rows))
            except KeyboardInterrupt:  # stop the workers now; the caller writes what finished
                for process in list(getattr(pool, "_processes", {}).values()):
                    process.terminate()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    return results


def _drain(
    pool: ProcessPoolExecutor,
    rows: Sequence[tuple[Spec, dict[str, Any] | None]],
    pending: list[int],
    suspects: set[int],
    results: list[ComboResult],
    on_result: Callable[[ComboResult], None],
    jobs: int,
    cases: Sequence[int | None],
) -> None:
    """Run the ``pending`` rows in ``pool`` until they are done or a worker dies (``run_parallel``)."""
    running: dict[Future[ComboResult], int] = {}
    queue, broken = list(pending), False
    while (queue and not broken) or running:
        while queue and not broken and len(running) < 2 * jobs:  # a little ahead, so no worker waits
            if running and (queue[0] in suspects or any(i in suspects for i in running.values())):
                break  # a row that was running when a worker died runs alone
            index = queue.pop(0)
            spec, combo = rows[index]
            running[pool.submit(_run_row, str(spec.path), combo, cases[index])] = index
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            index = running.pop(future)
            try:
                result = future.result()
            except BrokenProcessPool:
                broken = True
                if index not in suspects:
                    suspects.add(index)
                    continue
                spec, combo = rows[index]
                why = "the worker process running this row died (a backend crash with --isolation none)"
                result = _lost(spec, combo, why)
            pending.remove(index)
            results.append(result)
            on_result(result)
