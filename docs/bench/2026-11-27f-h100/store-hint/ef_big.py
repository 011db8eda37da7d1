"""NVFP4 single calls at 8192^2 and [32768, 7168] with whichever fast is first on the path."""

import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "tests", "bench"))
from conftest import median_ms  # the benchmarks' device timing

from fast.quant.nvfp4 import nvfp4

tag = sys.argv[1]
g = torch.Generator(device="cuda").manual_seed(0)
res = {}
for shape in ((8192, 8192), (32768, 7168)):
    x = (torch.randn(shape, device="cuda", generator=g) * 64).to(torch.bfloat16)
    amax = x.float().abs().max().reshape(1)
    cases = {
        "rowwise": dict(usage="rowwise"),
        "columnwise": dict(usage="columnwise"),
        "both": dict(usage="both"),
        "both 16x16": dict(usage="both", block="16x16"),
        "both RHT": dict(usage="both", rht=True),
        "given both": dict(usage="both", amax_source="given", amax=amax, columnwise_amax=amax),
    }
    for name, kw in cases.items():
        res[f"{shape} {name}"] = min(median_ms(lambda x=x, kw=kw: nvfp4(x, **kw)) for _ in range(3))
with open(os.path.join(os.environ["OUT"], f"big_{tag}.json"), "w") as f:
    json.dump(res, f)
print(tag, "done")
