"""What a vendor reads first: rows no column implements hidden from report.md/html (kept in report.json, shown
with ``--show-unimplemented``), each run's reproduce command right after the verdict, an ERROR row's traceback
frames in report.md, and backends that do not promise argument errors by default."""

import json

from conformance.backends import Backend, Implementation
from conformance.report import hidden_note

GLU = "glu.*interleave"  # glu.deinterleave and glu.interleave: four rows


def _matrix(md: str) -> str:
    return md[md.index("## Conformance matrix") : md.index("## Specs")]


def test_rows_no_backend_implements_are_hidden_unless_asked_for(run_report, cli, tmp_path):
    # glu_only implements glu.interleave: both glu.deinterleave rows are n/i
    outcome = run_report("glu_only", tmp_path / "hidden", "--spec", GLU, "--isolation", "none")
    assert outcome.code == 0, outcome.err
    report = json.loads((tmp_path / "hidden" / "report.json").read_text())
    assert len(report["results"]) == 4  # report.json keeps every row
    md = (tmp_path / "hidden" / "report.md").read_text()
    page = (tmp_path / "hidden" / "report.html").read_text()
    assert "`glu.deinterleave`" not in _matrix(md) and "`glu.interleave`" in _matrix(md)
    assert hidden_note(2) in md and hidden_note(2) in page
    assert "contract-glu.deinterleave" not in page

    shown = run_report("glu_only", tmp_path / "shown", "--spec", GLU, "--isolation", "none", "--show-unimplemented")
    assert shown.code == 0, shown.err
    md = (tmp_path / "shown" / "report.md").read_text()
    assert "`glu.deinterleave`" in _matrix(md) and "are hidden" not in md

    # merge: a row that another column implements is shown; --show-unimplemented works the same
    run_report("reference_subset", tmp_path / "whole", "--spec", GLU, "--isolation", "none")
    inputs = [tmp_path / "hidden" / "report.json", tmp_path / "whole" / "report.json"]
    merged = cli("report", "merge", *inputs, "--report", tmp_path / "merged")
    assert merged.code == 0, merged.err
    md = (tmp_path / "merged" / "report.md").read_text()
    assert "`glu.deinterleave`" in _matrix(md) and "are hidden" not in md


def test_html_gives_the_reproduce_command_and_versions_right_after_the_verdict(run_report, tmp_path):
    run_report("reference_subset", tmp_path / "r", "--spec", GLU, "--isolation", "none")
    page = (tmp_path / "r" / "report.html").read_text()
    assert page.index('id="verdict"') < page.index('id="reproduce"') < page.index('id="matrix"')
    top = page[page.index('id="reproduce"') : page.index('id="matrix"')]
    assert ("qconform run --backend" in top and "--seed" not in top) or "qconform run" in top
    assert "NumPy" in top and "Python" in top


def test_an_error_row_keeps_the_tracebacks_last_frames_in_report_md(run_report, tmp_path):
    outcome = run_report("cuda_error", tmp_path / "e", "--spec", "glu.interleave", "--isolation", "none")
    assert outcome.code == 1, outcome.err
    md = (tmp_path / "e" / "report.md").read_text()
    section = md[md.index("## Counterexamples") :]
    assert "CUDA error: an illegal memory access" in section
    assert 'File "' in section and "in interleave" in section  # the frame that raised, as the worker sent it


def test_validates_inputs_is_off_unless_the_backend_or_the_implementation_says_so():
    def fn(**kwargs):
        return {}

    plugin = Backend(
        "p", "cpu", "numpy", {"a": fn, "b": Implementation(fn), "c": Implementation(fn, validates_inputs=True)}
    )
    assert [plugin.implementation(c).validates_inputs for c in "abc"] == [False, False, True]
    own = Backend(
        "o", "cpu", "numpy", {"a": fn, "b": Implementation(fn, validates_inputs=False)}, validates_inputs=True
    )
    assert [own.implementation(c).validates_inputs for c in "ab"] == [True, False]


def test_qconforms_own_backends_still_promise_argument_errors():
    from conformance.backends import reference_backend

    backend = reference_backend.backend()
    assert all(backend.implementation(c).validates_inputs for c in backend.contracts)


