"""The engine's format traits (``conformance/formats.py``) and the oracle's (``reference/formats.py``) agree.

Both read ``specs/formats.json`` and derive independently (the engine vectorised over all codes, the
oracle code by code); every derived quantity the engine uses must match bit for bit.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import conformance.formats as engine
import reference.formats as oracle

NAMES = list(oracle.FORMATS)
TABLED = [n for n in NAMES if oracle.FORMATS[n].bits <= 16]


def test_both_read_the_same_formats_in_the_same_order() -> None:
    declared = [e["name"] for e in json.loads(engine.formats_path().read_text())["formats"]]
    assert list(engine.FORMATS) == NAMES == declared


@pytest.mark.parametrize("name", NAMES)
def test_fields_and_limits_agree(name: str) -> None:
    e, o = engine.FORMATS[name], oracle.FORMATS[name]
    fields = ("name", "exponent_bits", "mantissa_bits", "bias", "nan", "signed", "has_subnormals", "bits")
    assert [getattr(e, f) for f in fields] == [getattr(o, f) for f in fields]
    for limit in ("max_finite", "min_normal", "min_subnormal"):
        assert np.float64(getattr(e, limit)).view(np.uint64) == np.float64(getattr(o, limit)).view(np.uint64), limit


@pytest.mark.parametrize("name", TABLED)
def test_every_code_decodes_to_the_same_bits(name: str) -> None:
    e, o = engine.FORMATS[name], oracle.FORMATS[name]
    np.testing.assert_array_equal(e.decode_table.view(np.uint64), o.decode_table.view(np.uint64))
    codes = np.arange(1 << o.bits)
    np.testing.assert_array_equal(e.is_nan(codes), o.is_nan(codes))
    np.testing.assert_array_equal(e.finite_magnitudes.view(np.uint64), o.finite_magnitudes.view(np.uint64))


def test_a_malformed_entry_is_named(tmp_path) -> None:
    bad = {"formats": [{"name": "x", "exponent_bits": 4, "mantissa_bits": 3, "bias": 7, "nan": "fn", "signed": 1}]}
    path = tmp_path / "formats.json"
    path.write_text(json.dumps(bad))
    for module in (engine, oracle):
        with pytest.raises(ValueError, match=r"formats\[0\] without \['has_subnormals'\]"):
            module.load_formats(path)
    bad["formats"][0]["has_subnormals"] = True
    path.write_text(json.dumps(bad))
    for module in (engine, oracle):
        with pytest.raises(ValueError, match=r"formats\[0\]\.signed=1, but signed must be a bool"):
            module.load_formats(path)
