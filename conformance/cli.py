"""``qconform``: list and show contracts, run conformance (whole or one shard), replay counterexamples,
merge reports, bundle and verify a vendor submission, export and check golden vectors.

Exit codes: 0 conformant (a bundle consistent, vectors green, or nothing to report); 1 not shown
conformant (a row failed, errored or crashed; a merged report is incomplete; a bundle's claims do not
hold; vectors do not replay green) -- ``run --shard`` judges its own rows, ``report merge`` the whole;
2 a usage problem (unknown backend, bad ``module:attr``, malformed spec, bad arguments, a ``--where``
that selects no row, an input that is unreadable or does not fit the others, an unwritable report
directory), and then nothing is written; 130 interrupted (SIGINT or SIGTERM): ``run`` stops its worker,
writes the reports of the rows it finished, marked incomplete with the rows it did not run, and says so
(``fuzz`` likewise, with the rows' results so far).

``fuzz`` (``fuzz.py``, ``docs/fuzzing.md``) spends a ``--for``/``--cases`` budget in rounds with fresh seeds and
writes ``run``'s reports plus ``fuzz-summary.json``; ``run --database`` and ``fuzz`` replay the failures stored in
a failure database first (``Runner.database``).

The verdict line says what it covers (``report.verdict_headline``): ``conformant`` bare only where every
row ran, else ``conformant on the 25 rows it implements (895 of 920 not implemented)``; a merged matrix
adds one line per column.  A ``module:attr`` backend is imported with the current directory on the
import path (appended to it; ``python -m`` puts it first), so a plugin module in the directory you run
from needs no ``PYTHONPATH``.  A closed stdout (``qconform show 'cast.*' | head``) ends the command
quietly with exit 0.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import secrets
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
from hypothesis.database import DirectoryBasedExampleDatabase

from conformance.backends import available_backends, load_backend
from conformance.bundle import describe, verify_bundle, write_bundle
from conformance.case import Case, decode_token
from conformance.contract_table import markdown_table
from conformance.errors import BackendError, QConformError
from conformance.expr import check_expression, names_in
from conformance.parallel import WorkerConfig, run_parallel
from conformance.progress import Progress
from conformance.registry import PROFILE_DEFAULTS, PROFILES, Spec, load_specs
from conformance.report import (
    BAD_STATUSES,
    Journal,
    assemble,
    clear_report_dir,
    merge_reports,
    prepare_report_dir,
    remove_created,
    result_record,
    run_record,
    runnable,
    spec_records,
    verdict_lines,
    write_reports,
)
from conformance.runner import STATUSES, ComboResult, Runner, database_key, row_id, select_rows
from conformance.shard import Shard, parse_shard
from conformance.vectors import check_vectors, export_vectors, load_index
from conformance.worker import InProcessBackend, IsolatedBackend

__all__ = ["main"]

Row = tuple[Spec, dict[str, Any] | None]
Log = Callable[[str], None]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="qconform", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    listing = sub.add_parser("list", help="every contract with its parameters")
    listing.add_argument("--markdown", action="store_true", help="the README's contract table (Markdown)")
    show = sub.add_parser("show", help="specs in full: a contract id or a glob over them, as run --spec")
    show.add_argument("contract", help="a contract id or a glob, e.g. 'cast.*'")
    sub.add_parser("backends", help="registered backends")

    run = sub.add_parser("run", help="run specs against a backend and write reports")
    run.add_argument("--backend", default="fast", help="registered name or module:attr (default: fast)")
    run.add_argument("--spec", default="*", help="glob over contract ids, e.g. 'cast.*' (default: all)")
    sweep_help = "random cases per row; 'exhaustive' also sweeps all 2^32 float32 inputs of each cast"
    run.add_argument("--profile", default="default", choices=PROFILES, help=sweep_help)
    run.add_argument("--where", help="only rows whose params satisfy this expression, e.g. \"rounding == 'rne'\"")
    run.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0: runs are reproducible)")
    run.add_argument("--shard", metavar="I/N", help="run only shard I of N (1 <= I <= N) of the rows; see shard.py")
    run.add_argument("--report", type=Path, help="directory for report.json, report.md, report.html and junit.xml")
    _add_backend_process_options(run)
    run.add_argument("--jobs", type=_positive_int, default=1, metavar="N",
                     help="run rows in N worker processes, each with its own backend (default 1)")  # fmt: skip
    run.add_argument("--quiet", action="store_true", help="no progress bar or lines")
    dry_help = "list the selected rows the backend claims (implemented, or n/i and why); run nothing"
    run.add_argument("--dry-run", action="store_true", help=dry_help)
    _add_show_unimplemented(run)
    run.add_argument("--cases", type=_positive_int, metavar="N",
                     help="random cases per row instead of the profile's count (reproduces a fuzz round)")  # fmt: skip
    run.add_argument("--database", type=Path, metavar="DIR",
                     help="replay the failures stored in this failure database first, and store new ones there "
                          "(default: none, so a report depends only on the command; see docs/fuzzing.md)")  # fmt: skip

    fuzz = sub.add_parser("fuzz", help="fuzz rows for a time or case budget, with fresh seeds each round")
    fuzz.add_argument("--backend", default="fast", help="registered name or module:attr (default: fast)")
    fuzz.add_argument("--spec", default="*", help="glob over contract ids, e.g. 'cast.*' (default: all)")
    fuzz.add_argument("--where", help="only rows whose params satisfy this expression, e.g. \"rounding == 'rne'\"")
    budget = fuzz.add_mutually_exclusive_group(required=True)
    budget.add_argument("--for", dest="duration", type=_duration, metavar="DURATION",
                        help="time budget: 30s, 10m, 1h (or plain seconds)")  # fmt: skip
    budget.add_argument("--cases", type=_positive_int, metavar="N", help="case budget: about N cases in all")
    budget.add_argument("--replay-only", action="store_true",
                        help="only re-check the failures stored in the database (no budget)")  # fmt: skip
    fuzz.add_argument("--database", type=Path, metavar="DIR",
                      help="failure database (default: $QCONFORM_FUZZ_DB, else ~/.cache/qconform/fuzz-db)")  # fmt: skip
    fuzz.add_argument("--seed", type=int, help="base seed; round i uses seed+i (default: a fresh one, printed)")
    fuzz.add_argument("--report", type=Path,
                      help="directory for the reports of run and fuzz-summary.json (rounds and seeds)")  # fmt: skip
    _add_backend_process_options(fuzz)
    fuzz.add_argument("--jobs", type=_positive_int, default=1, metavar="N",
                      help="run each round's rows in N worker processes (default 1)")  # fmt: skip
    fuzz.add_argument("--quiet", action="store_true", help="no progress lines")
    _add_show_unimplemented(fuzz)

    replay = sub.add_parser("replay", help="replay one counterexample (a qc1: token or a case .json file)")
    replay.add_argument("--backend", default="fast", help="registered name or module:attr (default: fast)")
    _add_backend_process_options(replay)
    replay.add_argument("case", help="the qc1: token a report prints (quoted, whole) or a case .json file")

    report = sub.add_parser("report", help="work with reports").add_subparsers(dest="action", required=True)
    merge = report.add_parser("merge", help="one report from shards and runs (report.json or results.jsonl)")
    merge.add_argument("inputs", nargs="+", type=Path, metavar="REPORT")
    merge.add_argument("--report", type=Path, required=True, help="directory for the merged report")
    _add_show_unimplemented(merge)

    bundle = sub.add_parser("bundle", help="pack a report and a statement of claims into a submission bundle")
    bundle.add_argument("--report", type=Path, required=True, help="the report directory (its report.json)")
    bundle.add_argument("--claims", type=Path, required=True, help="the statement: claims and deviations (YAML)")
    bundle.add_argument("-o", "--output", type=Path, required=True, help="the bundle file to write (a zip)")
    verify = sub.add_parser("verify", help="check that a submission bundle is complete and consistent")
    verify.add_argument("bundle", type=Path)

    vectors = sub.add_parser("vectors", help="golden vectors: raw binaries and a JSON index")
    actions = vectors.add_subparsers(dest="action", required=True)
    export = actions.add_parser("export", help="freeze a profile's cases and reference outputs into DIR")
    export.add_argument("--spec", default="*", help="glob over contract ids (default: all)")
    export.add_argument("--profile", default="smoke", choices=list(PROFILE_DEFAULTS), help="random cases per row")
    export.add_argument("--seed", type=int, default=0)
    export.add_argument("--quiet", action="store_true", help="no progress lines")
    export.add_argument("directory", type=Path, metavar="DIR", help="a new directory")
    check = actions.add_parser("check", help="replay exported vectors against a backend")
    check.add_argument("directory", type=Path, metavar="DIR")
    check.add_argument("--backend", default="fast", help="registered name or module:attr (default: fast)")
    _add_backend_process_options(check)
    check.add_argument("-v", "--verbose", action="store_true", help="a line for every case, not only the bad ones")
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def _duration(text: str) -> float:
    """``fuzz --for``: ``30s``, ``10m``, ``1h`` (``fuzz.parse_duration``)."""
    from conformance.fuzz import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_seconds(text: str) -> float:
    """``--timeout``: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _add_backend_process_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=_positive_seconds, default=120.0,
                        help="seconds one backend call may take (positive; default 120)")  # fmt: skip
    parser.add_argument("--isolation", choices=["process", "none"], default="process",
                        help="run the backend in a restartable child process (default) or in this one")  # fmt: skip


