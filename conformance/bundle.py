"""A vendor's submission: ``qconform bundle`` packs a report with a statement of claims, ``qconform verify``
checks that a bundle is complete and consistent.

A bundle is a zip file holding

- ``report.json`` (one run, or runs merged with ``qconform report merge``) and ``report.html``
  rendered from it;
- ``claims.yaml``: the statement, as the vendor wrote it;
- ``manifest.json``: ``bundle_version``, the suite that made the bundle, the report column the
  claims are about, each contract's spec sha256, each run's seed, profile, shard and command,
  and the sha256 of every other file.

The statement (YAML or JSON, read with ``yaml.safe_load``, schema
``schemas/report-bundle.schema.json#/$defs/claims``)::

    backend: my-vendor              # the report column: a backend name or "name (device)"
    statement: my-vendor 2.1 conforms to ...   # optional free text
    claims:                         # the rows claimed conformant
      - contract: "cast.*"          # a glob over contract ids
        where: "rounding == 'rne'"  # optional: only the parameter sets where it holds
    deviations:                     # rows stated not to conform, each with a reason
      - contract: cast.fp8
        where: "overflow == 'nonsaturating'"
        reason: our hardware saturates
        link: https://example.com/erratum-12   # optional

A claim or deviation selects rows as ``qconform run --spec GLOB --where EXPR`` does (without
``where``, a contract's invalid-input row too), from the *installed* specs, so a claim covers every
row of what it names.  The bundle is consistent when

1. every file the manifest lists is there with its sha256;
2. ``report.json`` is a valid report and complete (no interrupted run, no missing shard), and its
   spec hashes are the manifest's and the installed specs' (it checked the contracts this suite defines);
3. every row a claim selects and no deviation selects was run for the column and passed;
4. every deviation selects rows, and none of them passed (a deviation on a passing row is a stale
   statement; one on a row that failed, errored, crashed or is not implemented states it).

``bundle`` runs the same checks on the report and the statement before it writes anything.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import hashlib
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from conformance.environment import git_commit, suite_version
from conformance.errors import QConformError, SpecError
from conformance.expr import check_expression
from conformance.html_report import render_html
from conformance.registry import Spec, load_specs
from conformance.report import columns, validate_report
from conformance.runner import row_id, select_rows

__all__ = ["BUNDLE_VERSION", "Verification", "check_claims", "describe", "load_claims", "verify_bundle", "write_bundle"]

BUNDLE_VERSION = "1.0"
_SCHEMA_PATH = Path(__file__).parent / "schemas" / "report-bundle.schema.json"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass
class Verification:
    """The outcome of checking a statement against a report: the column and every problem found."""

    column: str | None = None
    claimed_rows: int = 0
    deviation_rows: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@functools.cache
def _validator(definition: str) -> jsonschema.protocols.Validator:
    schema = json.loads(_SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator({**schema, "$ref": f"#/$defs/{definition}"})


def _schema_problem(obj: Any, definition: str, source: str) -> str | None:
    error = jsonschema.exceptions.best_match(_validator(definition).iter_errors(obj))
    if error is None:
        return None
    where = "/".join(str(k) for k in error.absolute_path) or "<top>"
    return f"{source}: at {where}: {error.message}"


def load_claims(text: str, source: str) -> dict[str, Any]:
    """Parse and check a statement; ``QConformError`` naming ``source`` and the key where it is malformed."""
    try:
        claims = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise QConformError(f"{source}: not valid YAML: {exc}") from None
    problem = _schema_problem(claims, "claims", source)
    if problem is not None:
        raise QConformError(problem)
    return dict(claims)


def _column(report: Mapping[str, Any], backend: str | None) -> str:
    labels = {c.label: report["runs"][c.runs[0]]["backend"]["name"] for c in columns(report)}
    if backend is None:
        if len(labels) != 1:
            raise QConformError(f"the report has {len(labels)} columns {sorted(labels)}; name one with 'backend:'")
        return next(iter(labels))
    matches = [label for label, name in labels.items() if backend in (label, name)]
    if len(matches) != 1:
        found = "no column" if not matches else f"columns {matches}; name one as 'name (device)'"
        raise QConformError(f"backend {backend!r}: the report has {found} (its columns: {sorted(labels)})")
    return matches[0]


def _selected(entry: Mapping[str, Any], installed: Mapping[str, Spec], what: str) -> tuple[list[str], str | None]:
    """The row ids ``entry`` selects from the installed specs, or a problem."""
    specs = [s for c, s in installed.items() if fnmatch.fnmatchcase(c, entry["contract"])]
    if not specs:
        return [], f"{what} contract {entry['contract']!r} matches no installed contract"
    where = entry.get("where")
    if where is not None:
        try:
            check_expression(where, {name for s in specs for name in s.params})
        except SpecError as exc:
            return [], f"{what} {entry['contract']!r} where {where!r}: {exc}"
    rows = [row_id(spec, combo) for spec, combo in select_rows(specs, where)]
    if not rows:
        return [], f"{what} {entry['contract']!r} where {where!r} selects no row"
    return rows, None


def check_claims(report: Mapping[str, Any], claims: Mapping[str, Any], installed: Mapping[str, Spec]) -> Verification:
    """Check a statement against a report and the installed specs (module docstring, points 2 to 4)."""
    out = Verification()
    try:
        out.column = _column(report, claims.get("backend"))
    except QConformError as exc:
        out.problems.append(str(exc))
        return out
    out.problems += [f"the report is incomplete: {reason}" for reason in report["incomplete"]]
    for s in report["specs"]:
        spec = installed.get(s["contract"])
        if spec is None:
            out.problems.append(f"{s['contract']}: in the report, but this qconform defines no such contract")
        elif spec.sha256 != s["sha256"]:
            out.problems.append(
                f"{s['contract']}: the report ran spec sha256 {s['sha256'][:16]}..., but the installed spec "
                f"{spec.path} is {spec.sha256[:16]}... (re-run the suite with the installed specs)"
            )
    runs = {i for c in columns(report) if c.label == out.column for i in c.runs}
    results = {r["id"]: r for r in report["results"] if r["run"] in runs}
    deviated: set[str] = set()
    for entry in claims.get("deviations") or []:
        rows, problem = _selected(entry, installed, "deviation")
        if problem is not None:
            out.problems.append(problem)
            continue
        passed = [r for r in rows if r in results and results[r]["status"] == "pass"]
        if passed:
            out.problems.append(
                f"deviation {entry['contract']!r} ({entry['reason']}) selects {len(passed)} row(s) that passed, "
                f"e.g. {passed[0]}: narrow its 'where' or drop it"
            )
        deviated.update(rows)
    claimed: set[str] = set()
    for entry in claims["claims"]:
        rows, problem = _selected(entry, installed, "claim")
        if problem is not None:
            out.problems.append(problem)
            continue
        claimed.update(r for r in rows if r not in deviated)
    for rid in sorted(claimed):
        r = results.get(rid)
        if r is None:
            out.problems.append(f"claimed row {rid} was not run for {out.column}")
        elif r["status"] != "pass":
            first = r["message"].splitlines()[0] if r["message"] else ""
            out.problems.append(f"claimed row {rid}: {r['status']} on {out.column}: {first}")
    out.claimed_rows, out.deviation_rows = len(claimed), len(deviated)
    return out


def _installed() -> dict[str, Spec]:
    return {s.contract: s for s in load_specs()}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _run_summary(run: Mapping[str, Any]) -> dict[str, Any]:
    shard = None if run["shard"] is None else f"{run['shard']['index']}/{run['shard']['count']}"
    return {"column": run["column"], "seed": run["seed"], "profile": run["profile"], "shard": shard,
            "command": run["command"]}  # fmt: skip


def write_bundle(report_path: Path, claims_path: Path, out: Path) -> Verification:
    """Check the statement against the report and, only when it holds, write the bundle ``out`` whole."""
    try:
        report_bytes, claims_bytes = report_path.read_bytes(), claims_path.read_bytes()
        report = json.loads(report_bytes)
    except OSError as exc:
        raise QConformError(f"cannot read {exc.filename}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise QConformError(f"{report_path}: not JSON ({exc})") from None
    validate_report(report, str(report_path))
    claims = load_claims(claims_bytes.decode(), str(claims_path))
    verification = check_claims(report, claims, _installed())
    if not verification.ok:
        return verification
    files = {"report.json": report_bytes, "report.html": render_html(report).encode(), "claims.yaml": claims_bytes}
    manifest = {
        "bundle_version": BUNDLE_VERSION,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "suite": {"name": "qconform", "version": suite_version(), **git_commit()},
        "backend": verification.column,
        "specs": {s["contract"]: s["sha256"] for s in report["specs"]},
        "runs": [_run_summary(run) for run in report["runs"]],
        "files": {name: _sha256(data) for name, data in files.items()},
    }
    tmp = out.with_name(out.name + ".tmp")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
            for name, data in [*files.items(), ("manifest.json", json.dumps(manifest, indent=1).encode())]:
                bundle.writestr(zipfile.ZipInfo(name, _ZIP_TIME), data, compress_type=zipfile.ZIP_DEFLATED)
        tmp.replace(out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise QConformError(f"cannot write the bundle {out}: {exc.strerror or exc}") from None
    return verification


def _read_members(path: Path) -> dict[str, bytes]:
    try:
        with zipfile.ZipFile(path) as bundle:
            return {name: bundle.read(name) for name in bundle.namelist()}
    except FileNotFoundError:
        raise QConformError(f"no bundle at {path}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise QConformError(f"{path}: not a qconform bundle (a zip file): {exc}") from None


def verify_bundle(path: Path) -> Verification:
    """Check a bundle (module docstring, points 1 to 4); every problem found is listed."""
    members = _read_members(path)
    out = Verification()
    if "manifest.json" not in members:
        out.problems.append(f"{path}: no manifest.json; was it written by qconform bundle?")
        return out
    manifest = json.loads(members["manifest.json"])
    problem = _schema_problem(manifest, "manifest", f"{path}:manifest.json")
    if problem is not None:
        out.problems.append(problem)
        return out
    for name, digest in manifest["files"].items():
        if name not in members:
            out.problems.append(f"{name}: listed in the manifest, missing from the bundle")
        elif _sha256(members[name]) != digest:
            out.problems.append(f"{name}: its sha256 is not the manifest's (changed after bundling)")
    if out.problems:
        return out
    try:
        report = json.loads(members["report.json"])
        validate_report(report, f"{path}:report.json")
        claims = load_claims(members["claims.yaml"].decode(), f"{path}:claims.yaml")
    except (QConformError, json.JSONDecodeError) as exc:
        out.problems.append(str(exc))
        return out
    checked = check_claims(report, claims, _installed())
    if {s["contract"]: s["sha256"] for s in report["specs"]} != manifest["specs"]:
        checked.problems.insert(0, "the manifest's spec hashes are not the report's")
    out = checked
    if out.column is not None and out.column != manifest["backend"]:
        out.problems.append(f"the manifest names backend {manifest['backend']!r}, the claims {out.column!r}")
    return out


def describe(verification: Verification, what: str) -> Sequence[str]:
    """Lines for the terminal: what was verified, or every problem."""
    if verification.ok:
        return [
            f"{what}: consistent: {verification.claimed_rows} claimed row(s) passed on {verification.column}, "
            f"{verification.deviation_rows} row(s) stated as deviations"
        ]
    return [f"{what}: {len(verification.problems)} problem(s):", *(f"  - {p}" for p in verification.problems)]
