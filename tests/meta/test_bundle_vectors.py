"""Submission bundles (``qconform bundle`` / ``verify``); golden vectors (``qconform vectors export`` / ``check``)."""

import json
import zipfile

import numpy as np
import pytest


@pytest.fixture(scope="module")
def flushed_report(tmp_path_factory, run_report, cli):
    """Two runs of one backend merged: decode.fp8 conforms, every cast.fp8 row fails (code 0x80 flushed to 0)."""
    root = tmp_path_factory.mktemp("flushed")
    for spec, code in (("decode.fp8", 0), ("cast.fp8", 1)):
        outcome = run_report("negative_zero_flushed", root / spec, "--spec", spec, "--isolation", "none")
        assert outcome.code == code, outcome.err
    inputs = [root / spec / "report.json" for spec in ("decode.fp8", "cast.fp8")]
    merged = cli("report", "merge", *inputs, "--report", root / "m")
    assert merged.code == 1, merged.err
    return root / "m"


def _claims(path, text):
    path.write_text(text)
    return path


def test_bundle_of_claims_that_hold_verifies(flushed_report, cli, tmp_path):
    claims = _claims(
        tmp_path / "claims.yaml",
        """
backend: flushes
statement: flushes 1.0 decodes FP8 as the OFP8 spec says
claims:
  - contract: decode.fp8
  - contract: cast.fp8
deviations:
  - contract: cast.fp8
    where: "overflow in ['saturate', 'nonsaturating']"
    reason: our cast writes code 0x80 as 0x00
    link: https://example.com/erratum-1
""",
    )
    bundle = tmp_path / "submission.zip"
    made = cli("bundle", "--report", flushed_report, "--claims", claims, "-o", bundle)
    assert made.code == 0, made.out + made.err
    assert "consistent" in made.out and bundle.exists()
    with zipfile.ZipFile(bundle) as z:
        assert sorted(z.namelist()) == ["claims.yaml", "manifest.json", "report.html", "report.json"]
        manifest = json.loads(z.read("manifest.json"))
    assert manifest["backend"] == "flushes (cpu)" and manifest["runs"][0]["seed"] == 0
    assert set(manifest["specs"]) == {"cast.fp8", "decode.fp8"}
    verified = cli("verify", bundle)
    assert verified.code == 0 and "consistent" in verified.out, verified.out


def test_bundle_refuses_claims_the_report_does_not_support(flushed_report, cli, tmp_path):
    claims = _claims(tmp_path / "claims.yaml", "claims:\n  - contract: cast.fp8\n  - contract: glu.interleave\n")
    bundle = tmp_path / "submission.zip"
    made = cli("bundle", "--report", flushed_report, "--claims", claims, "-o", bundle)
    assert made.code == 1 and not bundle.exists()
    assert "claimed row cast.fp8[format=float8_e4m3fn,overflow=saturate,rounding=rne]: fail" in made.out
    assert "claimed row glu.interleave[,invalid-input] was not run for flushes (cpu)" in made.out
    stale = _claims(
        tmp_path / "stale.yaml",
        """
claims: [{contract: decode.fp8}]
deviations: [{contract: decode.fp8, reason: none really}]
""",
    )
    made = cli("bundle", "--report", flushed_report, "--claims", stale, "-o", bundle)
    assert made.code == 1 and "that passed" in made.out and not bundle.exists()
    malformed = _claims(tmp_path / "bad.yaml", "claims: [{contract: decode.fp8, when: always}]\n")
    made = cli("bundle", "--report", flushed_report, "--claims", malformed, "-o", bundle)
    assert made.code == 2 and "bad.yaml" in made.err and not bundle.exists()


def test_verify_finds_a_bundle_changed_after_bundling(flushed_report, cli, tmp_path):
    claims = _claims(tmp_path / "claims.yaml", "claims: [{contract: decode.fp8}]\n")
    bundle = tmp_path / "submission.zip"
    assert cli("bundle", "--report", flushed_report, "--claims", claims, "-o", bundle).code == 0
    with zipfile.ZipFile(bundle) as z:
        members = {n: z.read(n) for n in z.namelist()}
    report = json.loads(members["report.json"])
    for r in report["results"]:
        r["status"] = "pass"
    members["report.json"] = json.dumps(report).encode()
    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(tampered, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    outcome = cli("verify", tampered)
    assert outcome.code == 1 and "report.json: its sha256 is not the manifest's" in outcome.out
    assert cli("verify", tmp_path / "nothing.zip").code == 2


def test_exported_vectors_replay_green_and_catch_a_bug(cli, test_backends, tmp_path):
    vectors = tmp_path / "vectors"
    exported = cli("vectors", "export", "--spec", "*.fp8", "--profile", "smoke", "--quiet", vectors)
    assert exported.code == 0, exported.err
    index = json.loads((vectors / "index.json").read_text())
    assert index["format"] == "qconform-vectors" and index["byte_order"] == "little"
    case = next(c for c in index["cases"] if c["contract"] == "cast.fp8")
    x = case["inputs"][0]
    raw = (vectors / x["file"]).read_bytes()
    assert len(raw) == int(np.prod(x["shape"])) * index["dtypes"][x["dtype"]]["bytes"]
    assert case["outputs"][0]["compare"]["kind"] == "bitwise"
    check = ["vectors", "check", vectors, "--isolation", "none", "--backend"]
    green = cli(*check, f"{test_backends}:reference_subset")
    assert green.code == 0 and green.out.startswith("green: "), green.out + green.err
    buggy = cli(*check, f"{test_backends}:negative_zero_flushed")
    assert buggy.code == 1 and "not green" in buggy.out
    assert "fail cast.fp8/" in buggy.out and "0x80" in buggy.out
    again = cli("vectors", "export", "--spec", "decode.fp8", vectors)
    assert again.code == 2 and "not empty" in again.err
    (vectors / x["file"]).write_bytes(raw[:-1])
    broken = cli(*check, f"{test_backends}:reference_subset")
    assert broken.code == 2 and x["file"] in broken.err
