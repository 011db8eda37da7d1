"""A kernel author's own property test with qconform's cases and comparator (run by CI: ``pytest examples``).

"My kernel" here is qconform's own ``fast.cast.fp8`` on the CPU; put yours in its place.  Every draw is a
conformance case of ``cast.fp8`` with ``format="float8_e4m3fn"`` (the other params drawn): boundary
cases first, then random ones, shrunk to a minimal counterexample if the kernel disagrees.
"""

from hypothesis import given, settings

from conformance.testing import assert_conforms, cases, tensors
from fast.cast import fp8 as my_fp8_kernel


@settings(max_examples=40, deadline=None)
@given(cases("cast.fp8", format="float8_e4m3fn"))
def test_my_fp8_kernel_conforms(case):
    outputs = my_fp8_kernel(**tensors(case, device="cpu"), **case.params)
    assert_conforms(case, outputs)