def _cmd_list(markdown: bool = False) -> int:
    if markdown:
        print(markdown_table(load_specs()), end="")
        return 0
    for spec in load_specs():
        params = "; ".join(
            f"{p.name} in {list(p.values or p.range or ())} (default {p.default!r})" for p in spec.params.values()
        )
        print(f"{spec.contract:28s} {params or '(no params)'}")
        print(f"{'':28s} {spec.raw['summary']}")
    return 0


def _cmd_show(pattern: str) -> int:
    for spec in load_specs(pattern):
        print(f"# {spec.path}  sha256={spec.sha256}")
        print(spec.path.read_text(), end="")
    return 0


def _importable_cwd(backend: str) -> None:
    """For a ``module:attr`` backend, the current directory on the import path (appended), as ``python -m``
    has it; a spawned worker inherits ``sys.path``."""
    cwd = os.getcwd()
    if ":" in backend and not {"", ".", cwd} & set(sys.path):
        sys.path.append(cwd)


def _found_in_cwd(backend: str) -> str | None:
    """The current directory, where ``backend`` is ``module:attr`` and its module is found under it (not
    installed): reports then print reproduce and replay lines that ``cd`` there (``report.runnable``)."""
    import importlib.util

    if ":" not in backend:
        return None
    try:
        spec = importlib.util.find_spec(backend.partition(":")[0])
    except (ImportError, ValueError):
        return None
    origin = None if spec is None else spec.origin
    cwd = Path.cwd().resolve()
    if origin is None or not Path(origin).resolve().is_relative_to(cwd):
        return None
    return str(cwd)


