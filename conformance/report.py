"""Reports of a run: ``report.json`` (schema ``schemas/report.schema.json``), ``report.md``
(a conformance matrix a person reads in a minute) and ``junit.xml`` (one testcase per
contract x parameter set).  Counterexamples whose replay token is long are saved under
``cases/`` and the replay command points at the file.
"""

from __future__ import annotations

import datetime as dt
import json
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from conformance.carriers import get_dtype
from conformance.compare import format_bits
from conformance.environment import fingerprint, git_commit, suite_version
from conformance.registry import Spec
from conformance.runner import ComboResult

__all__ = ["REPORT_SCHEMA_VERSION", "build_report", "replay_command", "write_reports"]

REPORT_SCHEMA_VERSION = "1.0"
MAX_INLINE_TOKEN = 2000
MAX_LISTED_ELEMENTS = 16


def replay_command(backend: str, result: ComboResult, report_dir: Path | None) -> str | None:
    """One line that replays the counterexample of ``result`` exactly."""
    if result.case is None:
        return None
    token = result.case.token()
    if len(token) > MAX_INLINE_TOKEN and report_dir is not None:
        path = report_dir / "cases" / f"{result.id.replace('/', '_')}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result.case.to_json()))
        token = str(path)
    return f"qconform replay --backend {shlex.quote(backend)} {shlex.quote(token)}"


def _counterexample(result: ComboResult) -> dict[str, Any] | None:
    case = result.case
    if case is None:
        return None
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


def build_report(
    *,
    backend: Mapping[str, Any],
    backend_arg: str,
    specs: Sequence[Spec],
    results: Sequence[ComboResult],
    profile: str,
    seed: int,
    command: str,
    started: dt.datetime,
    report_dir: Path | None,
) -> dict[str, Any]:
    counts = Counter(r.status for r in results)
    verdict = "conformant" if counts["fail"] == 0 and counts["error"] == 0 else "non-conformant"
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "suite": {"name": "qconform", "version": suite_version(), **git_commit()},
        "created": started.isoformat(timespec="seconds"),
        "duration_s": round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 3),
        "command": command,
        "backend": dict(backend),
        "environment": fingerprint(),
        "profile": profile,
        "seed": seed,
        "specs": [
            {
                "contract": s.contract,
                "version": s.raw["version"],
                "path": f"{s.family}/{s.path.name}",
                "sha256": s.sha256,
                "examples": s.examples_for(profile),
            }
            for s in specs
        ],
        "verdict": verdict,
        "summary": {status: counts.get(status, 0) for status in ("pass", "fail", "error", "not-implemented")},
        "results": [
            {
                "id": r.id,
                "contract": r.contract,
                "kind": r.kind,
                "params": r.params,
                "status": r.status,
                "cases": r.cases,
                "duration_s": round(r.duration_s, 4),
                "message": r.message,
                "counterexample": _counterexample(r),
                "replay": replay_command(backend_arg, r, report_dir),
            }
            for r in results
        ],
    }


_ICON = {"pass": "pass", "fail": "**FAIL**", "error": "**ERROR**", "not-implemented": "n/i"}


def render_markdown(report: Mapping[str, Any]) -> str:
    env, backend, summary = report["environment"], report["backend"], report["summary"]
    info = ", ".join(f"{k} {v}" for k, v in backend["info"].items())
    lines = [
        f"# qconform conformance report: `{backend['name']}`",
        "",
        f"**Verdict: {report['verdict']}** — {summary['pass']} pass, {summary['fail']} fail, "
        f"{summary['error']} error, {summary['not-implemented']} not implemented.",
        "",
        f"- Backend: `{backend['name']}` on `{backend['device']}` ({info})",
        f"- Suite: qconform {report['suite']['version']}, commit `{report['suite']['commit'][:12]}`"
        f"{'' if report['suite']['clean'] else ' (uncommitted changes)'}",
        f"- Environment: Python {env['python']}, NumPy {env['numpy']}, torch {env['torch']}, triton {env['triton']}, "
        f"CUDA {env['cuda']}, GPU {env['gpu'] or 'none'}, driver {env['driver'] or 'n/a'}",
        f"- Profile `{report['profile']}`, seed {report['seed']}; reproduce with: `{report['command']}`",
        "",
        "## Conformance matrix",
        "",
        "| contract | parameters | status | cases | note |",
        "| --- | --- | --- | ---: | --- |",
    ]
    for r in report["results"]:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or (
            "invalid inputs" if r["kind"] == "invalid-input" else "—"
        )
        note = r["message"].splitlines()[0] if r["message"] else ""
        lines.append(
            f"| `{r['contract']}` | {params} | {_ICON[r['status']]} | {r['cases']} | {note.replace('|', '/')} |"
        )
    failing = [r for r in report["results"] if r["status"] in ("fail", "error")]
    if failing:
        lines += ["", "## Counterexamples", ""]
    for r in failing:
        lines += [f"### `{r['id']}`: {r['status']}", "", r["message"].splitlines()[0] if r["message"] else "", ""]
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
            lines += ["", "```", r["replay"], "```"]
        lines.append("")
    lines += ["", "## Specs", "", "| contract | version | sha256 |", "| --- | ---: | --- |"]
    lines += [f"| `{s['contract']}` | {s['version']} | `{s['sha256'][:16]}` |" for s in report["specs"]]
    return "\n".join(lines) + "\n"


def render_junit(report: Mapping[str, Any]) -> str:
    results = report["results"]
    counts = report["summary"]
    suite = ET.Element(
        "testsuite",
        name=f"qconform.{report['backend']['name']}",
        tests=str(len(results)),
        failures=str(counts["fail"]),
        errors=str(counts["error"]),
        skipped=str(counts["not-implemented"]),
        time=f"{report['duration_s']:.3f}",
        timestamp=report["created"],
    )
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=r["contract"], name=r["id"], time=f"{r['duration_s']:.4f}")
        body = r["message"] + (f"\nreplay: {r['replay']}" if r["replay"] else "")
        if r["status"] == "fail":
            ET.SubElement(case, "failure", message=r["message"].splitlines()[0]).text = body
        elif r["status"] == "error":
            ET.SubElement(case, "error", message=r["message"].splitlines()[0]).text = body
        elif r["status"] == "not-implemented":
            ET.SubElement(case, "skipped", message=r["message"])
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_reports(report: Mapping[str, Any], report_dir: Path) -> list[Path]:
    """Write the three report files; each is written whole (temporary file, then rename)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (
        ("report.json", json.dumps(report, indent=2) + "\n"),
        ("report.md", render_markdown(report)),
        ("junit.xml", render_junit(report)),
    ):
        path = report_dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        written.append(path)
    return written
