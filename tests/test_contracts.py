"""Every spec row against the backend chosen with ``--qconform-backend`` (default: fast).

A new contract adds a YAML spec and its functions, not a test: this one test covers it.
"""

from collections.abc import Callable
from typing import Any


def test_contract(qconform_row: Any, qconform_check: Callable[[Any], None]) -> None:
    qconform_check(qconform_row)
