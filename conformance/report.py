"""Reports: ``report.json`` (schema ``schemas/report.schema.json``, ``docs/report-format.md``),
``report.md`` (a conformance matrix a person reads in a minute), ``report.html`` (one
self-contained page, ``html_report.py``) and ``junit.xml`` (one testcase per row and backend).

A report holds *runs* (one per ``qconform run``: backend, environment, command, profile, seed,
shard) and *results* (one per row a run ran, naming its run by index).  The conformance matrix
has a row per contract x parameter set and a column per implementation (backend name, device and
the versions it reports); the runs of one implementation, shards of one run included, fill one
column.  ``qconform run`` writes the report of its one run; ``qconform report merge`` builds one
report from several (:func:`merge_reports`) and refuses inputs that do not fit together.

While a run goes on, each finished row is appended to ``results.jsonl`` in the report directory
(:class:`Journal`), so a killed run keeps what it finished; ``qconform report merge
DIR/results.jsonl`` turns it into a report whose verdict is ``incomplete``.  The journal is
removed once the report files are written.  Every file is written whole (a temporary file,
then a rename).  A counterexample whose replay token is long is saved under ``cases/`` and the
replay command points at the file.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import json
import os
import re
import shlex
import shutil
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import jsonschema

from conformance.carriers import get_dtype
from conformance.case import Case
from conformance.compare import format_bits
from conformance.environment import fingerprint, git_commit, suite_version
from conformance.errors import QConformError
from conformance.registry import Spec
from conformance.runner import ERROR_BIN_EDGES, STATUSES, ComboResult, row_id
from conformance.shard import Shard

__all__ = [
    "BAD_STATUSES",
    "JOURNAL",
    "REPORT_FILES",
    "REPORT_SCHEMA_VERSION",
    "Column",
    "Journal",
    "ReportParts",
    "assemble",
    "clear_report_dir",
    "columns",
    "hidden_note",
    "load_parts",
    "matrix_rows",
    "merge_reports",
    "prepare_report_dir",
    "remove_created",
    "render_junit",
    "render_markdown",
    "result_record",
    "row_params",
    "run_record",
    "runnable",
    "shown_rows",
    "spec_records",
    "summary_line",
    "validate_report",
    "verdict_headline",
    "verdict_lines",
    "verdict_parts",
    "write_reports",
]

REPORT_SCHEMA_VERSION = "2.0"
REPORT_FILES = ("report.json", "report.md", "report.html", "junit.xml")
JOURNAL = "results.jsonl"
CASES_DIR = "cases"
MAX_INLINE_TOKEN = 2000
MAX_LISTED_ELEMENTS = 16
BAD_STATUSES = ("fail", "error", "crashed")
_SCHEMA_PATH = Path(__file__).parent / "schemas" / "report.schema.json"


# -- records ---------------------------------------------------------------------------------
def spec_records(specs: Sequence[Spec]) -> list[dict[str, Any]]:
    """What a report keeps of each spec: id, version, file, sha256 and every row id, in run order."""
    return [
        {
            "contract": s.contract,
            "version": s.raw["version"],
            "path": f"{s.family}/{s.path.name}",
            "sha256": s.sha256,
            "rows": [row_id(s, combo) for combo in [*s.param_combinations(), None]],
        }
        for s in specs
    ]


def run_record(
    *,
    backend: Mapping[str, Any],
    backend_arg: str,
    spec: str,
    where: str | None,
    shard: Shard | None,
    profile: str,
    seed: int,
    command: str,
    started: dt.datetime,
) -> dict[str, Any]:
    """One run as a report records it; ``complete`` and ``duration_s`` are set when it ends."""
    return {
        "backend": dict(backend),
        "backend_arg": backend_arg,
        "spec": spec,
        "where": where,
        "shard": None if shard is None else {"index": shard.index, "count": shard.count},
        "profile": profile,
        "seed": seed,
        "command": command,
        "created": started.isoformat(timespec="seconds"),
        "duration_s": None,
        "complete": False,
        "suite": {"name": "qconform", "version": suite_version(), **git_commit()},
        "environment": fingerprint(),
    }


def _counterexample(case: Case, result: ComboResult) -> dict[str, Any]:
    inputs = []
    for name, tensor in case.inputs.items():
        width = get_dtype(tensor.dtype).bits
        flat = tensor.bits.reshape(-1)
        inputs.append(
            {
                "name": name,
                "dtype": tensor.dtype,
                "shape": list(tensor.shape),
                "bits": [format_bits(b, width) for b in flat[:MAX_LISTED_ELEMENTS]],
                "truncated": bool(flat.size > MAX_LISTED_ELEMENTS),
            }
        )
    return {
        "label": case.label,
        "params": dict(case.params),
        "inputs": inputs,
        "source_elements": list(case.elements),
        "mismatches": [
            {"output": m.output, "message": m.message, "count": m.count, "total": m.total, "elements": m.elements}
            for m in result.mismatches
        ],
    }


def result_record(result: ComboResult, run: int) -> dict[str, Any]:
    """One row of run ``run``; ``replay`` and ``case_file`` are filled in by :func:`assemble`."""
    return {
        "run": run,
        "id": result.id,
        "contract": result.contract,
        "kind": result.kind,
        "params": result.params,
        "status": result.status,
        "cases": result.cases,
        "duration_s": round(result.duration_s, 4),
        "message": result.message,
        "counterexample": None if result.case is None else _counterexample(result.case, result),
        "case": None if result.case is None else result.case.to_json(),
        "case_file": None,
        "replay": None,
        "errors": {name: [int(c) for c in counts] for name, counts in result.error_counts.items()},
    }


# -- columns ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """One implementation: the runs of one backend name on one device with one set of versions."""

    label: str
    runs: tuple[int, ...]


def _implementation(run: Mapping[str, Any]) -> str:
    b = run["backend"]
    return json.dumps([b["name"], b["device"], b["info"]], sort_keys=True)


def columns(report: Mapping[str, Any]) -> list[Column]:
    """The matrix columns, in the order their first run appears."""
    groups: dict[str, list[int]] = {}
    for i, run in enumerate(report["runs"]):
        groups.setdefault(_implementation(run), []).append(i)
    return [Column(report["runs"][runs[0]]["column"], tuple(runs)) for runs in groups.values()]


def _labels(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """A label per run: ``name (device)``, made unique per implementation where two would share one."""
    keys = list(dict.fromkeys(_implementation(r) for r in runs))
    by_key = {}
    seen: Counter[str] = Counter()
    for key in keys:
        name, device, _ = json.loads(key)
        base = f"{name} ({device})"
        seen[base] += 1
        by_key[key] = base if seen[base] == 1 else f"{base} #{seen[base]}"
    return [by_key[_implementation(r)] for r in runs]


# -- assembling -----------------------------------------------------------------------------
def _case_file(label: str, result_id: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._=,-]+", "_", f"{label}-{result_id}")
    return f"{CASES_DIR}/{stem}.json"


def _replay(run: Mapping[str, Any], result: dict[str, Any], report_dir: Path | None) -> None:
    """Fill ``replay`` (and ``case_file`` where the token is long) for a result with a counterexample."""
    result["replay"] = result["case_file"] = None
    if result["case"] is None:
        return
    token = Case.from_json(result["case"]).token()
    if len(token) > MAX_INLINE_TOKEN and report_dir is not None:
        result["case_file"] = _case_file(run["column"], result["id"])
        token = str(report_dir / result["case_file"])
    result["replay"] = f"qconform replay --backend {shlex.quote(run['backend_arg'])} {shlex.quote(token)}"


def _incomplete(
    runs: Sequence[Mapping[str, Any]], specs: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """Why the report does not cover what its runs set out to run (interrupted runs, missing shards).

    A shard that no run of its selection ran still counts as covered when complete runs of the same column hold a
    result for every row it would have run (without ``--where``, whose rows the report cannot tell from their ids):
    a shard lost to a time limit, run again in pieces (``--spec`` globs with the same ``--shard``), completes the
    report.  Each reason comes with the column it concerns.
    """
    reasons = [
        (run["column"], f"run {i} ({run['column']}, {run['command']}) was interrupted" + _not_run(run))
        for i, run in enumerate(runs)
        if not run["complete"]
    ]
    done = {(runs[r["run"]]["column"], r["id"]) for r in results if runs[r["run"]]["complete"]}
    sharded: dict[tuple[str, str, str | None, int], set[int]] = {}
    for run in runs:
        if run["shard"] is not None:
            key = (run["column"], run["spec"], run["where"], run["shard"]["count"])
            sharded.setdefault(key, set()).add(run["shard"]["index"])
    for (label, spec, where, count), present in sharded.items():
        missing = [
            i
            for i in range(1, count + 1)
            if i not in present and (where is not None or not _rows_done(label, spec, Shard(i, count), specs, done))
        ]
        if missing:
            scope = f"--spec {spec!r}" + (f" --where {where!r}" if where else "")
            shards = ", ".join(f"{i}/{count}" for i in missing)
            reasons.append((label, f"{label}, {scope}: shards {shards} are missing"))
    return reasons


def runnable(run: Mapping[str, Any], line: str) -> str:
    """A reproduce or replay line of ``run`` as it runs when pasted anywhere: ``cd DIR && line`` where the run's
    ``module:attr`` backend was found under the directory it ran in (``cwd``), else ``line``."""
    return f"cd {shlex.quote(run['cwd'])} && {line}" if run.get("cwd") else line


def _not_run(run: Mapping[str, Any]) -> str:
    """``: N of its M rows not run`` for an interrupted run that recorded them (``rows_not_run``)."""
    if run.get("rows_not_run") is None or run.get("rows_selected") is None:
        return ""
    return f": {len(run['rows_not_run'])} of its {run['rows_selected']} rows not run"


def verdict_headline(verdict: str, summary: Mapping[str, int], subject: str = "it implements") -> str:
    """A verdict that says what it covers: ``conformant`` bare only where every row ran (none not implemented),
    else ``conformant on the 25 rows it implements (895 of 920 not implemented)``; ``non-conformant`` (a row
    failed, errored or crashed: the counts say the rest); ``incomplete`` with what held so far."""
    total = sum(summary.values())
    missing = summary.get("not-implemented", 0)
    ran = total - missing
    if verdict == "non-conformant":
        return verdict
    if missing == 0:
        return verdict if total else f"{verdict} (no rows)"
    if ran == 0:
        return f"nothing implemented (all {total} rows not implemented{' so far' if verdict == 'incomplete' else ''})"
    scope = f"the {ran} row{'s' if ran != 1 else ''} {subject} ({missing} of {total} not implemented)"
    return f"conformant on {scope}" if verdict == "conformant" else f"incomplete (conformant so far on {scope})"


def _verdict(summary: Mapping[str, int], incomplete: bool) -> str:
    if any(summary.get(s, 0) for s in BAD_STATUSES):
        return "non-conformant"
    return "incomplete" if incomplete else "conformant"


def _column_verdicts(
    runs: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]], incomplete: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """One verdict per matrix column, in column order: what that implementation showed, on which rows."""
    out = []
    for label in dict.fromkeys(run["column"] for run in runs):
        counts = Counter(r["status"] for r in results if runs[r["run"]]["column"] == label)
        summary = {status: counts.get(status, 0) for status in STATUSES}
        verdict = _verdict(summary, any(col == label for col, _ in incomplete))
        out.append({"column": label, "verdict": verdict, "headline": verdict_headline(verdict, summary),
                    "rows": sum(summary.values()), "summary": summary})  # fmt: skip
    return out


def _rows_done(
    column: str, pattern: str, shard: Shard, specs: Sequence[Mapping[str, Any]], done: set[tuple[str, str]]
) -> bool:
    """Whether ``column`` has a result from a complete run for every row of ``--spec pattern --shard shard``."""
    return all(
        (column, row) in done
        for spec in specs
        if fnmatch.fnmatchcase(spec["contract"], pattern)
        for row in spec["rows"]
        if shard.holds(row)
    )


def assemble(
    runs: Sequence[Mapping[str, Any]],
    specs: Iterable[Mapping[str, Any]],
    results: Iterable[Mapping[str, Any]],
    report_dir: Path | None,
) -> dict[str, Any]:
    """A report from its runs, specs and results (the one way both ``run`` and ``merge`` build one).

    Results are put in matrix order (column, then spec path, then the spec's row order), each
    run gets its column label, and every counterexample its replay command for ``report_dir``.
    """
    runs = [{**r, "column": label} for r, label in zip(runs, _labels(runs), strict=True)]
    spec_list = sorted((dict(s) for s in specs), key=lambda s: s["path"])
    position = {(s["contract"], rid): (i, j) for i, s in enumerate(spec_list) for j, rid in enumerate(s["rows"])}
    column_index = {key: c for c, key in enumerate(dict.fromkeys(map(_implementation, runs)))}
    column_of = [column_index[_implementation(run)] for run in runs]
    ordered = sorted(
        (dict(r) for r in results),
        key=lambda r: (column_of[r["run"]], *position.get((r["contract"], r["id"]), (len(spec_list), 0)), r["id"]),
    )
    for r in ordered:
        _replay(runs[r["run"]], r, report_dir)
    counts = Counter(r["status"] for r in ordered)
    incomplete = _incomplete(runs, spec_list, ordered)
    summary = {status: counts.get(status, 0) for status in STATUSES}
    verdict = _verdict(summary, bool(incomplete))
    per_column = _column_verdicts(runs, ordered, incomplete)
    subject = "it implements" if len(per_column) == 1 else "the backends implement"
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "verdict": verdict,
        "headline": verdict_headline(verdict, summary, subject),
        "column_verdicts": per_column,
        "summary": summary,
        "incomplete": [reason for _, reason in incomplete],
        "error_bin_edges": list(ERROR_BIN_EDGES[:-1]),
        "specs": spec_list,
        "runs": runs,
        "results": ordered,
    }


# -- the journal of a run in progress --------------------------------------------------------
class Journal:
    """``results.jsonl``: the run and its specs on the first line, then one line per finished row,
    then ``{"end": ...}``; each line is flushed and synced as it is written."""

    def __init__(self, report_dir: Path, run: Mapping[str, Any], specs: Sequence[Mapping[str, Any]]):
        self.path = report_dir / JOURNAL
        self._file = self.path.open("w")
        self._write({"schema_version": REPORT_SCHEMA_VERSION, "run": dict(run), "specs": list(specs)})

    def _write(self, obj: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(obj) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def add(self, result: Mapping[str, Any]) -> None:
        self._write({"result": dict(result)})

    def end(self, duration_s: float) -> None:
        self._write({"end": {"duration_s": round(duration_s, 3)}})
        self._file.close()

    def remove(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)


# -- loading and merging ---------------------------------------------------------------------
@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(json.loads(_SCHEMA_PATH.read_text()))


def validate_report(report: Mapping[str, Any], source: str) -> None:
    """``QConformError`` naming ``source``, the key path and the problem where ``report`` breaks the schema."""
    version = report.get("schema_version") if isinstance(report, Mapping) else None
    if version != REPORT_SCHEMA_VERSION:
        raise QConformError(
            f"{source}: schema_version {version!r}, but this qconform reads {REPORT_SCHEMA_VERSION!r} "
            "(re-run the suite, or use the qconform that wrote it)"
        )
    error = jsonschema.exceptions.best_match(_validator().iter_errors(report))
    if error is not None:
        where = "/".join(str(k) for k in error.absolute_path) or "<top>"
        raise QConformError(f"{source}: not a valid report: at {where}: {error.message}")


@dataclass(frozen=True)
class ReportParts:
    """What one input of a merge holds: its runs, specs and results (run indices local to it)."""

    source: str
    runs: list[dict[str, Any]]
    specs: list[dict[str, Any]]
    results: list[dict[str, Any]]


def _read_journal(path: Path) -> ReportParts:
    """A journal; a last line cut short by a kill is dropped."""
    text = path.read_text()
    text = text[: text.rfind("\n") + 1]
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise QConformError(f"{path}:{n}: not JSON ({exc})") from None
    if not records or not isinstance(records[0], dict) or "run" not in records[0]:
        raise QConformError(f"{path}: not a qconform results journal (its first line holds no run)")
    head = records[0]
    run = dict(head["run"])
    results = [dict(rec["result"], run=0) for rec in records[1:] if "result" in rec]
    end = next((rec["end"] for rec in records[1:] if "end" in rec), None)
    run["complete"], run["duration_s"] = end is not None, None if end is None else end["duration_s"]
    parts = ReportParts(str(path), [run], list(head["specs"]), results)
    validate_report(assemble(parts.runs, parts.specs, parts.results, None), str(path))
    return parts


def load_parts(path: Path) -> ReportParts:
    """A ``report.json``, or the ``results.jsonl`` journal a killed run left, checked against the schema."""
    try:
        if path.suffix == ".jsonl":
            return _read_journal(path)
        report = json.loads(path.read_text())
    except OSError as exc:
        raise QConformError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise QConformError(f"{path}: not JSON ({exc})") from None
    validate_report(report, str(path))
    return ReportParts(str(path), report["runs"], report["specs"], report["results"])


def merge_reports(paths: Sequence[Path], report_dir: Path | None) -> dict[str, Any]:
    """One report from several (shards, runs of other backends); ``QConformError`` where they do not fit.

    Refused: a contract whose spec hash differs between inputs (the runs checked different
    contracts), a row that two inputs ran for the same implementation (a shard given twice, or
    overlapping runs), and runs of one implementation with different seeds or profiles (their
    cases differ, so they do not form one run).
    """
    if not paths:
        raise QConformError("report merge needs at least one report.json or results.jsonl")
    parts = [load_parts(p) for p in paths]
    specs: dict[str, tuple[dict[str, Any], str]] = {}
    for part in parts:
        for s in part.specs:
            seen = specs.setdefault(s["contract"], (s, part.source))
            if seen[0]["sha256"] != s["sha256"]:
                raise QConformError(
                    f"{s['contract']}: spec sha256 {seen[0]['sha256'][:16]}... in {seen[1]}, but "
                    f"{s['sha256'][:16]}... in {part.source}: the runs checked different versions of the contract; "
                    "merge runs of one spec version"
                )
    runs: list[dict[str, Any]] = []
    sources: list[str] = []
    results: list[dict[str, Any]] = []
    for part in parts:
        offset = len(runs)
        runs += part.runs
        sources += [part.source] * len(part.runs)
        results += [dict(r, run=r["run"] + offset) for r in part.results]
    first_run: dict[str, int] = {}
    for i, run in enumerate(runs):
        j = first_run.setdefault(_implementation(run), i)
        for field in ("seed", "profile"):
            if run[field] != runs[j][field]:
                raise QConformError(
                    f"backend {run['backend']['name']!r} on {run['backend']['device']}: {field} {runs[j][field]!r} "
                    f"in {sources[j]}, but {run[field]!r} in {sources[i]}: runs of one backend merge only with one "
                    f"{field} (they would not form one run)"
                )
    owner: dict[tuple[str, str], int] = {}
    for r in results:
        key = (_implementation(runs[r["run"]]), r["id"])
        if key in owner:
            name = runs[r["run"]]["backend"]["name"]
            raise QConformError(
                f"duplicate row id {r['id']!r} for backend {name!r}: in {sources[owner[key]]} and in "
                f"{sources[r['run']]} (a shard given twice, or runs that overlap)"
            )
        owner[key] = r["run"]
    return assemble(runs, (s for s, _ in specs.values()), results, report_dir)


# -- writing ----------------------------------------------------------------------------------
def prepare_report_dir(report_dir: Path) -> list[Path]:
    """Create ``report_dir`` and check it takes files; returns the directories created (to remove on failure)."""
    created = [p for p in (report_dir, *report_dir.parents) if not p.exists()][::-1]
    try:
        report_dir.mkdir(parents=True, exist_ok=True)
        probe = report_dir / ".qconform-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        remove_created(created)
        raise QConformError(f"cannot write reports to {report_dir}: {exc.strerror or exc}") from None
    return created


def remove_created(created: Sequence[Path]) -> None:
    """Remove the directories ``prepare_report_dir`` created, where they are still empty."""
    for path in reversed(created):
        try:
            path.rmdir()
        except OSError:
            return


def clear_report_dir(report_dir: Path) -> None:
    """Remove a previous run's report files, journal and saved cases, so no stale file survives."""
    for name in (*REPORT_FILES, JOURNAL):
        (report_dir / name).unlink(missing_ok=True)
    shutil.rmtree(report_dir / CASES_DIR, ignore_errors=True)


def _write_whole(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_reports(report: Mapping[str, Any], report_dir: Path, show_unimplemented: bool = False) -> list[Path]:
    """Write the saved cases, then the four report files; each file is written whole.  ``show_unimplemented``:
    keep the rows no column implements in ``report.md`` and ``report.html`` (``shown_rows``)."""
    from conformance.html_report import render_html

    report_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for r in report["results"]:
        if r["case_file"] is not None:
            path = report_dir / r["case_file"]
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_whole(path, json.dumps(r["case"]))
    for name, text in (
        ("report.json", json.dumps(report, indent=1) + "\n"),
        ("report.md", render_markdown(report, show_unimplemented)),
        ("report.html", render_html(report, show_unimplemented)),
        ("junit.xml", render_junit(report)),
    ):
        path = report_dir / name
        _write_whole(path, text)
        written.append(path)
    return written


# -- text renderings ----------------------------------------------------------------------------
_ICON = {"pass": "pass", "fail": "**FAIL**", "error": "**ERROR**", "crashed": "**CRASHED**", "not-implemented": "n/i"}


def summary_line(report: Mapping[str, Any]) -> str:
    """``N pass, N fail, ...`` over every status (of ``report``, or of one of its ``column_verdicts``)."""
    return ", ".join(f"{n} {status}" for status, n in report["summary"].items())


def verdict_parts(report: Mapping[str, Any]) -> list[tuple[str | None, str, str]]:
    """The verdicts at a report's top as (column label or None for the whole, headline, counts): the whole
    report's, then, where the matrix has several columns, one per column.  A report written before headlines
    existed gets them computed from its results."""
    headline = report.get("headline") or report["verdict"]
    parts: list[tuple[str | None, str, str]] = [(None, headline, summary_line(report))]
    per_column = report.get("column_verdicts")
    if per_column is None:
        pairs = [(run["column"], "") for run in report["runs"] if not run["complete"]]
        per_column = _column_verdicts(report["runs"], report["results"], pairs)
    if len(per_column) > 1:
        parts += [(c["column"], c["headline"], summary_line(c)) for c in per_column]
    return parts


def verdict_lines(report: Mapping[str, Any]) -> list[str]:
    """``headline: counts``, then ``  label: headline: counts`` per column (``verdict_parts``): what ``qconform``
    prints."""
    return [f"{'  ' + label + ': ' if label else ''}{headline}: {counts}" for label, headline, counts in
            verdict_parts(report)]  # fmt: skip


def row_params(result: Mapping[str, Any]) -> str:
    """A row's variant as text: ``format=float8_e4m3fn, overflow=saturate``."""
    if result["kind"] == "invalid-input":
        return "invalid inputs"
    return ", ".join(f"{k}={v}" for k, v in result["params"].items()) or "(single row)"


def matrix_rows(report: Mapping[str, Any]) -> list[tuple[str, str, dict[int, Mapping[str, Any]]]]:
    """(contract, row id, {column index: result}) for every row some column ran, in spec order."""
    cols = columns(report)
    column_of = {run: c for c, col in enumerate(cols) for run in col.runs}
    cells: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = {}
    for r in report["results"]:
        cells.setdefault((r["contract"], r["id"]), {})[column_of[r["run"]]] = r
    ordered = [(s["contract"], rid) for s in report["specs"] for rid in s["rows"] if (s["contract"], rid) in cells]
    extra = [key for key in cells if key not in set(ordered)]
    return [(contract, rid, cells[(contract, rid)]) for contract, rid in [*ordered, *extra]]


def shown_rows(
    report: Mapping[str, Any], show_unimplemented: bool = False
) -> tuple[list[tuple[str, str, dict[int, Mapping[str, Any]]]], int]:
    """``matrix_rows`` a person reads, and how many were left out: a row that every column reports
    *not-implemented* says nothing about any implementation, so ``report.md`` and ``report.html`` hide it unless
    ``show_unimplemented`` (``--show-unimplemented``); ``report.json`` always keeps every row."""
    rows = matrix_rows(report)
    if show_unimplemented:
        return rows, 0
    kept = [row for row in rows if any(r["status"] != "not-implemented" for r in row[2].values())]
    return kept, len(rows) - len(kept)


def hidden_note(hidden: int) -> str:
    """The line a rendering prints where it hid rows no column implements (``""`` where it hid none)."""
    if not hidden:
        return ""
    verb = "row that no backend implements is" if hidden == 1 else "rows that no backend implements are"
    return f"{hidden} {verb} hidden (--show-unimplemented shows them; report.json has every row)."


def render_markdown(report: Mapping[str, Any], show_unimplemented: bool = False) -> str:
    cols = columns(report)
    rows, hidden = shown_rows(report, show_unimplemented)
    lines = [
        "# qconform conformance report",
        "",
        *(
            f"**Verdict: {headline}** — {counts}." if label is None else f"- `{label}`: **{headline}** — {counts}."
            for label, headline, counts in verdict_parts(report)
        ),
        *(f"- incomplete: {reason}" for reason in report["incomplete"]),
        "",
    ]
    for i, run in enumerate(report["runs"]):
        env, suite = run["environment"], run["suite"]
        info = ", ".join(f"{k} {v}" for k, v in run["backend"]["info"].items())
        shard = f", shard {run['shard']['index']}/{run['shard']['count']}" if run["shard"] else ""
        lines += [
            f"- Run {i}: `{run['column']}` ({info}); profile `{run['profile']}`, seed {run['seed']}{shard}; "
            f"qconform {suite['version']}, commit `{suite['commit'][:12]}`"
            f"{'' if suite['clean'] in (True, None) else ' (uncommitted changes)'}; Python {env['python']}, "
            f"NumPy {env['numpy']}, torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, "
            f"GPU {env['gpu'] or 'none'}, driver {env['driver'] or 'n/a'}",
            f"  reproduce with: `{runnable(run, run['command'])}`",
        ]
    header = " | ".join(f"`{c.label}`" for c in cols)
    lines += [
        "",
        "## Conformance matrix",
        "",
        f"| contract | parameters | {header} | note |",
        f"| --- | --- | {' | '.join('---' for _ in cols)} | --- |",
    ]
    for contract, _, cells in rows:
        any_result = next(iter(cells.values()))
        marks = " | ".join(
            f"{_ICON[cells[c]['status']]} ({cells[c]['cases']})" if c in cells else "—" for c in range(len(cols))
        )
        # A failure's message first: a not-implemented reason of another column must not stand for it.
        notes = sorted(
            (r["status"] == "not-implemented", r["message"].splitlines()[0])
            for r in cells.values()
            if r["message"] and r["status"] != "pass"
        )
        note = notes[0][1].replace("|", "/") if notes else ""
        lines.append(f"| `{contract}` | {row_params(any_result)} | {marks} | {note} |")
    if hidden:
        lines += ["", hidden_note(hidden)]
    failing = [r for r in report["results"] if r["status"] in BAD_STATUSES]
    if failing:
        lines += ["", "## Counterexamples", ""]
    for r in failing:
        label = report["runs"][r["run"]]["column"]
        first = r["message"].splitlines()[0] if r["message"] else ""
        lines += [f"### `{r['id']}` on `{label}`: {r['status']}", "", first, ""]
        rest = r["message"].splitlines()[1:] if r["status"] in ("error", "crashed") and r["message"] else []
        if rest:  # the traceback's last frames, as the worker sent them
            lines += ["```", *rest, "```", ""]
        ce = r["counterexample"]
        if ce:
            for t in ce["inputs"]:
                more = " …" if t["truncated"] else ""
                lines.append(f"- input `{t['name']}`: {t['dtype']}{t['shape']} = {' '.join(t['bits'])}{more}")
            for m in ce["mismatches"]:
                for e in m["elements"]:
                    lines.append(
                        f"- `{m['output']}{e['index']}`: backend {e['backend']} ({e['backend_value']}), "
                        f"reference {e['reference']} ({e['reference_value']})"
                    )
        if r["replay"]:
            lines += ["", "```", runnable(report["runs"][r["run"]], r["replay"]), "```"]
        lines.append("")
    lines += ["", "## Specs", "", "| contract | version | sha256 |", "| --- | ---: | --- |"]
    lines += [f"| `{s['contract']}` | {s['version']} | `{s['sha256'][:16]}` |" for s in report["specs"]]
    return "\n".join(lines) + "\n"


def render_junit(report: Mapping[str, Any]) -> str:
    """One testsuite per column, one testcase per row it ran."""
    root = ET.Element("testsuites")
    for col in columns(report):
        results = [r for r in report["results"] if r["run"] in col.runs]
        counts = Counter(r["status"] for r in results)
        first = report["runs"][col.runs[0]]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"qconform.{first['backend']['name']}",
            tests=str(len(results)),
            failures=str(counts["fail"]),
            errors=str(counts["error"] + counts["crashed"]),
            skipped=str(counts["not-implemented"]),
            time=f"{sum(r['duration_s'] for r in results):.3f}",
            timestamp=first["created"],
        )
        for r in results:
            case = ET.SubElement(
                suite, "testcase", classname=r["contract"], name=r["id"], time=f"{r['duration_s']:.4f}"
            )
            body = r["message"] + (f"\nreplay: {r['replay']}" if r["replay"] else "")
            first_line = r["message"].splitlines()[0] if r["message"] else ""
            if r["status"] == "fail":
                ET.SubElement(case, "failure", message=first_line).text = body
            elif r["status"] in ("error", "crashed"):
                ET.SubElement(case, "error", message=f"{r['status']}: {first_line}").text = body
            elif r["status"] == "not-implemented":
                ET.SubElement(case, "skipped", message=r["message"])
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
