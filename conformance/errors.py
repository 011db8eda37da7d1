"""The engine's own exceptions.

``reference/`` and ``fast/`` raise the builtin ``ValueError``/``TypeError`` for bad arguments
(they share no code with the engine); these classes are for the engine's users.
"""

from __future__ import annotations

__all__ = ["BackendError", "ContractViolation", "QConformError", "SpecError"]


class QConformError(Exception):
    """Root of every error the engine raises on purpose."""


class SpecError(QConformError, ValueError):
    """A spec file is malformed; the message names the file, line, key and what was expected."""


class BackendError(QConformError, LookupError):
    """A backend cannot be found or loaded (unknown name, bad ``module:attr``, import failure)."""


class ContractViolation(QConformError, AssertionError):
    """A backend's outputs differ from the reference (raised by the pytest integration)."""