def _add_show_unimplemented(parser: argparse.ArgumentParser) -> None:
    shown = "keep rows no backend implements in report.md and report.html (report.json always has them)"
    parser.add_argument("--show-unimplemented", action="store_true", help=shown)


def _dry_run(handle: Any, rows: Sequence[tuple[Any, dict[str, Any] | None]]) -> int:
    """``run --dry-run``: one line per selected row, what the backend claims of it; nothing runs."""
    validating = set(handle.description.get("validates_inputs", []))
    claimed = 0
    for spec, combo in rows:
        rid = row_id(spec, combo)
        if combo is None:
            reason = None if spec.contract in validating else "the backend does not promise argument errors"
            if not spec.raw.get("invalid"):
                reason = "no invalid-input cases in the spec"
            elif spec.contract not in handle.description.get("contracts", []):
                reason = f"backend {handle.description['name']!r} does not implement {spec.contract}"
        else:
            try:
                reason = handle.unsupported_reason(spec.contract, spec.with_defaults(combo))
            except Exception as exc:  # its supports() raised: the real run makes this row an error
                reason = f"supports() raised {type(exc).__name__}: {exc}"
        claimed += reason is None
        print(f"{rid}: {'implemented' if reason is None else 'n/i: ' + reason}")
    print(f"{claimed} of {len(rows)} rows implemented by {handle.description['name']}")
    return 0


def _open_backend(args: argparse.Namespace) -> InProcessBackend | IsolatedBackend:
    """The backend of ``--backend``, isolated or not as ``--isolation`` says."""
    _importable_cwd(args.backend)
    return (IsolatedBackend if args.isolation == "process" else InProcessBackend)(args.backend, args.timeout)


