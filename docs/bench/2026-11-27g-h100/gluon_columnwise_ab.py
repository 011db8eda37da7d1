"""A/B in one process: the NVFP4 columnwise operand through ``fast.quant.nvfp4_gluon`` (the shipped dispatch) against
the Triton kernel (``fast.quant.nvfp4._gluon_columnwise`` patched to decline), three alternating rounds, best median
device time of each; the two outputs compared byte for byte.  Raw: ``gluon_columnwise_ab.json`` (run on the H100,
2026-11-27 seventh session, before the dispatch took the torchao rules off the Gluon kernel)."""

import importlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "bench"))
from conftest import median_ms  # the benchmarks' device timing

from fast.quant.nvfp4 import nvfp4

nv = importlib.import_module("fast.quant.nvfp4")
gluon_dispatch = nv._gluon_columnwise
torch.manual_seed(0)
CASES = [
    ("bf16 8192^2 computed", (8192, 8192), torch.bfloat16, {}),
    ("bf16 8192^2 given", (8192, 8192), torch.bfloat16, {"given": True}),
    ("fp16 8192^2 computed", (8192, 8192), torch.float16, {}),
    ("bf16 8192^2 torchao_cuda", (8192, 8192), torch.bfloat16, {"scale_rule": "torchao_cuda"}),
    ("bf16 8192^2 zero_scale", (8192, 8192), torch.bfloat16, {"zero_scale": "zero"}),
    ("bf16 4096x14336 computed", (4096, 14336), torch.bfloat16, {}),
    ("bf16 32768x7168 computed", (32768, 7168), torch.bfloat16, {}),
    ("bf16 32768x7168 given", (32768, 7168), torch.bfloat16, {"given": True}),
    ("bf16 1024x2048 computed", (1024, 2048), torch.bfloat16, {}),
]
res, equal = {}, {}
for name, shape, dtype, case in CASES:
    x = (torch.randn(shape, device="cuda") * 4).to(dtype)
    x.view(-1)[12345] = float("nan")
    x.view(-1)[777] = float("inf")
    params = {k: v for k, v in case.items() if k != "given"}
    if case.get("given"):
        amax = x.float().abs().nan_to_num(0, 0, 0).amax().reshape(1) / 2
        params.update(amax_source="given", columnwise_amax=amax)

    def call(x: torch.Tensor = x, params: dict = params) -> dict[str, torch.Tensor]:
        return nvfp4(x, usage="columnwise", **params)

    outs = {}
    for _ in range(3):
        for label, dispatch in (("triton", lambda x, s: None), ("gluon", gluon_dispatch)):
            nv._gluon_columnwise = dispatch
            outs[label] = call()
            res.setdefault(f"{name} {label}", []).append(median_ms(call))
    nv._gluon_columnwise = gluon_dispatch
    equal[name] = all(
        torch.equal(outs["triton"][k].view(torch.uint8), outs["gluon"][k].view(torch.uint8)) for k in outs
    )
    best = {label: min(res[f"{name} {label}"]) for label in ("triton", "gluon")}
    print(f"{name:32s} equal={equal[name]}  triton {best['triton']:.4f}  gluon {best['gluon']:.4f}")
print("all equal:", all(equal.values()))
with open(os.path.join(os.environ.get("OUT", "/tmp"), "gluon_columnwise_ab.json"), "w") as f:
    json.dump({"ms": res, "equal": equal}, f, indent=1)