def test_integer_codes_are_shown_signed_where_their_format_is_signed():
    import numpy as np

    from conformance.compare import compare_outputs

    decl = {"y": {"dtype": "uint8", "format": "$output_dtype", "compare": {"kind": "bitwise"}}}
    ref = {"y": np.array([0x80, 0x08], dtype=np.uint8)}
    got = {"y": np.array([0x7F, 0x07], dtype=np.uint8)}
    (signed,) = compare_outputs(decl, {"y": "uint8"}, {"output_dtype": "int8"}, ref, got)
    assert signed.message.startswith("y[0]=0x7f (127), but reference gives 0x80 (-128)")
    (nibble,) = compare_outputs(
        decl, {"y": "uint8"}, {"output_dtype": "int4"}, {"y": ref["y"][1:]}, {"y": got["y"][1:]}
    )
    assert nibble.message.startswith("y[0]=0x7 (7), but reference gives 0x8 (-8)")
    (unsigned,) = compare_outputs(decl, {"y": "uint8"}, {"output_dtype": "uint8"}, ref, got)
    assert "0x80 (128)" in unsigned.message


PLUGIN = """
import numpy as np
import reference.decode
from conformance.backends import Backend, NotSupported

def decode(codes, *, format):
    if format == "float8_e5m2":
        raise NotSupported("no e5m2 path on this device")
    if codes.size > 8:
        raise NotSupported("at most 8 elements")
    return reference.decode.fp8(codes, format=format)

def backend():
    return Backend("picky", "cpu", "numpy", {"decode.fp8": decode})
"""


def test_not_supported_skips_a_case_and_a_row_of_only_skips_is_not_implemented(cli, tmp_path, monkeypatch):
    (tmp_path / "picky_plugin_34.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    outcome = cli("run", "--backend", "picky_plugin_34:backend", "--spec", "decode.fp8", "--isolation", "none",
                  "--quiet", "--profile", "smoke", "--report", tmp_path / "r")  # fmt: skip
    assert outcome.code == 0, outcome.out + outcome.err
    rows = {r["id"]: r for r in json.loads((tmp_path / "r" / "report.json").read_text())["results"]}
    e5m2 = rows["decode.fp8[format=float8_e5m2]"]
    assert e5m2["status"] == "not-implemented" and e5m2["cases"] == 0
    assert e5m2["message"].startswith("every case raised NotSupported (") and "no e5m2 path" in e5m2["message"]
    e4m3 = rows["decode.fp8[format=float8_e4m3fn]"]
    assert e4m3["status"] == "pass" and e4m3["cases"] > 0
    assert "case(s) raised NotSupported, not counted: at most 8 elements" in e4m3["message"]


def test_a_numpy_backend_may_return_ml_dtypes_arrays():
    import numpy as np
    import pytest

    ml_dtypes = pytest.importorskip("ml_dtypes")
    from conformance.backends import numpy_output

    x = np.array([-1.0, 0.5, -6.0], dtype=np.float32)
    assert numpy_output(x.astype(ml_dtypes.float8_e4m3fn)).tolist() == [0xB8, 0x30, 0xCC]
    assert numpy_output(x.astype(ml_dtypes.float8_e5m2)).dtype == np.uint8  # a NumPy float kind, not void
    assert numpy_output(x.astype(ml_dtypes.float4_e2m1fn)).tolist() == [0xA, 0x1, 0xF]  # low 4 bits
    assert numpy_output(x.astype(ml_dtypes.bfloat16)).tolist() == [0xBF80, 0x3F00, 0xC0C0]
    assert numpy_output(x).dtype == np.float32


WRONG = """
import numpy as np
from conformance.backends import Backend

def decode(codes, *, format):
    return {"values": np.zeros(codes.shape, dtype=np.float32)}

def backend():
    return Backend("wrong", "cpu", "numpy", {"decode.fp8": decode})
"""


def test_a_plugin_found_in_the_run_directory_gets_lines_that_run_from_anywhere(cli, tmp_path, monkeypatch):

    from conformance.report import validate_report

    (tmp_path / "wrong_plugin_34.py").write_text(WRONG)
    monkeypatch.chdir(tmp_path)
    outcome = cli("run", "--backend", "wrong_plugin_34:backend", "--spec", "decode.fp8", "--isolation", "none",
                  "--quiet", "--profile", "smoke", "--where", "format == 'float8_e5m2'", "--report", "r")  # fmt: skip
    assert outcome.code == 1, outcome.out + outcome.err
    assert f"replay: cd {tmp_path.resolve()} && qconform replay --backend wrong_plugin_34:backend " in outcome.out
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    validate_report(report, "report.json")  # cwd is an optional field of the schema
    assert report["runs"][0]["cwd"] == str(tmp_path.resolve())
    assert report["results"][0]["replay"].startswith("qconform replay")  # the field itself is unchanged
    md = (tmp_path / "r" / "report.md").read_text()
    assert f"reproduce with: `cd {tmp_path.resolve()} && qconform run --backend wrong_plugin_34:backend" in md
