"""``conformance.testing``: the cases and the comparator a kernel author imports into their own tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import reference.cast
from conformance.testing import assert_conforms, cases


@settings(max_examples=30, deadline=None, database=None)
@given(cases("cast.fp8", format="float8_e5m2", overflow="saturate"))
def test_cases_fix_the_given_params_and_draw_the_rest(case):
    assert case.params["format"] == "float8_e5m2" and case.params["overflow"] == "saturate"
    assert case.params["rounding"] in ("rne", "rtz", "stochastic")
    assert_conforms(case, reference.cast.fp8(**case.carriers(), **case.params))


def test_a_wrong_kernel_is_caught_and_shrunk_with_a_replay_line():
    def ties_away(x, **params):
        out = reference.cast.fp8(x, **params)["codes"]
        return {"codes": np.where(out == 0x7E, np.uint8(0x7D), out)}  # 448 becomes 416: one code off

    @settings(max_examples=60, deadline=None, database=None)
    @given(cases("cast.fp8", format="float8_e4m3fn", overflow="saturate", rounding="rne"))
    def check(case):
        assert_conforms(case, ties_away(**case.carriers(), **case.params))

    with pytest.raises(AssertionError, match=r"codes\[.*but reference gives 0x7e[\s\S]*replay: qconform replay"):
        check()


@pytest.mark.parametrize(
    ("params", "message"),
    [({"fromat": "float8_e4m3fn"}, "unknown param 'fromat'"), ({"format": "e4m3"}, "format='e4m3' is not one of")],
)
def test_bad_params_name_the_param(params, message):
    with pytest.raises(ValueError, match=message):
        cases("cast.fp8", **params)


def test_missing_outputs_are_named():
    from hypothesis import find

    case = find(cases("cast.fp8"), lambda c: True)
    with pytest.raises(AssertionError, match=r"outputs \['codes'\] missing"):
        assert_conforms(case, {})
