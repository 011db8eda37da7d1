"""Fixtures of the benchmarks: CUDA-event timing and the copy bandwidth every GPU number is set beside.

GPU kernels are timed with CUDA events (warm-up, then the median of ``REPS`` launches recorded back
to back behind a sleep kernel, so that the host has queued them all before the GPU reaches them:
device time, without host launch overhead) and reported through ``benchmark.extra_info``;
pytest-benchmark's own host-side stats of the same callable (synchronized, host overhead included)
come along in the JSON.  Every GPU benchmark's bytes are the
fewest it must move (each input read once, each output written once), and its fraction is taken
of the device-to-device copy bandwidth measured in the same session (bytes read plus written).
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

WARMUP = 5
REPS = 30
SLEEP_CYCLES = 50_000_000
"""Cycles of the sleep kernel queued before the timed launches (about 25 ms at H100 clocks)."""
COPY_BYTES = 1 << 30
"""Size of the copy that sets the bandwidth ceiling: 1 GiB, far beyond any L2."""

Measure = Callable[..., dict[str, Any]]


def median_ms(fn: Callable[[], object], *, warmup: int = WARMUP, reps: int = REPS) -> float:
    """Median CUDA-event device time of ``fn`` in milliseconds, after ``warmup`` untimed calls (module docstring)."""
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    torch.cuda.synchronize()
    torch.cuda._sleep(SLEEP_CYCLES)
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


@pytest.fixture(scope="session")
def cuda_ms() -> Callable[..., float]:
    """:func:`median_ms`, for a peer timed inside another benchmark."""
    return median_ms


@pytest.fixture(scope="session")
def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth of this GPU in bytes/s, counting bytes read and written."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    src = torch.randn(COPY_BYTES // 4, device="cuda")
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return 2 * COPY_BYTES / (ms * 1e-3)


@pytest.fixture
def measure(benchmark: Any, copy_bandwidth: float) -> Measure:
    """``measure(build, bytes_moved=..., **info)``: time ``build()`` on the GPU and record it in ``benchmark``.

    ``build`` returns the callable to time.  Warnings raised while it is built and first run
    (``torch.compile`` warns as it imports inductor and compiles) are recorded in
    ``extra_info["warnings"]`` instead of failing the benchmark under ``filterwarnings = error``.
    """

    def run(build: Callable[[], Callable[[], object]], *, bytes_moved: int, **info: Any) -> dict[str, Any]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn = build()
            fn()
            torch.cuda.synchronize()
        ms = median_ms(fn)
        rate = bytes_moved / (ms * 1e-3)
        benchmark.extra_info.update(
            info,
            ms=ms,
            bytes_moved=bytes_moved,
            gb_per_s=rate / 1e9,
            copy_gb_per_s=copy_bandwidth / 1e9,
            fraction_of_copy=rate / copy_bandwidth,
            device=torch.cuda.get_device_name(),
            warnings=sorted({str(w.message)[:200] for w in caught}),
        )

        def synchronized() -> None:
            fn()
            torch.cuda.synchronize()

        benchmark.pedantic(synchronized, rounds=10, warmup_rounds=1)
        return benchmark.extra_info

    return run
