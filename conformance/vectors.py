"""Golden vectors for people without Python: ``qconform vectors export`` and ``qconform vectors check``.

``export`` freezes the cases of a profile -- every row's regression examples and boundary cases,
then the profile's count of random cases drawn as ``qconform run`` draws them (same seeds) --
with the reference's outputs, into a directory a C or CUDA test can read::

    DIR/index.json                            what each file is (below)
    DIR/<contract>/<case>/in.<input>.bin      one raw file per input,
    DIR/<contract>/<case>/out.<output>.bin    per output the reference gives,
    DIR/<contract>/<case>/aux.<name>.bin      per extra reference array a comparison reads

Every ``.bin`` holds one array in C order, each element the little-endian bit pattern of its
dtype, as wide as the dtype (float32: 4 bytes, its IEEE bits; float16 and bfloat16: 2 bytes, bfloat16
being the upper half of a float32; FP8/FP6/FP4 and E8M0 codes: one byte each, low bits; bool: one
byte, 0 or 1).  ``index.json`` lists per case the contract, the complete params, and per input,
output and auxiliary array its name, dtype, shape and file, and per output its comparison rule with
every tolerance evaluated to a number (``docs/report-format.md`` describes each rule).  Invalid-input
rows are not exported: which error a C API raises is its own.

``check`` replays the cases against a backend and compares its outputs with the frozen ones under
the frozen rules; it needs neither the specs nor the reference, so vectors exported by one version
check an implementation the same way later.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, seed

from conformance.carriers import DTYPES, get_dtype
from conformance.case import Case, TensorBits
from conformance.compare import compare_outputs
from conformance.environment import git_commit, suite_version
from conformance.errors import QConformError
from conformance.expr import evaluate
from conformance.registry import Spec
from conformance.runner import (
    BackendHandle,
    Runner,
    cases_per_example,
    random_case_lists,
    random_settings,
    row_id,
    row_seed,
)
from conformance.worker import SupportsFailed

__all__ = ["INDEX", "VECTORS_FORMAT", "check_case", "check_vectors", "export_vectors", "load_index"]

INDEX = "index.json"
VECTORS_FORMAT = {"format": "qconform-vectors", "version": 1}
_AUXILIARY_KEYS = ("dont_care", "magnitude", "lower", "upper", "p_upper")
_TOLERANCE_KEYS = ("atol", "rtol", "mtol", "max_ulp", "z", "nan_any")


def _random_cases(spec: Spec, combo: Mapping[str, Any], count: int, seed_value: int) -> list[Case]:
    """The row's random cases, drawn with the seed ``qconform run`` uses for the row."""
    drawn: list[Case] = []
    if count == 0:
        return drawn

    @random_settings(-(-count // cases_per_example(count)))
    @given(random_case_lists(spec, combo, count))
    def collect(cases: list[Case]) -> None:
        drawn.extend(cases)

    seed(row_seed(seed_value, spec, combo))(collect)()
    return drawn


def _dtype_entry(name: str) -> dict[str, Any]:
    d = get_dtype(name)
    return {"kind": d.kind, "bytes": max(1, d.bits // 8), "storage": d.bit_dtype.name}


def _write(path: Path, array: np.ndarray) -> None:
    array = np.ascontiguousarray(array)
    path.write_bytes(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())


def _resolved_rule(rule: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """A comparison rule with each tolerance evaluated for ``params`` (a number, not an expression)."""
    return {
        k: (evaluate(v, params) if k in _TOLERANCE_KEYS and not isinstance(v, bool) else v) for k, v in rule.items()
    }


def _export_case(spec: Spec, row: str, case: Case, case_id: str, directory: Path, root: Path) -> dict[str, Any]:
    try:
        reference = Runner.reference_outputs(spec, case)
    except Exception as exc:
        raise QConformError(f"{case_id}: the reference failed on {case.describe()}: {exc}") from exc
    directory.mkdir(parents=True, exist_ok=True)

    def entry(prefix: str, name: str, dtype: str, array: np.ndarray) -> dict[str, Any]:
        path = directory / f"{prefix}.{name}.bin"
        _write(path, array)
        return {"name": name, "dtype": dtype, "shape": list(array.shape), "file": path.relative_to(root).as_posix()}

    inputs = [entry("in", name, t.dtype, t.bits) for name, t in case.inputs.items()]
    outputs: list[dict[str, Any]] = []
    auxiliary: list[dict[str, Any]] = []
    for name, decl in spec.active_outputs(case.params).items():
        out = entry("out", name, spec.output_dtype(name, case.dtypes()), reference[name])
        fmt = decl.get("format")
        out["format"] = case.params[fmt[1:]] if isinstance(fmt, str) and fmt.startswith("$") else fmt
        out["compare"] = _resolved_rule(decl["compare"], case.params)
        outputs.append(out)
        for key in _AUXILIARY_KEYS:
            aux = decl["compare"].get(key)
            if aux is not None and all(a["name"] != aux for a in auxiliary):
                array = np.asarray(reference[aux])
                auxiliary.append(entry("aux", aux, array.dtype.name, array))
    return {
        "id": case_id,
        "contract": spec.contract,
        "row": row,
        "label": case.label,
        "params": dict(case.params),
        "inputs": inputs,
        "outputs": outputs,
        "auxiliary": auxiliary,
    }


def export_vectors(
    specs: list[Spec], profile: str, seed_value: int, directory: Path, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Write every case of ``specs`` under ``profile`` and ``seed_value`` to ``directory``; returns the index.

    The directory is built beside its final place and renamed into it, so it is there whole or not at all.
    """
    if directory.exists() and any(directory.iterdir()):
        raise QConformError(f"{directory} exists and is not empty; vectors are exported into a new directory")
    staging = directory.with_name(directory.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir(parents=True)
    except OSError as exc:
        raise QConformError(f"cannot write vectors to {directory}: {exc.strerror or exc}") from None
    cases: list[dict[str, Any]] = []
    try:
        for spec in specs:
            number = 0
            for combo in spec.param_combinations():
                row_cases = [
                    *Runner.deterministic_cases(spec, combo),
                    *_random_cases(spec, combo, spec.examples_for(profile), seed_value),
                ]
                for case in row_cases:
                    case_id = f"{spec.contract}/{number:06d}"
                    where = staging / spec.contract / f"{number:06d}"
                    cases.append(_export_case(spec, row_id(spec, combo), case, case_id, where, staging))
                    number += 1
                progress(f"{row_id(spec, combo)}: {len(row_cases)} cases")
        used = sorted({t["dtype"] for c in cases for t in (*c["inputs"], *c["outputs"]) if t["dtype"] in DTYPES})
        index = {
            **VECTORS_FORMAT,
            "byte_order": "little",
            "suite": {"name": "qconform", "version": suite_version(), **git_commit()},
            "profile": profile,
            "seed": seed_value,
            "dtypes": {name: _dtype_entry(name) for name in used},
            "contracts": [{"contract": s.contract, "version": s.raw["version"], "sha256": s.sha256} for s in specs],
            "cases": cases,
        }
        (staging / INDEX).write_text(json.dumps(index, indent=1) + "\n")
        if directory.exists():
            directory.rmdir()
        staging.replace(directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return index


def _read(root: Path, entry: Mapping[str, Any], bit_dtype: np.dtype) -> np.ndarray:
    path = root / entry["file"]
    count = int(np.prod(entry["shape"], dtype=np.int64))
    try:
        data = np.fromfile(path, dtype=bit_dtype.newbyteorder("<"))
    except OSError as exc:
        raise QConformError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data.size != count:
        raise QConformError(f"{path}: holds {data.size} elements of {bit_dtype}, the index says {entry['shape']}")
    return data.astype(bit_dtype).reshape(entry["shape"])


def load_index(root: Path) -> dict[str, Any]:
    """``root/index.json``, checked to be a vectors index this qconform reads."""
    try:
        index = json.loads((root / INDEX).read_text())
    except OSError as exc:
        raise QConformError(f"cannot read {root / INDEX}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise QConformError(f"{root / INDEX}: not JSON ({exc})") from None
    if {k: index.get(k) for k in VECTORS_FORMAT} != VECTORS_FORMAT:
        raise QConformError(f"{root / INDEX}: not a qconform vectors index of version {VECTORS_FORMAT['version']}")
    return dict(index)


def check_case(entry: Mapping[str, Any], root: Path, handle: BackendHandle) -> tuple[str, str]:
    """Replay one exported case against ``handle`` (a worker backend): (status, message)."""
    inputs = {
        t["name"]: TensorBits(t["dtype"], _read(root, t, get_dtype(t["dtype"]).bit_dtype)) for t in entry["inputs"]
    }
    case = Case(entry["contract"], entry["params"], inputs, entry["label"])
    try:
        reason = handle.unsupported_reason(case.contract, case.params)
    except SupportsFailed as exc:  # the backend's supports() raised: this case is an error
        return exc.status, exc.message
    if reason is not None:
        return "not-implemented", reason
    reference = {o["name"]: _read(root, o, get_dtype(o["dtype"]).bit_dtype) for o in entry["outputs"]}
    reference.update({a["name"]: _read(root, a, np.dtype(a["dtype"])) for a in entry["auxiliary"]})
    outcome = handle.call(case.contract, case.carriers(), case.dtypes(), case.params)
    if outcome.kind == "raised":
        return "error", f"backend raised {outcome.exc_type}: {outcome.message}"
    if outcome.kind in ("crash", "timeout"):
        return "crashed", f"backend {outcome.kind}: {outcome.message}"
    outputs = {o["name"]: {"compare": o["compare"], "format": o["format"]} for o in entry["outputs"]}
    dtypes = {o["name"]: o["dtype"] for o in entry["outputs"]}
    mismatches = compare_outputs(outputs, dtypes, case.params, reference, outcome.outputs)
    return ("fail", mismatches[0].message) if mismatches else ("pass", "")


def check_vectors(root: Path, handle: BackendHandle, report: Callable[[str, str, str, str], None]) -> Counter[str]:
    """Replay every case of the vectors in ``root``; ``report(case id, label, status, message)`` sees each."""
    statuses: Counter[str] = Counter()
    for entry in load_index(root)["cases"]:
        status, message = check_case(entry, root, handle)
        statuses[status] += 1
        report(entry["id"], entry["label"], status, message)
    return statuses
