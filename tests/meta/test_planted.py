"""The engine catches planted bugs, isolates crashes and hangs, and passes the reference."""

import pytest

from conformance.registry import load_specs
from conformance.runner import Runner
from conformance.worker import InProcessBackend, IsolatedBackend


def _run(backend: str, pattern: str, isolated: bool = False, timeout: float = 60.0):
    handle = IsolatedBackend(backend, timeout) if isolated else InProcessBackend(backend)
    try:
        return Runner(handle, profile="smoke", seed=0).run(load_specs(pattern))
    finally:
        handle.close()


@pytest.mark.parametrize("contract", [spec.contract for spec in load_specs("*")])
def test_reference_conforms_to_itself(contract):
    """Every row of every contract (one test a contract, so that pytest-xdist's workers share them)."""
    results = _run("reference", contract)
    failed = [(r.id, r.message) for r in results if r.status != "pass"]
    assert results and not failed, failed


@pytest.mark.parametrize(
    ("planted", "pattern", "expect_in_message"),
    [
        ("ties_away", "cast.fp8", "but reference gives"),
        ("no_saturation", "cast.fp8", "but reference gives"),
        ("nan_sign_dropped", "cast.fp8", "=0x7f (nan), but reference gives 0xff (nan)"),
        ("negative_zero_flushed", "cast.fp8", "=0x00 (0.0), but reference gives 0x80 (-0.0)"),
        ("wrong_dtype", "cast.fp8", "codes: got dtype int32, expected uint8"),
        ("blocks_swapped", "glu.interleave", "but reference gives"),
        ("nearest_not_stochastic", "stochastic.fp8", "draws rounded up, but p_upper="),
    ],
)
def test_planted_bug_is_caught_with_a_small_counterexample(planted, pattern, expect_in_message):
    results = [r for r in _run(f"conformance.planted:{planted}", pattern) if r.kind == "conformance"]
    failed = [r for r in results if r.status == "fail"]
    assert failed, f"{planted} was not caught: {[(r.id, r.status) for r in results]}"
    assert any(expect_in_message in r.message for r in failed), [r.message for r in failed]
    for r in failed:
        assert r.case is not None
        assert min(t.bits.size for t in r.case.inputs.values()) <= 64, f"{r.id}: counterexample not shrunk"
    if planted == "no_saturation":
        assert all(
            r.status == "pass"
            for r in results
            if r.params["overflow"] == "nonsaturating" and r.params["rounding"] == "rne"
        )


def test_crashing_backend_is_recorded_and_the_run_goes_on():
    results = _run("conformance.planted:crashes", "cast.fp8", isolated=True)
    rows = {r.id: r for r in results}
    crashed = [r for r in results if r.status == "crashed"]
    assert crashed and all("crash" in r.message and "exit code 139" in r.message for r in crashed)
    assert len(rows) == 25  # every row still reported: 24 parameter sets and the invalid-input row
    assert {r.status for r in results if r.params.get("rounding") == "rne"} == {"crashed"}
    assert rows["cast.fp8[,invalid-input]"].cases > 0  # the row after the crashes still ran


def test_hanging_backend_times_out_and_the_run_goes_on():
    results = _run("conformance.planted:hangs", "*.fp8", isolated=True, timeout=2.0)
    cast_rows = [
        r for r in results if r.contract == "cast.fp8" and r.kind == "conformance" and r.params["rounding"] == "rne"
    ]
    assert cast_rows and all(r.status == "crashed" and "timeout" in r.message for r in cast_rows)
    decode_rows = [r for r in results if r.contract == "decode.fp8" and r.kind == "conformance"]
    assert decode_rows and all(r.status == "pass" for r in decode_rows)
