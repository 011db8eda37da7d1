"""qconform's rows as plain hypothesis tests, for HypoFuzz: ``hypothesis fuzz -- examples/test_fuzz_targets.py``.

Under plain pytest (CI runs ``pytest examples``) each row's test runs 20 examples.  Choose what to fuzz with
``QCONFORM_FUZZ_BACKEND`` (default ``reference``; e.g. ``fast``, or a ``module:attr`` of your own),
``QCONFORM_FUZZ_SPEC`` (a glob over contract ids, default ``cast.fp8``) and ``QCONFORM_FUZZ_WHERE`` (an
expression over params, as ``qconform run --where``).  See ``docs/fuzzing.md``.
"""

import os

from conformance.hypofuzz import fuzz_targets

globals().update(
    fuzz_targets(
        os.environ.get("QCONFORM_FUZZ_BACKEND", "reference"),
        os.environ.get("QCONFORM_FUZZ_SPEC", "cast.fp8"),
        os.environ.get("QCONFORM_FUZZ_WHERE") or None,
        module=__name__,
    )
)
