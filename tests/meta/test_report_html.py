"""report.html, report.md and junit.xml of a merged run: matrix, counterexamples, error plots, environment."""

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema

from conformance.html_report import render_html

SCHEMA = json.loads((Path(__file__).parents[2] / "conformance" / "schemas" / "report.schema.json").read_text())


def _text(page: str) -> str:
    """The visible text of a page, tags dropped and entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_merged_report_matches_the_schema_and_counts_every_status(matrix_report):
    report = matrix_report["report"]
    jsonschema.validate(report, SCHEMA)
    assert report["verdict"] == "non-conformant"
    assert report["summary"]["crashed"] == 4  # glu.interleave (2 rows) crashed, glu.deinterleave (2 rows) hung
    assert report["summary"]["fail"] == 2  # -0 flushed in both cast.fp8 rows
    labels = [run["column"] for run in report["runs"]]
    assert labels == ["subset (cpu)", "crashes (cpu)", "hangs (cpu)", "ulp-off (cpu)", "flushes (cpu)"]
    crashed = {r["id"]: r["message"] for r in report["results"] if r["status"] == "crashed"}
    assert any("exit code 139" in m for m in crashed.values()) and any("timeout" in m for m in crashed.values())
    # each crash cost one row: the process restarted and the other contract's rows still passed
    by_column = {(report["runs"][r["run"]]["column"], r["id"]): r["status"] for r in report["results"]}
    assert by_column[("crashes (cpu)", "glu.deinterleave")] == "pass"
    assert by_column[("hangs (cpu)", "glu.interleave")] == "pass"


def test_html_opens_with_the_verdict_and_the_matrix_and_is_self_contained(matrix_report):
    page = (matrix_report["dir"] / "report.html").read_text()
    assert page.index('id="verdict"') < page.index('id="matrix"') < page.index('id="contracts"')
    text = _text(page)
    assert "Verdict: non-conformant" in " ".join(text.split())
    for status in ("pass", "FAIL", "CRASHED"):
        assert f">{status}</a>" in page, status
    # every n/i row here is one no column implements: hidden, unless asked for
    assert ">n/i</a>" not in page and "rows that no backend implements are hidden" in page
    assert ">n/i</a>" in render_html(matrix_report["report"], show_unimplemented=True)
    matrix = page[page.index('id="matrix"') : page.index('id="contracts"')]
    for label in ("subset (cpu)", "crashes (cpu)", "hangs (cpu)", "ulp-off (cpu)", "flushes (cpu)"):
        assert f"<th>{label}</th>" in matrix
    assert "format=float8_e4m3fn, overflow=saturate, rounding=rne" in matrix
    # no network, no external assets, no script
    for forbidden in ("<script", "<link", "src=", "@import", "url(", 'href="http', "href='http"):
        assert forbidden not in page, forbidden


def test_html_shows_counterexample_bits_error_plot_environment_and_command(matrix_report):
    report, page = matrix_report["report"], (matrix_report["dir"] / "report.html").read_text()
    failing = next(r for r in report["results"] if r["status"] == "fail")
    assert "0x80000000" in failing["counterexample"]["inputs"][0]["bits"]
    (cx,) = [block for block in page.split('<div class="cx ')[1:] if f"<code>{failing['id']}</code>" in block]
    cx = cx[: cx.index("</div>")]
    assert re.search(r'<td class="cell s-fail" title="[^"]*"><a href="#([^"]+)">', page).group(1) in cx
    assert "0x80000000" in cx and "0x00" in cx and "0x80" in cx and "qconform replay --backend" in cx
    # the contract with a tolerance gets an inline SVG histogram of the share of the tolerance used
    mm = page[page.index('id="contract-int4.tinygemm_mm"') :]
    mm = mm[: mm.index("</section>")]
    assert "<svg" in mm and "errors of out" in mm
    ulp_rows = [r for r in report["results"] if r["contract"] == "int4.tinygemm_mm" and r["kind"] == "conformance"]
    assert ulp_rows and all(len(r["errors"]["out"]) == len(report["error_bin_edges"]) + 1 for r in ulp_rows)
    inexact = sum(sum(r["errors"]["out"][1:-1]) for r in ulp_rows)
    outside = sum(r["errors"]["out"][-1] for r in ulp_rows)
    assert inexact > 0 and outside == 0  # one bfloat16 ulp off: within the tolerance, never exact
    glu = page.index('id="contract-glu.interleave"')
    assert "<svg" not in page[glu : page.index("</section>", glu)]
    # each run's environment fingerprint and the command that reproduces it, seed included
    runs = page[page.index('id="runs"') :]
    for run in report["runs"]:
        assert html.escape(run["command"]) in runs
        assert "--profile smoke" in run["command"] and run["seed"] == 0
    assert "<dt>numpy</dt>" in runs and "<dt>seed</dt>" in runs and "<dt>torch</dt>" in runs


def test_markdown_and_junit_have_a_column_per_backend(matrix_report):
    md = (matrix_report["dir"] / "report.md").read_text()
    assert "**Verdict: non-conformant**" in md
    assert "| contract | parameters | `subset (cpu)` | `crashes (cpu)` | `hangs (cpu)` |" in md
    assert "**CRASHED** (1)" in md and "## Counterexamples" in md
    suites = ET.parse(matrix_report["dir"] / "junit.xml").getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == [
        f"qconform.{n}" for n in ("subset", "crashes", "hangs", "ulp-off", "flushes")
    ]
    crashes = next(s for s in suites if s.get("name") == "qconform.crashes")
    assert crashes.get("errors") == "2" and crashes.get("failures") == "0"


def test_run_prints_the_verdict_and_each_failure(matrix_report):
    assert matrix_report["out"].startswith("non-conformant: ")
    assert "CRASHED glu.interleave on crashes (cpu): backend crash" in matrix_report["out"]
