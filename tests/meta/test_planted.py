"""The engine catches planted bugs, isolates crashes and hangs, and passes the reference."""

import fnmatch

import pytest

from conformance.backends import load_backend
from conformance.registry import load_specs
from conformance.runner import Evaluation, Runner, select_rows
from conformance.worker import InProcessBackend, IsolatedBackend

ALL_SPECS = load_specs("*")
"""Every spec, parsed once (``load_specs`` reads and validates all spec files on every call)."""


def _specs(pattern: str):
    return [spec for spec in ALL_SPECS if fnmatch.fnmatchcase(spec.contract, pattern)]


def _run(backend: str, pattern: str, isolated: bool = False, timeout: float = 60.0, where: str | None = None):
    handle = IsolatedBackend(backend, timeout) if isolated else InProcessBackend(backend)
    try:
        return Runner(handle, profile="smoke", seed=0).run(_specs(pattern), where=where)
    finally:
        handle.close()


@pytest.mark.parametrize("contract", [spec.contract for spec in ALL_SPECS])
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
    results = [r for r in _run(f"conformance.plugins.planted:{planted}", pattern) if r.kind == "conformance"]
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
    results = _run("conformance.plugins.planted:crashes", "cast.fp8", isolated=True)
    rows = {r.id: r for r in results}
    crashed = [r for r in results if r.status == "crashed"]
    assert crashed and all("crash" in r.message and "exit code 139" in r.message for r in crashed)
    assert len(rows) == 25  # every row still reported: 24 parameter sets and the invalid-input row
    assert {r.status for r in results if r.params.get("rounding") == "rne"} == {"crashed"}
    assert rows["cast.fp8[,invalid-input]"].cases > 0  # the row after the crashes still ran


def test_hanging_backend_times_out_and_the_run_goes_on():
    # one format: each hanging row costs the timeout and a worker restart
    results = _run(
        "conformance.plugins.planted:hangs", "*.fp8", isolated=True, timeout=2.0, where="format == 'float8_e5m2'"
    )
    cast_rows = [
        r for r in results if r.contract == "cast.fp8" and r.kind == "conformance" and r.params["rounding"] == "rne"
    ]
    assert cast_rows and all(r.status == "crashed" and "timeout" in r.message for r in cast_rows)
    decode_rows = [r for r in results if r.contract == "decode.fp8" and r.kind == "conformance"]
    assert decode_rows and all(r.status == "pass" for r in decode_rows)


# %% Planted kernel bugs in block-scaled contracts (qconform_test_backends), on the rows each bug lives in

NVFP4_TE = "scale_rule == 'te' and block == '1x16' and amax_scope == 'tensor' and not rht and rounding == 'rne'"
SCALE_BUGS = [
    # (planted backend, contract, rows, the output the first mismatch names, counterexample elements at most)
    pytest.param(
        "mx_rceil_exact_power_rounds_up",
        "quant.mx",
        "scale_rule == 'rceil' and format == 'float8_e4m3fn' and usage == 'rowwise' and blocks == '1d'"
        " and scale_layout == 'compact'",
        "data_rowwise",
        64,  # the spec's example: E4M3 amax 448 (2x32), edges=te; no generated case has amax = max * 2**j
        id="mx-e8m0-decision-point",
    ),
    pytest.param(
        "nvfp4_columnwise_nibbles_swapped",
        "quant.nvfp4",
        f"usage != 'rowwise' and {NVFP4_TE} and amax_source == 'computed' and zero_scale == 'flt_max'",
        "columnwise_data",
        256,  # 16x16
        id="nvfp4-columnwise-nibbles",
    ),
    pytest.param(
        "nibbles_high_first_packs_low_first",
        "pack.nibbles",
        "order == 'high_first'",
        "packed",
        8,
        id="pack-nibbles-one-order",
    ),
    pytest.param(
        "swizzle_padding_not_zeroed",
        "layout.scale_swizzle",
        None,
        "swizzled",
        128,  # the spec's example, a 128x1 scale: three padding columns
        id="swizzle-padding",
    ),
    pytest.param(
        "fp8_block_tail_takes_previous_scale",
        "quant.fp8_block",
        "block == '1x128' and usage == 'rowwise' and x_dtype == 'float32'",
        "data",
        129 * 129,  # two 1x128 blocks a row and a ragged tail; fp8_block is not elementwise, so no shrinking
        id="fp8-block-last-tile",
    ),
    pytest.param(
        "fp8_delayed_fused_never_skips",
        "quant.fp8_delayed",
        "update == 'fused' and format == 'float8_e4m3fn' and amax_compute_algo == 'max' and usage == 'both'",
        "amax_history",
        2,  # a spec example: an all-zero x and a history whose newest entry is 0; other fused rows pass
        id="fp8-delayed-degenerate-state",
    ),
    pytest.param(
        "nvfp4_block_scale_association",
        "quant.nvfp4",
        f"{NVFP4_TE} and usage == 'rowwise' and zero_scale == 'flt_max'",
        "scales",
        64 * 224,  # the spec's scale_decision_points class: block amaxes fl32(mu / c) +- 3 ulps, c = fl32(S_enc/6)
        id="nvfp4-block-scale-ulp",
    ),
    pytest.param(
        "fp8_tensor_amax_first_chunk",
        "quant.fp8_tensor",
        "x_dtype == 'float32' and format == 'float8_e4m3fn' and usage == 'both' and not power_2_scale"
        " and epsilon == 0.0",
        "amax",
        65 * 130,  # the spec's lone_extreme size class: the amax once, past the first 4,096 elements
        id="fp8-tensor-amax-partial",
    ),
    pytest.param(
        "nvfp4_amax_first_chunk",
        "quant.nvfp4",
        f"{NVFP4_TE} and usage == 'both' and amax_source == 'computed' and zero_scale == 'flt_max'",
        "amax",
        128 * 128,  # the spec's lone_extreme size class: the global amax once, past the first 8,192 elements
        id="nvfp4-global-amax-partial",
    ),
]


