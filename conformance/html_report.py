"""``report.html``: one self-contained page for a person (a customer, a reviewer) to read.

No network and no external assets: the CSS is inline, the plots are inline SVG, and there is no
script at all, so the page reads the same from a mail attachment, a CI artifact or a bundle.
It opens with the verdict and the conformance matrix (one row per contract x parameter set, one
column per implementation, every cell pass / fail / error / crashed / n/i, or "—" where that
column did not run the row; rows that no column implements are hidden unless asked for), right after the
verdict each run's reproduce command and main versions, then per contract the rows with the cases they ran, every
counterexample with its input bit patterns (hex), the differing output elements and the replay
command, and for a contract with a tolerance the distribution of the errors (the share of the
tolerance each compared element used, ``runner.ERROR_BIN_EDGES``), then each run's environment
fingerprint and the exact command (seed included) that reproduces it, and the spec hashes.
Everything comes from ``report.json`` (``report.assemble``); nothing here reads the specs.
"""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from conformance.report import (
    BAD_STATUSES,
    columns,
    hidden_note,
    row_params,
    runnable,
    shown_rows,
    summary_line,
    verdict_parts,
)

__all__ = ["render_html"]

_LABEL = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "crashed": "CRASHED", "not-implemented": "n/i"}

_CSS = """
:root { --pass: #1a7f37; --pass-bg: #dafbe1; --fail: #cf222e; --fail-bg: #ffebe9; --error: #9a4500;
  --error-bg: #fff1e5; --crashed: #6e40c9; --crashed-bg: #f3e8ff; --ni: #57606a; --ni-bg: #f0f2f4; --line: #d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: #1f2328;
  margin: 0 auto; padding: 0 24px 48px; max-width: 1280px; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 18px; margin: 32px 0 8px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 24px 0 6px; } h4 { font-size: 14px; margin: 14px 0 4px; }
code, pre, .bits { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; font-size: 12.5px; }
pre { background: #f6f8fa; border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; overflow-x: auto;
  white-space: pre-wrap; word-break: break-all; }
#verdict { margin: 16px 0 8px; padding: 14px 18px; border-radius: 8px; border: 2px solid; }
#verdict.conformant { border-color: var(--pass); background: var(--pass-bg); }
#verdict.non-conformant { border-color: var(--fail); background: var(--fail-bg); }
#verdict.incomplete { border-color: #9a6700; background: #fff8c5; }
#verdict .verdict-word { font-size: 26px; font-weight: 700; }
#verdict.conformant .verdict-word { color: var(--pass); } #verdict.non-conformant .verdict-word { color: var(--fail); }
#verdict.incomplete .verdict-word { color: #9a6700; }
.counts span { display: inline-block; margin: 4px 6px 0 0; padding: 1px 8px; border-radius: 10px; font-weight: 600; }
nav a { margin-right: 14px; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
table.matrix td.cell { text-align: center; white-space: nowrap; min-width: 88px; }
table.matrix tr.contract th { background: #eaeef2; }
table.matrix td.variant { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12px; }
.s-pass { color: var(--pass); background: var(--pass-bg); } .s-fail { color: var(--fail); background: var(--fail-bg); }
.s-error { color: var(--error); background: var(--error-bg); }
.s-crashed { color: var(--crashed); background: var(--crashed-bg); }
.s-not-implemented { color: var(--ni); background: var(--ni-bg); } .s-none { color: #8c959f; }
td.cell a, .counts a { color: inherit; text-decoration: none; font-weight: 600; }
.cases { color: #57606a; font-weight: 400; font-size: 12px; }
.muted { color: #57606a; } .msg { max-width: 640px; }
.cx { border-left: 4px solid var(--fail); padding: 2px 0 2px 12px; margin: 12px 0; }
.cx-crashed { border-color: var(--crashed); } .cx-error { border-color: var(--error); }
h3 code { font-size: 15px; }
svg.hist text { font: 11px system-ui, "DejaVu Sans", sans-serif; fill: #1f2328; }
.runs { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 0 28px; }
dl.env { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 6px 0; }
#reproduce { margin: 10px 0; } #reproduce pre { margin: 4px 0 8px; }
dl.env dt { color: #57606a; } dl.env dd { margin: 0; font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _anchor(*parts: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(str(p) for p in parts)).strip("-")


def _counts(summary: Mapping[str, int]) -> str:
    return "".join(f'<span class="s-{_e(s)}">{n} {_e(_LABEL[s])}</span>' for s, n in summary.items())


def _verdict(report: Mapping[str, Any]) -> str:
    cols = columns(report)
    runs = report["runs"]
    profiles = sorted({r["profile"] for r in runs})
    seeds = sorted({str(r["seed"]) for r in runs})
    reasons = "".join(f"<li>{_e(r)}</li>" for r in report["incomplete"])
    parts = verdict_parts(report)
    per_column = "".join(f"<li><b>{_e(label)}</b>: {_e(headline)} ({_e(counts)})</li>" for label, headline, counts
                         in parts[1:])  # fmt: skip
    return (
        f'<header id="verdict" class="{_e(report["verdict"])}">'
        "<h1>qconform conformance report</h1>"
        f'<div>Verdict: <span class="verdict-word">{_e(parts[0][1])}</span></div>'
        f'<div class="counts">{_counts(report["summary"])}</div>'
        + (f'<ul class="column-verdicts">{per_column}</ul>' if per_column else "")
        + f'<div class="muted">{len(cols)} implementation(s): {_e(", ".join(c.label for c in cols))}; '
        f"{len(report['specs'])} contract spec(s); {len(runs)} run(s); profile {_e(', '.join(profiles))}; "
        f"seed {_e(', '.join(seeds))}</div>" + (f"<ul>{reasons}</ul>" if reasons else "") + "</header>"
    )


def _cell(result: Mapping[str, Any] | None, col: int) -> str:
    if result is None:
        return '<td class="cell s-none" title="not run">—</td>'
    status = result["status"]
    title = result["message"].splitlines()[0] if result["message"] else status
    target = _anchor("row", col, result["id"])
    return (
        f'<td class="cell s-{_e(status)}" title="{_e(title)}"><a href="#{target}">{_e(_LABEL[status])}</a> '
        f'<span class="cases">{result["cases"]}</span></td>'
    )


def _aggregate(results: Iterable[Mapping[str, Any]]) -> str:
    """One column's cell on a contract's header row: its failures, or how many rows passed."""
    counts = Counter(r["status"] for r in results)
    if not counts:
        return '<td class="cell s-none">—</td>'
    bad = [s for s in BAD_STATUSES if counts[s]]
    if bad:
        text, css = ", ".join(f"{counts[s]} {_LABEL[s]}" for s in bad), bad[0]
    else:
        text, css = f"{counts['pass']}/{counts.total()} pass", "pass" if counts["pass"] else "not-implemented"
    return f'<td class="cell s-{css}">{_e(text)}</td>'


def _matrix(report: Mapping[str, Any], rows: list[Any], hidden: int) -> str:
    cols = columns(report)
    head = "".join(f"<th>{_e(c.label)}</th>" for c in cols)
    body: list[str] = []
    for contract in dict.fromkeys(contract for contract, _, _ in rows):
        mine = [cells for c, _, cells in rows if c == contract]
        aggregates = "".join(_aggregate(cells[i] for cells in mine if i in cells) for i in range(len(cols)))
        body.append(
            f'<tr class="contract"><th colspan="2"><a href="#{_anchor("contract", contract)}">'
            f"<code>{_e(contract)}</code></a></th>{aggregates}</tr>"
        )
        for cells in mine:
            any_result = next(iter(cells.values()))
            row = "".join(_cell(cells.get(i), i) for i in range(len(cols)))
            body.append(f'<tr><td></td><td class="variant">{_e(row_params(any_result))}</td>{row}</tr>')
    legend = (
        " ".join(f'<span class="s-{s}">&nbsp;{_e(_LABEL[s])}&nbsp;</span>' for s in report["summary"])
        + ' <span class="s-none">— not run</span>'
    )
    return (
        '<section id="matrix"><h2>Conformance matrix</h2>'
        f'<p class="muted">One row per contract x parameter set, one column per implementation; the small number '
        f"is the cases run. Legend: {legend}</p>"
        f'<table class="matrix"><thead><tr><th>contract</th><th>variant</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
        + (f'<p class="muted hidden-rows">{_e(hidden_note(hidden))}</p>' if hidden else "")
        + "</section>"
    )


def _reproduce(report: Mapping[str, Any]) -> str:
    """Right after the verdict: each run's command and the versions that matter, one short block per run (the
    full fingerprint is in the Runs section at the end)."""
    items = []
    for i, run in enumerate(report["runs"]):
        env, suite = run["environment"], run["suite"]
        info = ", ".join(f"{k} {v}" for k, v in run["backend"]["info"].items())
        versions = (
            f"qconform {suite['version']} ({str(suite['commit'])[:12]}); Python {env.get('python')}, NumPy "
            f"{env.get('numpy')}, torch {env.get('torch')}, CUDA {env.get('cuda')}, GPU {env.get('gpu') or 'none'}"
        )
        items.append(
            f"<li><b>Run {i}: {_e(run['column'])}</b>{' (' + _e(info) + ')' if info else ''}; {_e(versions)}"
            f"<pre>{_e(runnable(run, run['command']))}</pre></li>"
        )
    # open for one or two runs; a merged report of many keeps the matrix on the first screen (click to open)
    opened = " open" if len(items) <= 2 else ""
    return (
        f'<details id="reproduce"{opened}><summary><b>Environment and how to reproduce</b> ({len(items)} run(s); '
        f'full fingerprints under <a href="#runs">Runs</a>)</summary><ul>{"".join(items)}</ul></details>'
    )


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _bin_label(edges: Sequence[float], i: int) -> str:
    if i == 0:
        return "0"
    if i == len(edges):
        return ">1"
    exponent = int(math.log2(edges[i]))
    return "≤1" if exponent == 0 else "≤2" + str(exponent).translate(_SUPERSCRIPT)


def histogram_svg(counts: Sequence[int], edges: Sequence[float], title: str) -> str:
    """An inline SVG bar chart of ``counts`` per bin (bins as ``report.error_bin_edges``), log-scaled."""
    slot = 48
    width, height, left, bottom, top = max(slot * len(counts) + 60, 660), 196, 50, 46, 26
    plot_h = height - bottom - top
    peak = max(math.log10(c + 1) for c in counts) or 1.0
    bars = []
    for i, c in enumerate(counts):
        h = plot_h * math.log10(c + 1) / peak
        x = left + slot * i + 5
        fill = "#cf222e" if i == len(counts) - 1 else ("#1a7f37" if i == 0 else "#0969da")
        label = _bin_label(edges, i)
        bars.append(
            f'<rect x="{x}" y="{top + plot_h - h:.1f}" width="{slot - 10}" height="{h:.1f}" fill="{fill}">'
            f"<title>{_e(label)}: {c} elements</title></rect>"
            f'<text x="{x + slot // 2 - 5}" y="{top + plot_h - h - 3:.1f}" text-anchor="middle">{c if c else ""}</text>'
            f'<text x="{x + slot // 2 - 5}" y="{height - bottom + 16}" text-anchor="middle">{_e(label)}</text>'
        )
    axis = (
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 6}" y2="{top + plot_h}" stroke="#57606a"/>'
        f'<text x="{left}" y="{height - 8}">share of the tolerance used, |got − ref| / allowed '
        "(0: exact, &gt;1: outside); log-scaled heights</text>"
    )
    return (
        f'<svg class="hist" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">'
        f'<text x="{left}" y="16" font-weight="600">{_e(title)}</text>{"".join(bars)}{axis}</svg>'
    )


def _counterexample(result: Mapping[str, Any], col_label: str, col: int, run: Mapping[str, Any]) -> str:
    parts = [
        f'<div class="cx cx-{_e(result["status"])}" id="{_anchor("row", col, result["id"])}">'
        f"<h4><code>{_e(result['id'])}</code> on {_e(col_label)}: {_e(_LABEL[result['status']])}</h4>"
        f'<pre class="msg">{_e(result["message"])}</pre>'
    ]
    ce = result["counterexample"]
    if ce:
        rows = "".join(
            f"<tr><td><code>{_e(t['name'])}</code></td><td>{_e(t['dtype'])}</td><td>{_e(t['shape'])}</td>"
            f'<td class="bits">{_e(" ".join(t["bits"]))}{" …" if t["truncated"] else ""}</td></tr>'
            for t in ce["inputs"]
        )
        parts.append(
            f"<p>Counterexample ({_e(ce['label'])}), input bit patterns:</p>"
            f"<table><tr><th>input</th><th>dtype</th><th>shape</th><th>bits (hex)</th></tr>{rows}</table>"
        )
        elements = "".join(
            f"<tr><td><code>{_e(m['output'])}{_e(e['index'])}</code></td>"
            f'<td class="bits">{_e(e["backend"])}</td><td>{_e(e["backend_value"])}</td>'
            f'<td class="bits">{_e(e["reference"])}</td><td>{_e(e["reference_value"])}</td></tr>'
            for m in ce["mismatches"]
            for e in m["elements"]
        )
        if elements:
            parts.append(
                "<table><tr><th>element</th><th>backend bits</th><th>backend value</th>"
                f"<th>reference bits</th><th>reference value</th></tr>{elements}</table>"
            )
    if result["replay"]:
        parts.append(f"<p>Replay:</p><pre>{_e(runnable(run, result['replay']))}</pre>")
    parts.append("</div>")
    return "".join(parts)


def _contract(report: Mapping[str, Any], spec: Mapping[str, Any] | None, contract: str, rows: list[Any]) -> str:
    cols = columns(report)
    labels = [c.label for c in cols]
    head = f'<section class="contract" id="{_anchor("contract", contract)}"><h3><code>{_e(contract)}</code></h3>' + (
        f'<p class="muted">spec <code>{_e(spec["path"])}</code> version {_e(spec["version"])}, '
        f"sha256 <code>{_e(spec['sha256'])}</code></p>"
        if spec
        else ""
    )
    table = []
    for _, _, cells in rows:
        for i, r in sorted(cells.items()):
            first = r["message"].splitlines()[0] if r["message"] else ""
            table.append(
                f'<tr><td class="variant"><code>{_e(row_params(r))}</code></td><td>{_e(labels[i])}</td>'
                f'<td class="s-{_e(r["status"])}">{_e(_LABEL[r["status"]])}</td><td>{r["cases"]}</td>'
                f'<td>{r["duration_s"]:.2f} s</td><td class="msg">{_e(first)}</td></tr>'
            )
    body = [
        head,
        "<table><tr><th>variant</th><th>implementation</th><th>status</th><th>cases run</th><th>time</th>"
        f"<th>message</th></tr>{''.join(table)}</table>",
    ]
    edges = report["error_bin_edges"]
    for i, col in enumerate(cols):
        totals: dict[str, list[int]] = {}
        for _, _, cells in rows:
            if i in cells:
                for output, counts in cells[i]["errors"].items():
                    totals[output] = [a + b for a, b in zip(totals.get(output, [0] * len(counts)), counts, strict=True)]
        for output, counts in totals.items():
            title = f"{contract} on {col.label}: errors of {output} ({sum(counts):,} elements)"
            body.append(f'<div class="plot">{histogram_svg(counts, edges, title)}</div>')
    for _, _, cells in rows:
        for i, r in sorted(cells.items()):
            if r["status"] in BAD_STATUSES:
                body.append(_counterexample(r, labels[i], i, report["runs"][r["run"]]))
    body.append("</section>")
    return "".join(body)


def _runs(report: Mapping[str, Any]) -> str:
    parts = ['<section id="runs"><h2>Runs, environments and how to reproduce them</h2><div class="runs">']
    for i, run in enumerate(report["runs"]):
        suite, backend = run["suite"], run["backend"]
        dirty = "" if suite["clean"] in (True, None) else " (uncommitted changes)"
        fields: list[tuple[str, Any]] = [
            ("backend", f"{backend['name']} on {backend['device']} ({backend['array_kind']})"),
            *((f"backend {k}", v) for k, v in backend["info"].items()),
            ("profile", run["profile"]),
            ("seed", run["seed"]),
            ("contracts", run["spec"] + (f" where {run['where']}" if run["where"] else "")),
            ("shard", f"{run['shard']['index']}/{run['shard']['count']}" if run["shard"] else "none"),
            ("started", run["created"]),
            ("duration", "interrupted" if run["duration_s"] is None else f"{run['duration_s']:.1f} s"),
            ("qconform", f"{suite['version']}, commit {suite['commit']}{dirty}"),
            *run["environment"].items(),
        ]
        rows = "".join(f"<dt>{_e(k)}</dt><dd>{_e('—' if v is None else v)}</dd>" for k, v in fields)
        command = runnable(run, run["command"])
        parts.append(
            f"<div><h3>Run {i}: {_e(run['column'])}</h3><p>Reproduce with:</p><pre>{_e(command)}</pre>"
            f'<dl class="env">{rows}</dl></div>'
        )
    parts.append("</div></section>")
    return "".join(parts)


def _specs(report: Mapping[str, Any]) -> str:
    rows = "".join(
        f"<tr><td><code>{_e(s['contract'])}</code></td><td>{_e(s['version'])}</td><td><code>{_e(s['path'])}</code>"
        f"</td><td>{len(s['rows'])}</td><td><code>{_e(s['sha256'])}</code></td></tr>"
        for s in report["specs"]
    )
    return (
        '<section id="specs"><h2>Specs</h2><table><tr><th>contract</th><th>version</th><th>file</th><th>rows</th>'
        f"<th>sha256</th></tr>{rows}</table></section>"
    )


def render_html(report: Mapping[str, Any], show_unimplemented: bool = False) -> str:
    """The whole page for ``report`` (a ``report.json`` mapping); rows no column implements are left out unless
    ``show_unimplemented`` (``report.shown_rows``)."""
    rows, hidden = shown_rows(report, show_unimplemented)
    specs = {s["contract"]: s for s in report["specs"]}
    contracts = list(dict.fromkeys(contract for contract, _, _ in rows))
    sections = "".join(_contract(report, specs.get(c), c, [row for row in rows if row[0] == c]) for c in contracts)
    title = f"qconform: {verdict_parts(report)[0][1]} ({summary_line(report)})"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        f"{_verdict(report)}"
        '<nav><a href="#reproduce">Reproduce</a><a href="#matrix">Matrix</a><a href="#contracts">Contracts</a>'
        '<a href="#runs">Runs</a><a href="#specs">Specs</a></nav>'
        f"{_reproduce(report)}{_matrix(report, rows, hidden)}"
        f'<section id="contracts"><h2>Contracts: cases, counterexamples, error distributions</h2>{sections}</section>'
        f"{_runs(report)}{_specs(report)}"
        "</body></html>\n"
    )
