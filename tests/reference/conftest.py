"""Oracle inputs shared by the second-oracle tests: every 16-bit float pattern, random float32
patterns and TestFloat-style boundary sets of a format (as fixtures: with ``--import-mode=importlib``
test modules cannot import each other)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from reference.formats import get_format

BF16_ALL = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
"""Every bfloat16 bit pattern, widened exactly to float32."""
F16_ALL = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
"""Every float16 bit pattern."""
F32_RANDOM = (
    np.random.default_rng(20261122).integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32).view(np.float32)
)
"""Uniformly drawn float32 bit patterns (NaNs, subnormals, huge values included), fixed seed."""
WIDE = {"bf16_all": BF16_ALL, "f16_all": F16_ALL, "f32_random": F32_RANDOM}


def boundary_set(name: str) -> np.ndarray:
    """TestFloat-style float32 inputs for format ``name``: every value, every tie, and their neighbours.

    Every finite magnitude, every midpoint between neighbours, the overflow boundary (max plus
    half the top spacing) and twice the max, each with one float32 ulp either side, then float32
    specials: ±Inf, NaNs with payloads, subnormals (2**-127 among them) and the float32 max.
    Both signs of everything.
    """
    values = get_format(name).finite_magnitudes.astype(np.float32)
    midpoints = (values[:-1] + values[1:]) / np.float32(2)
    with np.errstate(over="ignore"):  # 2 * max overflows float32 for E8M0
        edges = [values[-1] + (values[-1] - values[-2]) / np.float32(2), values[-1] * np.float32(2)]
    points = np.concatenate([values, midpoints, np.array(edges, dtype=np.float32)])
    inf = np.float32(np.inf)
    around = np.concatenate([points, np.nextafter(points, inf), np.nextafter(points, -inf)])
    finfo = np.finfo(np.float32)
    specials = np.array(
        [np.inf, finfo.max, finfo.smallest_normal, finfo.smallest_subnormal, 2**-127, 3 * 2**-149], dtype=np.float32
    )
    nans = np.array([0x7FC0_0000, 0x7F80_0001, 0x7FFF_FFFF], dtype=np.uint32).view(np.float32)
    magnitudes = np.concatenate([around, specials, np.nextafter(finfo.smallest_normal, np.float32(0))[None], nans])
    return np.concatenate([magnitudes, -magnitudes]).astype(np.float32)


@pytest.fixture(params=sorted(WIDE), scope="session")
def wide_x(request: pytest.FixtureRequest) -> np.ndarray:
    """Each wide input set in turn: all bfloat16 and all float16 patterns, random float32 patterns."""
    return WIDE[request.param]


@pytest.fixture(scope="session")
def boundary_x() -> Callable[[str], np.ndarray]:
    """:func:`boundary_set`, as a fixture."""
    return boundary_set


@pytest.fixture(scope="session")
def assert_codes_equal() -> Callable[[np.ndarray, np.ndarray, np.ndarray, str], None]:
    """``assert_codes_equal(ours, theirs, x, what)``: equal codes, else the first differing inputs in hex."""

    def check(ours: np.ndarray, theirs: np.ndarray, x: np.ndarray, what: str) -> None:
        __tracebackhide__ = True
        ours, theirs = np.asarray(ours).reshape(-1), np.asarray(theirs).reshape(-1)
        bad = np.flatnonzero(ours != theirs)
        bits = x.reshape(-1).view(np.uint16 if x.dtype == np.float16 else np.uint32)
        shown = ", ".join(f"x={int(bits[i]):#x}: {int(ours[i]):#04x} vs {int(theirs[i]):#04x}" for i in bad[:8])
        assert bad.size == 0, f"{bad.size} codes differ from {what}: {shown}"

    return check
