"""The torchao adapter: the variant each torchao version claims, and (where torchao is importable) a
smoke run of its quantizers on the CPU: conformant where the spec models the installed version."""

import importlib.util
from importlib.metadata import version

import pytest

from conformance.plugins.torchao_ops import mx_edges_variant
from conformance.registry import load_specs
from conformance.runner import Runner
from conformance.worker import InProcessBackend

TORCHAO = "conformance.plugins.torchao_ops:backend"


def test_each_torchao_version_claims_its_mx_edge_variant():
    assert mx_edges_variant("0.18.0") == "torchao_018"
    assert mx_edges_variant("0.18.1+cu130") == "torchao_018"
    assert mx_edges_variant("0.19.0.dev20260501") == "torchao"
    assert mx_edges_variant("0.17.0") is None


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is optional and not installed")
def test_torchao_quantizers_conform_where_claimed():
    runner = Runner(InProcessBackend(TORCHAO), profile="smoke")
    where = "format in ['float8_e4m3fn', 'float4_e2m1fn'] and scale_rule in ['floor', 'rceil']"
    results = runner.run(load_specs("quant.mx"), where) + runner.run(load_specs("quant.nvfp4"))
    by_status = {r.id: r.status for r in results}
    mx = [r for r in results if r.contract == "quant.mx" and r.status != "not-implemented"]
    nvfp4 = [r for r in results if r.contract == "quant.nvfp4" and r.status != "not-implemented"]
    assert len(mx) == 4 and len(nvfp4) == 2, by_status  # nvfp4: the computed and the given amax
    assert all(r.status == "pass" for r in [*mx, *nvfp4]), {r.id: r.message for r in [*mx, *nvfp4]}
    assert all(r.params["edges"] == mx_edges_variant(version("torchao")) for r in mx)
