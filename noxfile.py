# /// script
# dependencies = ["nox>=2024.4.15"]
# ///
"""qconform's sessions: tests (CI), conformance (the main job), lint, and the GPU work: gpu, bench, sweep.

CI runs ``nox -s tests lint`` on CPU-only machines.  torch comes from ``QCONFORM_TORCH``
(default ``torch==2.13.0+cpu``, the CPU build; pip must be able to see a CPU wheel, e.g.
through a find-links or extra index in pip.conf).  The ``gpu``, ``bench`` and ``sweep`` sessions use
the Python that already holds CUDA torch and Triton (``venv_backend="none"``), since those wheels are
too large to reinstall per run, and hand their flags to ``scripts/device_pass.py`` (which also runs
without nox: ``python3 scripts/device_pass.py --help``; ``-- --dry-run`` prints the commands only).
"""

from __future__ import annotations

import argparse
import os

import nox

nox.needs_version = ">=2024.4.15"
nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True

TORCH = os.environ.get("QCONFORM_TORCH", "torch==2.13.0+cpu")
TORCHAO = os.environ.get("QCONFORM_TORCHAO", "torchao==0.18.0")
"""The torchao release the tests session installs (one that runs on the CPU build of ``TORCH``)."""
REPORTS = "reports"


def _install(session: nox.Session, *extras: str) -> None:
    session.install(TORCH)
    session.install("-e", f".[{','.join(extras)}]" if extras else ".")


def _print_environment(session: nox.Session) -> None:
    session.run("python", "-c", "from conformance.environment import fingerprint; import json; "
                "print(json.dumps(fingerprint(), indent=1))")  # fmt: skip


@nox.session
def tests(session: nox.Session) -> None:
    """Unit, property, meta and conformance tests on CPU (Triton kernels in the interpreter), in up to 4 pytest-xdist
    workers, each test given to whichever is free (``-- -n 0`` runs them in this process)."""
    _install(session, "test", "cuda", "onnx")  # onnx: the onnx-reference, onnxruntime and ml_dtypes backends' tests
    session.install(TORCHAO)  # the optional torchao backend's adapter is checked against this release
    _print_environment(session)
    session.run(
        "pytest",
        "-m",
        "not gpu and not slow and not bench",
        "-n",
        str(min(4, os.cpu_count() or 1)),
        "--dist",
        "worksteal",
        "--qconform-backend",
        "fast",
        "--junitxml",
        f"{REPORTS}/pytest-junit.xml",
        *session.posargs,
    )


def _conformance_args(session: nox.Session) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nox -s conformance --")
    parser.add_argument("--backend", action="append", help="repeatable; default: fast and torch (add torchao)")
    parser.add_argument("--spec", default="*")
    parser.add_argument("--profile", default="default", choices=["smoke", "default", "thorough"])
    parser.add_argument("--seed", default="0")
    parser.add_argument("--jobs", default=str(os.cpu_count() or 1), help="worker processes (default: one a core)")
    return parser.parse_args(session.posargs)


def _run_conformance(session: nox.Session, args: argparse.Namespace) -> None:
    """One report per backend, then ``reports/matrix``: all of them merged into one conformance matrix."""
    reports = []
    for backend in args.backend or ["fast", "torch"]:
        report = f"{REPORTS}/{backend.replace(':', '_')}"
        # qconform exits 1 when a backend is non-conformant: that is a finding, recorded in the
        # report; only qconform's own backend must conform for the session to pass.
        codes = [0] if backend.startswith("fast") else [0, 1]
        session.run("qconform", "run", "--backend", backend, "--spec", args.spec, "--profile", args.profile,
                    "--seed", args.seed, "--jobs", args.jobs, "--report", report, success_codes=codes)  # fmt: skip
        session.log(f"reports in {report}/: report.json, report.md, report.html, junit.xml")
        reports.append(f"{report}/report.json")
    session.run("qconform", "report", "merge", *reports, "--report", f"{REPORTS}/matrix", success_codes=[0, 1])
    session.log(f"the conformance matrix of every backend: {REPORTS}/matrix/report.html")


@nox.session
def conformance(session: nox.Session) -> None:
    """The main job: every spec against the default backends (fast, torch), writing reports and their matrix.

    Pass options after ``--``: ``--backend NAME`` (repeatable: ``--backend fast --backend torch --backend
    torchao``), ``--spec GLOB``, ``--profile P``, ``--seed S``.
    """
    args = _conformance_args(session)
    _install(session, "cuda")
    _print_environment(session)
    _run_conformance(session, args)


DEVICE_PASS = "scripts/device_pass.py"
"""The one driver of GPU work; its argparse flags follow ``--`` (``nox -s gpu -- --help``)."""


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """On a CUDA machine: conformance of fast and torch in shards, GPU tests, benchmarks, an optional sweep.

    ``nox -s gpu -- --out DIR --backend fast --shards 4 --run-s 300 --seed 0 --profile default
    [--skip-gpu-tests] [--sweep-spec 'cast.fp8' --sweep-where "rounding == 'rne'"]``.
    """
    session.run("python", DEVICE_PASS, "pass", *session.posargs)


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Benchmarks (pytest-benchmark; GPU kernels timed with CUDA events): ``-- --out DIR [-k EXPR] [FILES]``."""
    session.run("python", DEVICE_PASS, "bench", *session.posargs)


@nox.session(venv_backend="none")
def sweep(session: nox.Session) -> None:
    """Exhaustive sweeps (every float32 input of a cast): ``-- --out DIR --deadline-s 500 'GLOB|WHERE' ...``."""
    session.run("python", DEVICE_PASS, "sweep", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format) over the tree; mypy over the engine."""
    _install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy", "conformance")
