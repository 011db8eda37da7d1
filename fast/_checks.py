"""Argument checks shared by the modules of ``fast/`` (no contract here).

Messages name the argument, the value it got and what is allowed, in the style of ``reference/_checks.py`` (fast
keeps its own copy: it never imports ``reference/``): "Got usage='row', but usage must be one of ['rowwise', ...]".
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["check_choice"]


def check_choice(name: str, value: object, allowed: Sequence[object]) -> None:
    """``ValueError`` unless ``value`` is one of ``allowed``, of the same type (``1`` is not ``True``, ``"te"`` is not
    a ``str`` subclass's ``"te"``)."""
    if not any(type(value) is type(choice) and value == choice for choice in allowed):
        raise ValueError(f"Got {name}={value!r}, but {name} must be one of {list(allowed)}")
