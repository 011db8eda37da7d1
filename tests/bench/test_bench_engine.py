"""The engine's own speed: cases per second per contract family, spec loading, ``qconform list``.

A conformance suite is worth running only if people can afford to: these figures are the engine's
cost per case (hypothesis drawing, the NumPy reference, the backend call, the comparison) with the
``fast`` backend in this process (``--isolation none``) and in its isolated child (the default),
measured on one representative row per family at the ``default`` profile.  Start-up (importing torch
in the child) is left out of the per-case figures and measured on its own by ``qconform list`` and
the spec loading.  Every figure goes to ``extra_info`` of the benchmark JSON (``nox -s bench``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest

from conformance.registry import load_specs
from conformance.runner import Runner
from conformance.worker import InProcessBackend, IsolatedBackend

pytestmark = pytest.mark.bench

ROWS = {
    "cast": ("cast.fp8", "format == 'float8_e4m3fn' and rounding == 'rne' and overflow == 'saturate'"),
    "decode": ("decode.fp8", None),
    "quant.mx": ("quant.mx", "format == 'float8_e4m3fn' and scale_rule == 'rceil'"),
    "quant.nvfp4": ("quant.nvfp4", "usage == 'both' and block == '1x16' and not rht and rounding == 'rne'"),
    "quant.fp8": ("quant.fp8_tensor", None),
    "dequant": ("dequant.mx", None),
    "glu": ("glu.interleave", None),
    "group": ("group.quantize", None),
    "int4": ("int4.tinygemm_pack", None),
    "layout": ("layout.scale_swizzle", None),
}
"""Per family, one row: a contract and a filter (its first matching parameter set)."""


def _row(contract: str, where: str | None) -> tuple[Any, dict[str, Any]]:
    from conformance.expr import evaluate

    (spec,) = load_specs(contract)
    combos = [c for c in spec.param_combinations() if where is None or evaluate(where, spec.with_defaults(c))]
    return spec, combos[0]


@pytest.fixture(scope="module", params=["none", "process"])
def handle(request: pytest.FixtureRequest) -> Any:
    opened = (InProcessBackend if request.param == "none" else IsolatedBackend)("fast", 120.0)
    opened.isolation = request.param
    yield opened
    opened.close()


@pytest.mark.parametrize("family", list(ROWS))
def test_cases_per_second(benchmark: Any, handle: Any, family: str) -> None:
    spec, combo = _row(*ROWS[family])
    runner = Runner(handle, profile="default", seed=0)
    runner.run_combo(spec, combo)  # warm: lazily built pools and strategies, the backend's first calls
    results = []

    def run() -> None:
        results.append(runner.run_combo(spec, combo))

    benchmark.pedantic(run, rounds=3, iterations=1)
    result = results[-1]
    assert result.status == "pass", result.message
    seconds = benchmark.stats.stats.median
    benchmark.extra_info.update(
        row=result.id, isolation=handle.isolation, cases=result.cases, cases_per_s=round(result.cases / seconds, 1)
    )


def _wall(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=env)
    return time.perf_counter() - start


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_spec_load_and_list(benchmark: Any, cache: str, tmp_path: Any) -> None:
    """Loading all specs in a fresh process (``cold``: no parse cache; ``warm``: the cache filled), and the
    wall time of ``qconform list`` (which imports neither torch nor triton)."""
    env = {**os.environ, "QCONFORM_CACHE_DIR": "" if cache == "cold" else str(tmp_path)}
    load = [sys.executable, "-c", "import time; from conformance.registry import load_specs; "
            "t = time.perf_counter(); load_specs(); print(time.perf_counter() - t)"]  # fmt: skip
    subprocess.run(load, check=True, capture_output=True, env=env)  # fills the warm cache
    seconds = benchmark.pedantic(
        lambda: float(subprocess.run(load, check=True, capture_output=True, env=env, text=True).stdout),
        rounds=3,
        iterations=1,
    )
    listing = _wall([sys.executable, "-m", "conformance.cli", "list"], env)
    benchmark.extra_info.update(cache=cache, load_all_specs_s=round(seconds, 4), qconform_list_s=round(listing, 3))
