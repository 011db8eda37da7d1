"""How far a run is: rows done of all, cases per second and the time left, on standard error.

On a terminal this is a ``tqdm`` bar; elsewhere (a CI log, a pipe) one plain line every
``PLAIN_EVERY_S`` seconds, so a long run is seen to move without a line per row.  A row that does not
pass is printed as it finishes, either way.  ``--quiet`` turns all of it off.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from conformance.runner import ComboResult

__all__ = ["Progress"]

PLAIN_EVERY_S = 30.0


class Progress:
    """Progress of ``total`` rows; ``row(result)`` for each finished one, ``close()`` at the end."""

    def __init__(self, total: int, *, quiet: bool = False, stream: TextIO | None = None):
        self.total, self.quiet = total, quiet
        self.stream = stream or sys.stderr
        self.rows = self.cases = 0
        self.start = self.last_line = time.perf_counter()
        self.bar: Any = None
        if not quiet and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="row", file=self.stream, dynamic_ncols=True, smoothing=0.05)

    def note(self, line: str) -> None:
        """A line of its own (a row that did not pass, a sweep starting), above the bar."""
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def row(self, result: ComboResult) -> None:
        self.rows += 1
        self.cases += result.cases
        if result.status not in ("pass", "not-implemented"):
            first = result.message.splitlines()[0] if result.message else ""
            self.note(f"{result.status.upper()} {result.id}: {first}")
        rate = self.cases / max(time.perf_counter() - self.start, 1e-9)
        if self.bar is not None:
            self.bar.set_postfix_str(f"{rate:,.0f} cases/s", refresh=False)
            self.bar.update(1)
        elif not self.quiet and (time.perf_counter() - self.last_line >= PLAIN_EVERY_S or self.rows == self.total):
            self.last_line = time.perf_counter()
            self.note(self.summary(rate))

    def summary(self, rate: float) -> str:
        elapsed = time.perf_counter() - self.start
        left = elapsed / self.rows * (self.total - self.rows) if self.rows else float("nan")
        return (
            f"qconform: {self.rows}/{self.total} rows, {self.cases:,} cases, {rate:,.0f} cases/s, "
            f"{elapsed:.0f} s elapsed, about {left:.0f} s left"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
