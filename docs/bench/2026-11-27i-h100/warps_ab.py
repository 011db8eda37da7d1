"""A/B on the GPU: the launch of both operands in 1x16 blocks (``fast.quant.nvfp4._BOTH_4_CAPPED``, 128 x 64 tiles on
4 warps, 4 programs per SM under the 128-register cap) against 256 x 64 tiles on 8 warps (2 per SM, the same per-thread
share of 8 rows x 8 columns), 128 x 64 on 8 warps (2 per SM) and 256 x 64 on 8 warps uncapped; outputs compared byte
for byte (bfloat16 8192 x 8192 with NaNs), then timed with a computed and a given amax, two rounds.  Needs
``scratch/timing.py`` (``median_ms``) on the path; writes ``$OUT/warps_ab.json``."""

import importlib
import json
import os
from pathlib import Path

import torch
from timing import median_ms

nvfp4 = importlib.import_module("fast.quant.nvfp4")
Launch = nvfp4._Launch
variants = {
    "A 128x64 w4 4/SM": Launch(128, 64, 4, 4, register_cap=True),
    "B 256x64 w8 2/SM": Launch(256, 64, 8, 2, register_cap=True),
    "C 128x64 w8 2/SM": Launch(128, 64, 8, 2, register_cap=True),
    "E 256x64 w8 2/SM uncapped": Launch(256, 64, 8, 2, register_cap=False),
}
shipped = nvfp4._BOTH_4_CAPPED
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
x.view(-1)[::997] = float("nan")
amax = x.float().nan_to_num(0).abs().max().reshape(1)
expected = {name: t.clone() for name, t in nvfp4.nvfp4(x, usage="both").items()}
results: dict[str, object] = {}
for name, launch in variants.items():
    nvfp4._BOTH_4_CAPPED = shipped._replace(quantize=launch)
    out = nvfp4.nvfp4(x, usage="both")
    results[f"{name} equal"] = all(torch.equal(expected[k].view(torch.uint8), out[k].view(torch.uint8)) for k in out)
for _ in range(2):
    for name, launch in variants.items():
        nvfp4._BOTH_4_CAPPED = shipped._replace(quantize=launch)
        computed = median_ms(lambda: nvfp4.nvfp4(x, usage="both"))
        given = median_ms(lambda: nvfp4.nvfp4(x, usage="both", amax_source="given", amax=amax, columnwise_amax=amax))
        results.setdefault(name, []).append(round(computed, 4))
        results.setdefault(f"{name} given", []).append(round(given, 4))
print(json.dumps(results, indent=1))
(Path(os.environ.get("OUT", "/tmp")) / "warps_ab.json").write_text(json.dumps(results, indent=1))
