"""``fast/``'s copies of the contract vocabulary, held against the specs and the format definitions.

``fast/`` checks its own arguments (it never reads the specs), so each domain tuple it checks against is a copy of a
spec's ``values:``; the kernels' id tables are keyed by those values; ``fast/formats.py`` types in only bit fields.
These tests make the copies unable to drift: every tuple equals its spec values (same order), every id table covers
its domain exactly, and every limit of the formats table equals the value computed here from the format's exponent
and mantissa widths (and ml_dtypes' ``finfo``, the second oracle).
"""

from __future__ import annotations

import importlib
import math
import re
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SPECS = {
    spec["contract"]: spec
    for spec in (yaml.safe_load(path.read_text()) for path in sorted((ROOT / "specs").rglob("*.yaml")))
    if isinstance(spec, dict) and "contract" in spec
}

DOMAINS: list[tuple[str, str, str]] = [
    # (contract, parameter, "fast module:attribute")
    ("cast.fp8", "format", "fast.cast:FP8_FORMATS"),
    ("cast.fp8", "overflow", "fast.cast:OVERFLOW_POLICIES"),
    ("cast.fp8", "rounding", "fast.cast:ROUNDINGS"),
    ("cast.fp6", "format", "fast.cast:FP6_FORMATS"),
    ("cast.fp6", "rounding", "fast.cast:ROUNDINGS"),
    ("cast.fp6", "nan", "fast.cast:NAN_POLICIES"),
    ("cast.fp4", "format", "fast.cast:FP4_FORMATS"),
    ("cast.fp4", "rounding", "fast.cast:ROUNDINGS"),
    ("cast.fp4", "nan", "fast.cast:NAN_POLICIES"),
    ("cast.e8m0", "rounding", "fast.cast:E8M0_ROUNDINGS"),
    ("cast.e8m0", "zero", "fast.cast:E8M0_ZERO_POLICIES"),
    ("cast.e8m0", "overflow", "fast.cast:OVERFLOW_POLICIES"),
    ("cast.int", "dtype", "fast.cast:INT_DTYPES"),
    ("cast.int", "mode", "fast.cast:INT_MODES"),
    ("decode.fp8", "format", "fast.decode:FP8_FORMATS"),
    ("decode.fp6", "format", "fast.decode:FP6_FORMATS"),
    ("decode.fp4", "format", "fast.decode:FP4_FORMATS"),
    ("quant.mx", "format", "fast.quant.mx:MX_FORMATS"),
    ("quant.mx", "scale_rule", "fast.quant.mx:SCALE_RULES"),
    ("quant.mx", "usage", "fast.quant.mx:USAGES"),
    ("quant.mx", "blocks", "fast.quant.mx:BLOCKS"),
    ("quant.mx", "scale_layout", "fast.quant.mx:SCALE_LAYOUTS"),
    ("quant.mx", "edges", "fast.quant.mx:EDGES"),
    ("quant.nvfp4", "usage", "fast.quant.nvfp4:USAGES"),
    ("quant.nvfp4", "block", "fast.quant.nvfp4:BLOCKS"),
    ("quant.nvfp4", "amax_scope", "fast.quant.nvfp4:AMAX_SCOPES"),
    ("quant.nvfp4", "rounding", "fast.quant.nvfp4:ROUNDINGS"),
    ("quant.nvfp4", "scale_rule", "fast.quant.nvfp4:SCALE_RULES"),
    ("quant.nvfp4", "zero_scale", "fast.quant.nvfp4:ZERO_SCALES"),
    ("quant.nvfp4", "amax_source", "fast.quant.nvfp4:AMAX_SOURCES"),
    ("quant.fp8_block", "block", "fast.quant.fp8_block:BLOCKS"),
    ("quant.fp8_block", "format", "fast.quant.fp8:FP8_FORMATS"),
    ("quant.fp8_block", "usage", "fast.quant.fp8:USAGES"),
    ("quant.fp8_block", "x_dtype", "fast.quant.fp8:X_DTYPES"),
    ("quant.fp8_tensor", "format", "fast.quant.fp8:FP8_FORMATS"),
    ("quant.fp8_tensor", "inf_scale", "fast.quant.fp8:INF_SCALES"),
    ("quant.fp8_tensor", "usage", "fast.quant.fp8:USAGES"),
    ("quant.fp8_tensor", "x_dtype", "fast.quant.fp8:X_DTYPES"),
    ("quant.fp8_delayed", "format", "fast.quant.fp8:FP8_FORMATS"),
    ("quant.fp8_delayed", "amax_compute_algo", "fast.quant.fp8:AMAX_COMPUTE_ALGOS"),
    ("quant.fp8_delayed", "update", "fast.quant.fp8:DELAYED_UPDATES"),
    ("quant.fp8_delayed", "usage", "fast.quant.fp8:USAGES"),
    ("dequant.mx", "format", "fast.dequant.mx:MX_FORMATS"),
    ("dequant.mx", "usage", "fast.dequant.mx:DEQUANT_USAGES"),
    ("dequant.mx", "scale_layout", "fast.dequant.mx:SCALE_LAYOUTS"),
    ("dequant.nvfp4", "scale_rule", "fast.dequant.nvfp4:SCALE_RULES"),
    ("dequant.nvfp4", "amax_scope", "fast.dequant.nvfp4:AMAX_SCOPES"),
    ("dequant.nvfp4", "out_dtype", "fast.dequant.nvfp4:OUT_DTYPES"),
    ("dequant.fp8_block", "block", "fast.quant.fp8_block:BLOCKS"),
    ("dequant.fp8_block", "format", "fast.quant.fp8:FP8_FORMATS"),
    ("group.layout", "recipe", "fast.group:RECIPES"),
    ("group.layout", "block", "fast.group.members:BLOCKS"),
    ("group.quantize", "block", "fast.group.members:BLOCKS"),
    ("group.quantize", "scale_layout", "fast.group.members:SCALE_LAYOUTS"),
    ("group.quantize", "usage", "fast.group.members:USAGES"),
    ("group.tp_partition", "parallel", "fast.group.members:PARALLEL_MODES"),
    ("buffers.describe", "recipe", "fast.buffers:RECIPES"),
    ("buffers.describe", "block", "fast.buffers:BLOCKS"),
    ("buffers.describe", "usage", "fast.buffers:USAGES"),
]
"""Every domain tuple of ``fast/``'s quantizers, casts and grouped tensors with the spec parameter it copies."""

