"""Sharding and ``qconform report merge``: shards merge to the report of one run; inconsistent inputs are refused."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.registry import load_specs
from conformance.runner import row_id, select_rows
from conformance.shard import Shard, parse_shard

SPEC = "decode.*"  # decode.fp8 implemented (5 rows), decode.e8m0/fp4/fp6 not (7 rows): 12 rows


def _comparable(report: dict) -> dict:
    """A report without what differs between equal runs: timings, timestamps, commands, shards, run indices."""
    volatile = {"duration_s", "run"}
    return {
        "verdict": report["verdict"],
        "summary": report["summary"],
        "incomplete": report["incomplete"],
        "specs": report["specs"],
        "columns": sorted({run["column"] for run in report["runs"]}),
        "results": [{k: v for k, v in r.items() if k not in volatile} for r in report["results"]],
    }


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8])
def test_the_shards_of_a_run_hold_each_row_exactly_once(count):
    specs = load_specs()
    everything = [row_id(s, c) for s, c in select_rows(specs)]
    shards = [[row_id(s, c) for s, c in select_rows(specs, shard=Shard(i, count))] for i in range(1, count + 1)]
    assert sorted(r for shard in shards for r in shard) == sorted(everything)
    assert len(everything) == len(set(everything))
    if count > 1:  # the hash spreads the rows: no shard holds more than twice its share
        assert max(map(len, shards)) < 2 * len(everything) / count


def test_bad_shards_are_refused(cli):
    assert parse_shard(" 2 / 3 ") == Shard(2, 3)
    for bad in ("0/3", "4/3", "1/0", "x", "1-3"):
        outcome = cli("run", "--backend", "reference", "--spec", "glu.*", "--shard", bad)
        assert outcome.code == 2 and "shard" in outcome.err, bad


def test_merged_shards_give_the_report_of_one_run(run_report, cli, tmp_path):
    whole = run_report("reference_subset", tmp_path / "whole", "--spec", SPEC, "--isolation", "none")
    assert whole.code == 0, whole.err
    parts = []
    for i in (1, 2, 3):
        shard = run_report("reference_subset", tmp_path / f"shard{i}", "--spec", SPEC, "--isolation", "none",
                           "--shard", f"{i}/3")  # fmt: skip
        assert shard.code == 0, shard.err
        parts.append(tmp_path / f"shard{i}" / "report.json")
    sizes = [len(json.loads(p.read_text())["results"]) for p in parts]
    assert sum(sizes) == 12 and all(sizes)
    merged = cli("report", "merge", *parts, "--report", tmp_path / "merged")
    assert merged.code == 0, merged.err
    one = json.loads((tmp_path / "whole" / "report.json").read_text())
    many = json.loads((tmp_path / "merged" / "report.json").read_text())
    assert len(many["runs"]) == 3 and [r["shard"]["index"] for r in many["runs"]] == [1, 2, 3]
    assert _comparable(many) == _comparable(one)
    pages = [(tmp_path / d / "report.html").read_text() for d in ("whole", "merged")]
    matrices = [page[page.index('id="matrix"') : page.index('id="contracts"')] for page in pages]
    assert matrices[0] == matrices[1] and matrices[0].count('class="cell s-pass"') == 6  # 5 rows and decode.fp8


def test_a_missing_shard_leaves_the_report_incomplete(run_report, cli, tmp_path):
    for i in (1, 3):
        run_report("reference_subset", tmp_path / f"s{i}", "--spec", SPEC, "--isolation", "none", "--shard", f"{i}/3")
    merged = cli(
        "report", "merge", tmp_path / "s1/report.json", tmp_path / "s3/report.json", "--report", tmp_path / "m"
    )
    assert merged.code == 1
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert report["verdict"] == "incomplete"
    assert report["incomplete"] == ["subset (cpu), --spec 'decode.*': shards 2/3 are missing"]
    assert "incomplete: subset (cpu), --spec 'decode.*': shards 2/3 are missing" in merged.out


def test_a_missing_shard_run_again_in_pieces_completes_the_report(run_report, cli, tmp_path):
    """Shard 2/3 of ``decode.*`` lost (say to a time limit) and run again as ``decode.fp*`` and ``decode.e8m0`` with
    the same ``--shard``: every row is there, so the merge is complete; without one piece it is not."""
    for name, spec, shard in (("s1", SPEC, "1/3"), ("s3", SPEC, "3/3"), ("fp", "decode.fp*", "2/3"),
                              ("e8m0", "decode.e8m0", "2/3")):  # fmt: skip
        run_report("reference_subset", tmp_path / name, "--spec", spec, "--isolation", "none", "--shard", shard)
    pieces = [tmp_path / name / "report.json" for name in ("s1", "s3", "fp", "e8m0")]
    merged = cli("report", "merge", *pieces, "--report", tmp_path / "m")
    assert merged.code == 0, merged.out
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert report["incomplete"] == [] and len(report["results"]) == 12
    without = cli("report", "merge", *pieces[:3], "--report", tmp_path / "m2")
    assert without.code == 1
    report = json.loads((tmp_path / "m2" / "report.json").read_text())
    assert report["incomplete"] == ["subset (cpu), --spec 'decode.*': shards 2/3 are missing"]


def test_two_backends_merge_into_two_columns(run_report, cli, tmp_path):
    for backend in ("reference_subset", "other_subset"):
        run_report(backend, tmp_path / backend, "--spec", "decode.fp8", "--isolation", "none")
    inputs = [tmp_path / b / "report.json" for b in ("reference_subset", "other_subset")]
    merged = cli("report", "merge", *inputs, "--report", tmp_path / "m")
    assert merged.code == 0, merged.err
    report = json.loads((tmp_path / "m" / "report.json").read_text())
    assert [r["column"] for r in report["runs"]] == ["subset (cpu)", "other (cpu)"]
    assert report["summary"]["pass"] == 10
    assert "| `decode.fp8` | format=float8_e4m3fn | pass (" in (tmp_path / "m" / "report.md").read_text()


@pytest.fixture(scope="module")
def one_report(tmp_path_factory, test_backends):
    from conformance.cli import main

    root = tmp_path_factory.mktemp("one")
    args = ["run", "--backend", f"{test_backends}:reference_subset", "--spec", "decode.fp8", "--profile", "smoke"]
    assert main([*args, "--isolation", "none", "--quiet", "--report", str(root)]) == 0
    return root


def test_merge_refuses_a_spec_whose_hash_differs(one_report, copy_report, cli, tmp_path):
    report = json.loads((one_report / "report.json").read_text())
    specs = [dict(s, sha256="0" * 64) for s in report["specs"]]
    other = copy_report(one_report, tmp_path / "other.json", specs=specs)
    outcome = cli("report", "merge", one_report / "report.json", other, "--report", tmp_path / "m")
    assert outcome.code == 2
    assert "decode.fp8: spec sha256" in outcome.err and "different versions of the contract" in outcome.err
    assert not (tmp_path / "m").exists()  # nothing written, not even the directory


def test_merge_refuses_duplicate_row_ids(one_report, cli, tmp_path):
    outcome = cli("report", "merge", one_report / "report.json", one_report / "report.json", "--report", tmp_path / "m")
    assert outcome.code == 2
    assert "duplicate row id 'decode.fp8[format=float8_e4m3fn]' for backend 'subset'" in outcome.err


def test_merge_refuses_runs_of_one_backend_with_different_seeds(one_report, copy_report, cli, tmp_path):
    other = copy_report(one_report, tmp_path / "seed1.json", seed=1)
    outcome = cli("report", "merge", one_report / "report.json", other, "--report", tmp_path / "m")
    assert outcome.code == 2 and "seed 0 in" in outcome.err and "but 1 in" in outcome.err


def test_merge_refuses_unreadable_and_malformed_inputs(one_report, copy_report, cli, tmp_path):
    old = copy_report(one_report, tmp_path / "old.json", schema_version="1.0")
    outcome = cli("report", "merge", old, "--report", tmp_path / "m")
    assert outcome.code == 2 and "schema_version '1.0', but this qconform reads '2.0'" in outcome.err
    broken = copy_report(one_report, tmp_path / "broken.json", verdict="fine")
    outcome = cli("report", "merge", broken, "--report", tmp_path / "m")
    assert outcome.code == 2 and "not a valid report: at verdict" in outcome.err
    outcome = cli("report", "merge", tmp_path / "nothing.json", "--report", tmp_path / "m")
    assert outcome.code == 2 and "cannot read" in outcome.err
    assert not (tmp_path / "m").exists()


def test_a_killed_run_keeps_the_rows_it_finished(test_backends, cli, tmp_path):
    report_dir = tmp_path / "killed"
    command = [sys.executable, "-m", "conformance.cli", "run", "--backend", f"{test_backends}:kills_the_run",
               "--spec", "glu.*", "--profile", "smoke", "--quiet", "--report", str(report_dir)]  # fmt: skip
    process = subprocess.run(command, capture_output=True, text=True, timeout=120, env=os.environ)
    assert process.returncode == -signal.SIGKILL, process.stderr
    assert not (report_dir / "report.json").exists()
    lines = (report_dir / "results.jsonl").read_text().splitlines()
    finished = [json.loads(line)["result"]["id"] for line in lines[1:]]
    assert finished == ["glu.deinterleave", "glu.deinterleave[,invalid-input]"]  # then glu.interleave killed it
    outcome = cli("report", "merge", report_dir / "results.jsonl", "--report", tmp_path / "rebuilt")
    assert outcome.code == 1
    report = json.loads((tmp_path / "rebuilt" / "report.json").read_text())
    assert report["verdict"] == "incomplete" and "was interrupted" in report["incomplete"][0]
    assert [r["id"] for r in report["results"]] == finished and report["runs"][0]["complete"] is False


def test_journal_lines_cut_short_are_dropped(one_report, cli, tmp_path):
    report = json.loads((one_report / "report.json").read_text())
    run = {k: v for k, v in report["runs"][0].items() if k != "column"}
    lines = [json.dumps({"schema_version": "2.0", "run": run, "specs": report["specs"]})]
    lines += [json.dumps({"result": r}) for r in report["results"][:2]]
    journal = tmp_path / "results.jsonl"
    journal.write_text("\n".join(lines) + '\n{"result": {"run": 0, "id": "decode.f')
    outcome = cli("report", "merge", journal, "--report", tmp_path / "m")
    assert outcome.code == 1, outcome.err
    assert len(json.loads((tmp_path / "m" / "report.json").read_text())["results"]) == 2


def test_merge_into_the_directory_of_a_killed_run(one_report, cli, tmp_path):
    """The journal is read before the directory is cleared, and the new report replaces it."""
    report_dir = tmp_path / "d"
    report_dir.mkdir()
    report = json.loads((one_report / "report.json").read_text())
    run = {k: v for k, v in report["runs"][0].items() if k != "column"}
    head = json.dumps({"schema_version": "2.0", "run": run, "specs": report["specs"]})
    (report_dir / "results.jsonl").write_text(head + "\n" + json.dumps({"result": report["results"][0]}) + "\n")
    assert cli("report", "merge", report_dir / "results.jsonl", "--report", report_dir).code == 1
    assert sorted(p.name for p in report_dir.iterdir()) == ["junit.xml", "report.html", "report.json", "report.md"]
    assert Path(report_dir / "report.json").exists()