@pytest.mark.parametrize(("planted", "pattern", "where", "output", "largest"), SCALE_BUGS)
def test_planted_scale_bug_is_caught_on_smoke(
    test_backends: str, planted: str, pattern: str, where: str | None, output: str, largest: int
) -> None:
    results = [r for r in _run(f"{test_backends}:{planted}", pattern, where=where) if r.kind == "conformance"]
    failed = [r for r in results if r.status == "fail"]
    assert failed, f"{planted} was not caught: {[(r.id, r.status) for r in results]}"
    assert any(m.output == output for r in failed for m in r.mismatches), [r.message for r in failed]
    sizes = [min(t.bits.size for t in r.case.inputs.values()) for r in failed if r.case is not None]
    assert sizes and min(sizes) <= largest, f"{planted}: smallest counterexample {min(sizes)} elements"


def test_planted_nibble_swap_leaves_the_other_order_right(test_backends: str) -> None:
    results = _run(f"{test_backends}:nibbles_high_first_packs_low_first", "pack.nibbles", where="order == 'low_first'")
    assert [r.status for r in results] == ["pass"]


@pytest.mark.parametrize(
    ("planted", "pattern", "where", "output", "largest"), [pytest.param(*p.values, id=p.id) for p in SCALE_BUGS]
)
def test_planted_scale_bug_rows_exist(
    test_backends: str, planted: str, pattern: str, where: str | None, output: str, largest: int
) -> None:
    """Each planted bug's rows exist and its backend claims them (so an xfail above cannot pass vacuously)."""
    backend = load_backend(f"{test_backends}:{planted}")
    rows = [(spec, combo) for spec, combo in select_rows(_specs(pattern), where) if combo is not None]
    assert rows, f"{planted}: no row matches {where!r}"
    for spec, combo in rows:
        assert backend.unsupported_reason(spec.contract, spec.with_defaults(combo)) is None, (planted, combo)


def test_planted_fused_never_skips_is_caught_by_degenerate_state_boundary_cases(test_backends: str) -> None:
    """Not only by the spec's example: the ``zeros`` class's boundary cases (an all-zero x, history[0] = 0,
    -0.0 and -1.0) catch ``fp8_delayed_fused_never_skips`` on every input dtype and each history value."""
    from conformance.strategies import boundary_cases

    (spec,) = _specs("quant.fp8_delayed")
    cases = [c for c in boundary_cases(spec, spec.with_defaults({"update": "fused"})) if "zeros/" in c.label]
    assert len({c.label for c in cases}) == 9  # 3 dtypes x 3 newest history entries
    handle = InProcessBackend(f"{test_backends}:fp8_delayed_fused_never_skips")
    try:
        evaluations = Runner(handle, profile="smoke").evaluate_many(spec, cases)
    finally:
        handle.close()
    caught = {c.label for c, e in zip(cases, evaluations, strict=True) if e.status == "fail"}
    assert caught == {c.label for c in cases}, sorted({c.label for c in cases} - caught)
    reference = InProcessBackend("reference")
    try:
        assert all(e.status == "pass" for e in Runner(reference, profile="smoke").evaluate_many(spec, cases))
    finally:
        reference.close()


def test_a_failing_row_reports_every_distinct_failure_class():
    """``negative_zero_flushed`` fails in several value classes of cast.fp8: the row keeps the first failing
    case and, after it, the first of each other (output, value class) up to ``MAX_DISTINCT_FAILURES``, each
    minimized and named in the message; a passing row has none."""
    from conformance.runner import MAX_DISTINCT_FAILURES, failure_class

    (row,) = _run(
        "conformance.plugins.planted:negative_zero_flushed",
        "cast.fp8",
        where="format == 'float8_e4m3fn' and overflow == 'saturate' and rounding == 'rne'",
    )
    assert row.status == "fail" and row.case is not None
    kinds = [failure_class(row.case, Evaluation("fail", row.message, row.mismatches))]
    kinds += [failure_class(c, e) for c, e in row.other_failures]
    assert 2 <= len(kinds) <= MAX_DISTINCT_FAILURES and len(set(kinds)) == len(kinds), kinds
    assert all(e.status == "fail" and c.inputs["x"].bits.size <= 64 for c, e in row.other_failures)
    assert f"also {len(row.other_failures)} other distinct failure(s): [" in row.message
    (good,) = _run(
        "reference", "cast.fp8", where="format == 'float8_e4m3fn' and overflow == 'saturate' and rounding == 'rne'"
    )
    assert good.status == "pass" and good.other_failures == []
