"""A/B on the GPU of ``fast.quant.nvfp4._e2m1_pairs``'s round-to-odd sticky bit: ``b | ((b + 0x1FFF) & 0x2000)``
(the working tree) against HEAD ef7582e's ``setp`` and predicated ``or`` (``nvfp4_head.py`` copied over a copy of
``fast/`` in ``/tmp/old``; ``sticky_ab.sh`` and ``sticky_check.sh`` set this up).  Run once per tree:
``python3 sticky_ab.py TAG MODE`` with ``TAG`` ``old`` or ``new`` and ``MODE``

- ``check``: the sha256 of every output byte (and of every input) on bfloat16 / float16 / float32, 7 shapes, NaN,
  Inf, zeros and E2M1 ties at random places, every usage and the variants below, and grouped quantize of 8 members
  (equal and uneven, one empty) -> ``$OUT/ab_hash_TAG.json``;
- ``time``: bfloat16 8192 x 8192 and grouped 8 x [4096, 7168] timed with ``tests/bench/conftest.py``'s
  ``median_ms``, appended to ``$OUT/ab_times.json``.

Needs ``REPO`` (the checkout, for ``tests/bench``) and the tree under test first on ``PYTHONPATH``.
"""

import hashlib
import importlib
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, os.environ["REPO"] + "/tests/bench")
median_ms = importlib.import_module("conftest").median_ms
nvfp4 = importlib.import_module("fast.quant.nvfp4").nvfp4
group_quantize = importlib.import_module("fast.group").quantize

SPECIALS = [float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.25, -0.75, 5.0, 6.0, 2.5, -3.5]


def digest(outputs: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(outputs):
        t = outputs[name].contiguous()
        h.update(name.encode())
        h.update(t.view(torch.uint8).cpu().numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def check() -> dict[str, str]:
    torch.manual_seed(0)
    specials = torch.tensor([*SPECIALS, 1.75e-3], device="cuda")
    three = torch.tensor([3.0], device="cuda")
    base = [{"usage": u} for u in ("rowwise", "columnwise", "both")]
    extra = [
        {"usage": "both", "block": "16x16"},
        {"usage": "both", "amax_source": "given", "amax": three, "columnwise_amax": three},
        {"usage": "rowwise", "amax_source": "given", "amax": three},
        {"usage": "columnwise", "amax_source": "given", "columnwise_amax": three},
        {"usage": "both", "zero_scale": "zero"},
        {"usage": "both", "scale_rule": "torchao"},
        {"usage": "both", "scale_rule": "torchao_cuda"},
        {"usage": "both", "rht": True},
        {"usage": "columnwise", "rht": True},
        {"usage": "rowwise", "amax_scope": "row"},
    ]
    hashes = {}
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for shape in [(128, 64), (256, 192), (4096, 7168), (8176, 8208), (16, 16), (48, 32), (1024, 2048)]:
            x = torch.randn(shape, device="cuda") * torch.exp(torch.randn(shape, device="cuda") * 3)
            flat = x.view(-1)
            where = torch.randperm(flat.numel(), device="cuda")[: max(1, flat.numel() // 50)]  # distinct places
            flat[where] = specials[torch.randint(0, len(specials), where.shape, device="cuda")]
            x = x.to(dtype)
            hashes[f"input {dtype} {shape}"] = digest({"x": x})
            for kw in base + (extra if dtype == torch.bfloat16 or shape == (256, 192) else []):
                key = f"{dtype} {shape} {sorted((k, str(v)) for k, v in kw.items())}"
                try:
                    hashes[key] = digest(nvfp4(x, **kw))
                except Exception as error:
                    hashes[key] = f"error {type(error).__name__}: {error}"[:200]
    grouped = (torch.randn(8 * 512 * 1024, device="cuda") * 30).to(torch.bfloat16)
    for usage in ("rowwise", "columnwise", "both"):
        for block in ("1d", "2d"):
            for rows in ([512] * 8, [96, 1024, 0, 512, 32, 1440, 512, 480]):
                outputs = group_quantize(
                    grouped, num_members=8, first_dims=rows, last_dims=[1024] * 8, recipe="nvfp4", block=block,
                    usage=usage, x_dtype="bfloat16",
                )  # fmt: skip
                hashes[f"group {usage} {block} {rows}"] = digest(outputs)
    return hashes


def time() -> dict[str, float]:
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    amax = x.float().abs().max().reshape(1)
    grouped = (torch.randn(8 * 4096 * 7168, device="cuda") * 64).to(torch.bfloat16)
    cases = {
        "rowwise": lambda: nvfp4(x, usage="rowwise"),
        "columnwise": lambda: nvfp4(x, usage="columnwise"),
        "both": lambda: nvfp4(x, usage="both"),
        "both given": lambda: nvfp4(x, usage="both", amax_source="given", amax=amax, columnwise_amax=amax),
        "both 16x16": lambda: nvfp4(x, usage="both", block="16x16"),
        "both rht": lambda: nvfp4(x, usage="both", rht=True),
        "grouped both 8x[4096,7168]": lambda: group_quantize(
            grouped,
            num_members=8,
            first_dims=[4096] * 8,
            last_dims=[7168] * 8,
            recipe="nvfp4",
            block="1d",
            usage="both",
            x_dtype="bfloat16",
        ),
    }
    return {name: round(median_ms(call), 4) for name, call in cases.items()}


if __name__ == "__main__":
    os.environ["QCONFORM_FAST_PATH"] = "triton"
    tag, mode = sys.argv[1:3]
    out = Path(os.environ.get("OUT", "/tmp"))
    if mode == "check":
        hashes = check()
        (out / f"ab_hash_{tag}.json").write_text(json.dumps(hashes, indent=0))
        print(tag, "hashed", len(hashes))
    else:
        times = time()
        path = out / "ab_times.json"
        record = json.loads(path.read_text()) if path.exists() else {}
        for name, ms in times.items():
            record.setdefault(f"{name} {tag}", []).append(ms)
        path.write_text(json.dumps(record, indent=1))
        print(tag, times)
