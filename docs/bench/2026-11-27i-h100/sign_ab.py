"""A/B on the GPU: 16 x 16 tiles of both operands (shared codes) with ``sign_trick.patch`` applied to the working
tree, against HEAD's ``fast/quant/nvfp4.py`` saved as ``scratch/nvfp4_old.py``; outputs compared byte for byte on
random data with NaN, Inf, zeros and E2M1 ties, then timed (bfloat16 8192 x 8192, two rounds).  Needs
``scratch/timing.py`` (``median_ms``) and ``scratch`` on the path; writes ``$OUT/sign_ab.json``."""

import importlib
import json
import os
from pathlib import Path

import nvfp4_old as old
import torch
from timing import median_ms

new = importlib.import_module("fast.quant.nvfp4")


def as_bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.uint8)


def check(x: torch.Tensor, **kw: object) -> None:
    a, b = old.nvfp4(x, **kw), new.nvfp4(x, **kw)
    for name in a:
        assert torch.equal(as_bits(a[name]), as_bits(b[name])), (name, kw)


torch.manual_seed(0)
three = torch.tensor([3.0], device="cuda")
variants = (
    {"usage": "both", "block": "16x16"},
    {"usage": "both", "block": "16x16", "amax_source": "given", "amax": three, "columnwise_amax": three},
    {"usage": "both", "block": "16x16", "zero_scale": "zero"},
)
specials = torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.25, -0.75, 5.0, 6.0])
for dtype in (torch.bfloat16, torch.float16, torch.float32):
    for shape in [(8192, 8192), (128, 64), (256, 192), (4096, 7168), (8176, 8208), (16, 16), (48, 32)]:
        x = torch.randn(shape, device="cuda") * torch.exp(torch.randn(shape, device="cuda") * 3)
        flat = x.view(-1)
        where = torch.randint(0, flat.numel(), (max(1, flat.numel() // 50),), device="cuda")
        flat[where] = specials.cuda()[torch.randint(0, len(specials), where.shape, device="cuda")]
        for kw in variants:
            check(x.to(dtype), **kw)
results: dict[str, object] = {"bitequal": "ok"}
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
amax = x.float().abs().max().reshape(1)
timed = {
    "16x16": {"usage": "both", "block": "16x16"},
    "16x16 given": {"usage": "both", "block": "16x16", "amax_source": "given", "amax": amax, "columnwise_amax": amax},
}
for name, kw in timed.items():
    for _ in range(2):
        for tag, module in (("old", old), ("new", new)):
            ms = median_ms(lambda module=module, kw=kw: module.nvfp4(x, **kw))
            results.setdefault(f"{name} {tag}", []).append(round(ms, 4))
print(json.dumps(results, indent=1))
(Path(os.environ.get("OUT", "/tmp")) / "sign_ab.json").write_text(json.dumps(results, indent=1))