def _check_selection(specs: Sequence[Any], where: str | None, pattern: str) -> None:
    """``QConformError`` (exit 2) where ``--where`` selects no row: a typo must not read as conformance."""
    if where is None or select_rows(specs, where):
        return
    seen: dict[str, list[Any]] = {}
    for spec in specs:
        combos = spec.param_combinations()
        for name in sorted(names_in(where)):
            param = spec.params.get(name)
            if param is None:
                continue
            values = seen.setdefault(name, [])
            lo, hi = param.range or (None, None)
            domain = [c[name] for c in combos] if param.finite else [f"{lo}..{hi}"]
            values += [v for v in dict.fromkeys(domain) if v not in values]
    existing = "; ".join(f"{name} takes {values}" for name, values in seen.items()) or "none of its names is a param"
    raise QConformError(
        f"--where {where!r} selects no row of --spec {pattern!r} ({len(specs)} contract(s)); {existing}"
    )


class _Interrupts:
    """SIGINT and SIGTERM during a run raise ``KeyboardInterrupt`` (the run then stops its worker and writes what it
    finished); ``hold`` ignores both while the reports are written; leaving restores the handlers.  Outside the
    main thread (where signals cannot be handled) it does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __enter__(self) -> _Interrupts:
        self.active = threading.current_thread() is threading.main_thread()
        if self.active:
            self.saved = {s: signal.getsignal(s) for s in self.SIGNALS}
            for s in self.SIGNALS:
                signal.signal(s, self._raise)
        return self

    @staticmethod
    def _raise(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    def hold(self) -> None:
        if self.active:
            for s in self.SIGNALS:
                signal.signal(s, signal.SIG_IGN)

    def __exit__(self, *exc: object) -> None:
        if self.active:
            for s, handler in self.saved.items():
                signal.signal(s, handler)


def _start(
    args: argparse.Namespace, shard: Shard | None = None
) -> tuple[list[Spec], list[Row], InProcessBackend | IsolatedBackend, Log]:
    """What ``run`` and ``fuzz`` start with: the specs and rows selected (usage errors first), the report
    directory made, the backend open, and the progress log (silent with ``--quiet``)."""
    specs = load_specs(args.spec)
    if args.where is not None:
        check_expression(args.where, {name for spec in specs for name in spec.params})
    _check_selection(specs, args.where, args.spec)
    rows = select_rows(specs, args.where, shard)
    dry = getattr(args, "dry_run", False)  # a dry run writes nothing
    created = [] if args.report is None or dry else prepare_report_dir(args.report)
    try:
        handle = _open_backend(args)
    except (QConformError, BackendError):
        remove_created(created)
        raise
    log: Log = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    return specs, rows, handle, log


def _cmd_run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    shard = None if args.shard is None else parse_shard(args.shard)
    started = dt.datetime.now(dt.timezone.utc)
    specs, rows, handle, log = _start(args, shard)
    selected = [row_id(spec, combo) for spec, combo in rows]
    if args.dry_run:
        try:
            return _dry_run(handle, rows)
        finally:
            handle.close()
    where = f", shard {shard}" if shard else ""
    log(f"qconform: backend {handle.description['name']} on {handle.description['device']}, "
        f"{len(specs)} specs, profile {args.profile}, seed {args.seed}{where}")  # fmt: skip
    run = run_record(
        backend=handle.description,
        backend_arg=args.backend,
        spec=args.spec,
        where=args.where,
        shard=shard,
        profile=args.profile,
        seed=args.seed,
        command="qconform " + shlex.join(argv),
        started=started,
    )
    if (found_in := _found_in_cwd(args.backend)) is not None:
        run["cwd"] = found_in
    reports = _Reports(args.report, run, spec_records(specs), selected, args.show_unimplemented)
    progress = Progress(len(selected), quiet=args.quiet)

    def done(result: ComboResult) -> None:
        reports.add(result)
        progress.row(result)

    with _Interrupts() as interrupts:
        interrupted = False
        try:
            if args.jobs > 1:
                handle.close()  # the workers start their own
                database = None if args.database is None else str(args.database)
                config = WorkerConfig(
                    args.backend, args.isolation, args.timeout, args.profile, args.seed, database, args.cases
                )
                run_parallel(rows, config, args.jobs, done)
            else:
                Runner(
                    handle,
                    profile=args.profile,
                    seed=args.seed,
                    progress=progress.note,
                    database=_database(args.database),
                    cases=args.cases,
                ).run_rows(rows, done)
        except KeyboardInterrupt:
            interrupted = True
            interrupts.hold()
            handle.abort()
        finally:
            handle.close()
            progress.close()
        report = reports.finish(started, interrupted, log)
    if interrupted:
        wrote = f"wrote the incomplete report to {args.report}" if args.report is not None else "no --report given"
        done_rows = len(reports.records)
        print(f"qconform: interrupted after {done_rows} of {len(selected)} rows ({len(selected) - done_rows} "
              f"not run); {wrote}; to finish, run it again: {run['command']}", file=sys.stderr)  # fmt: skip
        return 130
    # a shard's report is incomplete by itself (report merge judges the whole); the run judges its own rows
    return 1 if report["verdict"] == "non-conformant" else 0


def _database(directory: Path | None) -> DirectoryBasedExampleDatabase | None:
    """The failure database in ``directory`` (``Runner.database``), or none."""
    return None if directory is None else DirectoryBasedExampleDatabase(str(directory))


class _Reports:
    """The reports of one run (``run`` or ``fuzz``) in ``report_dir`` (or none): ``add`` each finished row (it goes
    to the journal, ``results.jsonl``, at once), ``finish`` to write the reports and print the verdict."""

    def __init__(
        self,
        report_dir: Path | None,
        run: dict[str, Any],
        specs: list[dict[str, Any]],
        selected: Sequence[str],
        show_unimplemented: bool = False,
    ):
        self.report_dir, self.run, self.specs, self.selected = report_dir, run, specs, list(selected)
        self.show_unimplemented = show_unimplemented
        self.records: list[dict[str, Any]] = []
        self.journal = None
        if report_dir is not None:
            clear_report_dir(report_dir)
            self.journal = Journal(report_dir, run, specs)

    def add(self, result: ComboResult) -> None:
        self.records.append(result_record(result, 0))
        if self.journal is not None:
            self.journal.add(self.records[-1])

    def finish(
        self, started: dt.datetime, interrupted: bool, log: Callable[[str], None], not_run: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Write the reports (incomplete where ``interrupted`` or some rows are ``not_run``) and print the verdict;
        returns the report."""
        duration = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
        finished_ids = {r["id"] for r in self.records}
        missing = [i for i in self.selected if i not in finished_ids] if interrupted else list(not_run)
        self.run.update(complete=not (interrupted or missing), duration_s=round(duration, 3))
        if interrupted or missing:
            self.run.update(rows_selected=len(self.selected), rows_not_run=missing)
        report = assemble([self.run], self.specs, self.records, self.report_dir)
        if self.report_dir is not None and self.journal is not None:
            if not interrupted:
                self.journal.end(duration)
            for path in write_reports(report, self.report_dir, self.show_unimplemented):
                log(f"wrote {path}")
            self.journal.remove()
        _print_verdict(report)
        return report


