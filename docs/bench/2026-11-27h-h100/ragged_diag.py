"""Where the cost of uneven experts goes in ``fast.group.quantize`` (H100, 2026-11-27 eighth session): the same 32768 x
7168 bfloat16 elements as one tensor (``single``) and as 8 experts of 4096 rows (``equal``), of the benchmark's uneven
rows (``ragged``: 1056 and 8160 rows, so transposed NVFP4 rows start 16 bytes off a 32-byte sector and the last tiles
of those experts are partial), of uneven rows that are multiples of 128 (``uneven128``), and of 1088 and 8128 rows
(``sector``: partial tiles, but transposed rows on 32-byte sectors).  Best of two rounds of the benchmarks' median
device time; raw: ``ragged_diag.json``."""

import functools
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "bench"))
from conftest import median_ms  # the benchmarks' device timing

from fast.group import quantize
from fast.quant import mx, nvfp4

os.environ["QCONFORM_FAST_PATH"] = "triton"
K = 7168
CONFIGS = {
    "equal": [4096] * 8,
    "ragged": [1056, 8160, 2048, 4096, 6144, 3072, 5120, 3072],
    "uneven128": [1024, 8192, 2048, 4096, 6144, 3072, 5120, 3072],
    "sector": [1088, 8128, 2048, 4096, 6144, 3072, 5120, 3072],
}
RECIPES = {"nvfp4": (nvfp4, {}), "mxfp8": (mx, {"format": "float8_e4m3fn", "scale_rule": "rceil"})}
data = (torch.randn(32768 * K, device="cuda", generator=torch.Generator("cuda").manual_seed(0)) * 64).to(torch.bfloat16)
results = {}
for recipe, (single, args) in RECIPES.items():
    for usage in ("columnwise", "both"):
        calls = {"single": functools.partial(single, data.view(32768, K), usage=usage, **args)}
        for name, rows in CONFIGS.items():
            calls[name] = functools.partial(
                quantize, data, num_members=8, first_dims=rows, last_dims=[K] * 8, recipe=recipe, block="1d",
                usage=usage, x_dtype="bfloat16",
            )  # fmt: skip
        best = {name: min(median_ms(call) for _ in range(2)) for name, call in calls.items()}
        results[f"{recipe} {usage}"] = best
        print(recipe, usage, "  ".join(f"{k} {v:.4f} ({v / best['single']:.3f})" for k, v in best.items()))
with open(os.path.join(os.environ.get("OUT", "/tmp"), "ragged_diag.json"), "w") as f:
    json.dump(results, f, indent=1)