ID_TABLES: list[tuple[str, str]] = [
    # ("fast module:id table", "fast module:domain it is keyed by")
    ("fast.cast:_ROUNDING_IDS", "fast.cast:ROUNDINGS"),
    ("fast.quant.mx.plan:RULE_IDS", "fast.quant.mx:SCALE_RULES"),
    ("fast.quant.mx.plan:EDGE_IDS", "fast.quant.mx:EDGES"),
    ("fast.quant.nvfp4.settings:RULE_IDS", "fast.quant.nvfp4:SCALE_RULES"),
    ("fast.quant.mx.plan:FORMATS", "fast.quant.mx:MX_FORMATS"),
]
"""The kernels' integer ids (and tables) by domain value: each must cover its domain (mx's formats: at least)."""


def attribute(path: str) -> Any:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize(("contract", "param", "path"), DOMAINS, ids=[f"{c}.{p}" for c, p, _ in DOMAINS])
def test_domain_tuple_equals_the_spec_values(contract: str, param: str, path: str) -> None:
    spec_values = SPECS[contract]["params"][param]["values"]
    assert tuple(attribute(path)) == tuple(spec_values), f"{path} != {contract} params.{param}.values"


@pytest.mark.parametrize(("table", "domain"), ID_TABLES, ids=[t for t, _ in ID_TABLES])
def test_id_table_covers_its_domain(table: str, domain: str) -> None:
    keys, values = set(attribute(table)), set(attribute(domain))
    assert values <= keys and (table.endswith(":FORMATS") or keys == values), (table, sorted(keys ^ values))


def test_every_spec_format_is_in_the_formats_table() -> None:
    from fast.formats import FORMATS

    names = {
        value
        for spec in SPECS.values()
        for param in (spec.get("params") or {}).values()
        if isinstance(param, dict)
        for value in param.get("values", [])
        if isinstance(value, str) and re.fullmatch(r"float\d+_e\d+m\d+\w*", value)
    }
    assert names and names <= set(FORMATS), sorted(names - set(FORMATS))


def expected_max(exponent_bits: int, mantissa_bits: int, bias: int, specials: str) -> float:
    """Largest finite value from the definitions: the top exponent field is Inf/NaN in IEEE formats; in ``fn`` formats
    only the all-ones code is NaN (the largest mantissa below it); ``fnuz`` and all-finite formats use every code."""
    top = (1 << exponent_bits) - 1 - (specials == "ieee")
    mantissa = (1 << mantissa_bits) - 1 - (specials == "fn")
    return math.ldexp(1 + mantissa / (1 << mantissa_bits), top - bias)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                  "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"])  # fmt: skip
def test_formats_table_limits_follow_from_the_bit_fields(name: str) -> None:
    from fast.formats import FORMATS

    fmt = FORMATS[name]
    bits, exponent_bits, mantissa_bits = (int(n) for n in re.fullmatch(r"float(\d+)_e(\d+)m(\d+)\w*", name).groups())
    assert (fmt.bits, fmt.exponent_bits, fmt.mantissa_bits) == (bits, exponent_bits, mantissa_bits)
    finfo = ml_dtypes.finfo(getattr(ml_dtypes, name))
    assert fmt.bias == 1 - int(finfo.minexp)  # the smallest normal is 2**(1 - bias)
    largest = expected_max(exponent_bits, mantissa_bits, fmt.bias, fmt.specials)
    assert fmt.max_value == largest == float(finfo.max), name
    assert fmt.emax == math.floor(math.log2(largest)) == int(finfo.maxexp) - 1
    assert fmt.reciprocal_of_max == float(np.float32(1) / np.float32(largest))
    # the codes decode (ml_dtypes) to the values they stand for
    codes = np.array([fmt.max_code, fmt.max_code | fmt.sign_mask, *fmt.nan_codes, fmt.nonsaturating_code], np.uint8)
    decoded = codes.view(getattr(ml_dtypes, name)).astype(np.float64)  # narrow types: one code per byte, low bits
    assert decoded[0] == largest and decoded[1] == -largest
    if fmt.specials == "finite":
        assert fmt.nan_codes == (fmt.max_code, fmt.max_code) and fmt.nonsaturating_code == fmt.max_code
    else:
        assert np.isnan(decoded[2]) and np.isnan(decoded[3])
        assert np.isinf(decoded[4]) if fmt.specials == "ieee" else np.isnan(decoded[4])
    assert fmt.signed_zero == (fmt.specials != "fnuz")


def test_nvfp4_takes_the_e4m3_limit_from_the_formats_table() -> None:
    from fast.formats import FORMATS
    from fast.quant.nvfp4 import settings

    assert settings.E4M3_MAX == FORMATS["float8_e4m3fn"].max_value == 448.0
    text = "".join(path.read_text() for path in (ROOT / "fast" / "quant" / "nvfp4").glob("*.py"))
    assert not re.search(r"(?<![\w.])448\.0\b", text), "a typed-in 448.0 in fast/quant/nvfp4 (use fast.formats)"