def _cmd_fuzz(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``qconform fuzz`` (``fuzz.py``): rounds within the budget, then ``run``'s reports and ``fuzz-summary.json``."""
    from conformance.fuzz import Budget, Fuzzer, FuzzRow, default_database, row_weight

    started = dt.datetime.now(dt.timezone.utc)
    specs, selection, handle, log = _start(args)
    directory = args.database if args.database is not None else default_database()
    database = DirectoryBasedExampleDatabase(str(directory))
    known = {
        row_id(s, c) for s, c in selection if c is not None and any(True for _ in database.fetch(database_key(s, c)))
    }
    if args.replay_only:
        selection = [(s, c) for s, c in selection if row_id(s, c) in known]
    rows = [FuzzRow(s, c, row_weight(s, row_id(s, c) in known)) for s, c in selection]
    base_seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    budget = Budget(args.duration, args.cases)
    what = "replaying the failures stored" if args.replay_only else f"budget {budget.describe()}, base seed {base_seed}"
    log(f"qconform fuzz: backend {handle.description['name']} on {handle.description['device']}, {len(rows)} rows, "
        f"{what}; database {directory} ({len(known)} rows with stored failures)")  # fmt: skip
    command = ["qconform", *argv] + ([] if args.seed is not None or args.replay_only else ["--seed", str(base_seed)])
    run = run_record(
        backend=handle.description,
        backend_arg=args.backend,
        spec=args.spec,
        where=args.where,
        shard=None,
        profile="fuzz",
        seed=base_seed,
        command=shlex.join(command),
        started=started,
    )
    reports = _Reports(args.report, run, spec_records(specs), [row.id for row in rows], args.show_unimplemented)

    def on_row(row: FuzzRow, result: ComboResult) -> None:
        if result.status not in ("pass", "not-implemented"):
            first = result.message.splitlines()[0] if result.message else ""
            log(f"{result.status.upper()} {result.id}: {first}")

    def execute(plan: Any, seed: int, boundary: bool, stop: Any, on_result: Any) -> None:
        if args.jobs > 1:
            config = WorkerConfig(args.backend, args.isolation, args.timeout, "smoke", seed, str(directory), None,
                                  boundary)  # fmt: skip
            run_parallel([(row.spec, row.combo) for row, _ in plan], config, args.jobs, on_result, [n for _, n in plan])
            return
        runner = Runner(handle, profile="smoke", seed=seed, progress=log, database=database, boundary=boundary)
        for row, cases in plan:
            if stop():
                return
            runner.cases = cases
            on_result(runner.run_invalid(row.spec) if row.combo is None else runner.run_combo(row.spec, row.combo))

    fuzzer = Fuzzer(rows, budget, base_seed, execute, log=log, on_row=on_row)
    with _Interrupts() as interrupts:
        interrupted = False
        try:
            if args.replay_only:
                by_id = {row.id: row for row in fuzzer.rows}
                replayer = Runner(handle, seed=base_seed, progress=log, database=database, cases=0, boundary=False)
                replayer.run_rows(selection, lambda result: by_id[result.id].add(result, 0, base_seed, 0))
            else:
                if args.jobs > 1:
                    handle.close()  # the workers start their own
                fuzzer.run()
        except KeyboardInterrupt:
            interrupted = True
            interrupts.hold()
            handle.abort()
        finally:
            handle.close()
        for row in fuzzer.rows:
            if row.result is not None:
                reports.add(row.result)
        not_run = [row.id for row in fuzzer.rows if row.result is None]
        report = reports.finish(started, interrupted, log, not_run)
        summary = fuzzer.summary(args.backend, str(directory), interrupted)
        summary["replay_only"] = bool(args.replay_only)
        if args.report is not None:
            path = args.report / "fuzz-summary.json"
            path.write_text(json.dumps(summary, indent=1) + "\n")
            log(f"wrote {path}")
    covered = sum(1 for row in fuzzer.rows if row.result is not None)
    print(f"qconform fuzz: {fuzzer.cases:,} cases on {covered} of {len(rows)} rows in {len(fuzzer.rounds)} round(s), "
          f"base seed {base_seed}, {fuzzer.failures} failing; database {directory}", file=sys.stderr)  # fmt: skip
    if not_run and not interrupted:
        print(f"qconform fuzz: the budget ran out before {len(not_run)} of {len(rows)} rows ran (the report is "
              "incomplete): give it more time or select fewer rows", file=sys.stderr)  # fmt: skip
    if interrupted:
        return 130
    return 1 if report["verdict"] == "non-conformant" else 0


def _print_verdict(report: Mapping[str, Any]) -> None:
    """The verdict lines (``report.verdict_lines``), why the report is incomplete and each failing row, on stdout."""
    for line in verdict_lines(report):
        print(line)
    for reason in report["incomplete"]:
        print(f"  incomplete: {reason}")
    for r in report["results"]:
        if r["status"] in BAD_STATUSES:
            column = report["runs"][r["run"]]["column"]
            first = r["message"].splitlines()[0] if r["message"] else ""
            print(f"  {r['status'].upper()} {r['id']} on {column}: {first}")
            if r["replay"]:
                print(f"    replay: {runnable(report['runs'][r['run']], r['replay'])}")


def _cmd_merge(args: argparse.Namespace) -> int:
    created = prepare_report_dir(args.report)
    try:
        report = merge_reports(args.inputs, args.report)
    except QConformError:
        remove_created(created)
        raise
    clear_report_dir(args.report)
    for path in write_reports(report, args.report, args.show_unimplemented):
        print(f"wrote {path}", file=sys.stderr)
    _print_verdict(report)
    return 0 if report["verdict"] == "conformant" else 1


def _cmd_bundle(args: argparse.Namespace) -> int:
    verification = write_bundle(args.report / "report.json", args.claims, args.output)
    print("\n".join(describe(verification, str(args.claims))))
    if verification.ok:
        print(f"wrote {args.output}")
        return 0
    print(f"nothing written: the claims do not hold for {args.report / 'report.json'}")
    return 1


def _cmd_verify(args: argparse.Namespace) -> int:
    verification = verify_bundle(args.bundle)
    print("\n".join(describe(verification, str(args.bundle))))
    return 0 if verification.ok else 1


def _cmd_vectors(args: argparse.Namespace) -> int:
    if args.action == "export":
        specs = load_specs(args.spec)
        log = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
        index = export_vectors(specs, args.profile, args.seed, args.directory, log)
        print(f"wrote {len(index['cases'])} cases of {len(specs)} contracts to {args.directory}")
        return 0
    index = load_index(args.directory)
    handle = _open_backend(args)

    def show(case_id: str, label: str, status: str, message: str) -> None:
        if status in BAD_STATUSES or args.verbose:
            first = message.splitlines()[0] if message else ""
            print(f"{status} {case_id} [{label}]" + (f": {first}" if first else ""))

    try:
        counts = check_vectors(args.directory, handle, show)
    finally:
        handle.close()
    bad = sum(counts[s] for s in BAD_STATUSES)
    print(f"{'green' if bad == 0 else 'not green'}: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES)
          + f" ({len(index['cases'])} cases)")  # fmt: skip
    return 0 if bad == 0 else 1


def _load_case(text: str) -> Case:
    """The case of a ``qc1:`` token or a case ``.json`` file; ``QConformError`` naming what is wrong."""
    shown = text if len(text) <= 40 else f"{text[:40]}..."
    if text.startswith("qc1:"):
        try:
            return decode_token(text)
        except Exception as exc:  # base64, zlib, JSON or the case's fields: all one usage error
            raise QConformError(
                f"{shown!r} is not a whole replay token ({type(exc).__name__}: {exc}); pass the whole qc1: string "
                "a report prints, quoted, or the case file it names"
            ) from None
    path = Path(text)
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise QConformError(f"no case file {text!r} (and it is not a qc1: replay token)") from None
    except OSError as exc:
        raise QConformError(f"cannot read case file {text!r}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise QConformError(f"case file {text!r} is not JSON ({exc})") from None
    try:
        return Case.from_json(obj)
    except Exception as exc:
        raise QConformError(f"case file {text!r} does not hold a case ({type(exc).__name__}: {exc})") from None


def _cmd_replay(args: argparse.Namespace) -> int:
    case = _load_case(args.case)
    (spec,) = load_specs(case.contract)
    handle = _open_backend(args)
    print(case.describe())
    for name, tensor in case.inputs.items():
        print(f"  {name} bits: {np.array2string(tensor.bits.reshape(-1)[:64], formatter={'int': hex})}")
    try:
        evaluation = Runner(handle).evaluate(spec, case)
    finally:
        handle.close()
    print(f"{evaluation.status}: {evaluation.message}" if evaluation.message else evaluation.status)
    for mismatch in evaluation.mismatches:
        for e in mismatch.elements:
            print(f"  {mismatch.output}{e['index']}: backend {e['backend']} ({e['backend_value']}), "
                  f"reference {e['reference']} ({e['reference_value']})")  # fmt: skip
    return 0 if evaluation.status == "pass" else 1


def _cmd_backends() -> int:
    """Each registered backend, its entry point, and whether it builds here (the reason when not)."""
    for name, value in sorted(available_backends().items()):
        try:
            load_backend(name)
            state = "available"
        except Exception as exc:  # an optional backend that cannot build is listed, not fatal
            state = f"unavailable: {exc}"
        print(f"{name:14s} {value}  {state}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            return _cmd_list(args.markdown)
        if args.command == "show":
            return _cmd_show(args.contract)
        if args.command == "backends":
            return _cmd_backends()
        if args.command == "run":
            return _cmd_run(args, argv)
        if args.command == "fuzz":
            return _cmd_fuzz(args, argv)
        if args.command == "report":
            return _cmd_merge(args)
        if args.command == "bundle":
            return _cmd_bundle(args)
        if args.command == "verify":
            return _cmd_verify(args)
        if args.command == "vectors":
            return _cmd_vectors(args)
        return _cmd_replay(args)
    except (QConformError, BackendError) as exc:
        print(f"qconform: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # outside a run's rows (a run handles its own: _cmd_run)
        print("qconform: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (qconform show ... | head): not an error of ours
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit does not raise again (Python's documented recipe)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
