"""Deterministic sharding: ``--shard i/n`` runs the rows whose id hashes to shard ``i`` of ``n``.

The unit is a row (a contract x parameter set, or a contract's invalid-input row).  A row's
cases are seeded from ``--seed`` and the row id alone, so a row runs the same cases in
whichever shard it lands; the ``n`` shards of one command together run every row exactly
once, and ``qconform report merge`` of their reports gives the report of the unsharded run
(timings and timestamps aside).  The hash is SHA-256 of the row id, so a row stays in its
shard when other specs or rows are added.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from conformance.errors import QConformError

__all__ = ["Shard", "parse_shard"]

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise QConformError(
                f"Got shard {self.index}/{self.count}, but a shard is i/n with 1 <= i <= n (e.g. 1/4 .. 4/4)"
            )

    def holds(self, row_id: str) -> bool:
        """Whether the row ``row_id`` belongs to this shard."""
        digest = hashlib.sha256(row_id.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/5"`` -> ``Shard(2, 5)``; anything else is a ``QConformError`` saying what is expected."""
    match = _SHARD.match(text)
    if match is None:
        raise QConformError(f"Got --shard {text!r}, but a shard is i/n with 1 <= i <= n, e.g. 1/4")
    return Shard(int(match.group(1)), int(match.group(2)))
