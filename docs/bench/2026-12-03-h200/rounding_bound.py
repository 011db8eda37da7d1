"""How much of NVFP4's quantize pass is the E2M1 rounding?  A bound, on the GPU, not a kernel to keep.

``python3 rounding_bound.py patch DIR``: copy ``fast/`` to ``DIR/fast`` with the E2M1 rounding made almost free
(wrong codes, same loads, scales, products, packing and stores): ``_e2m1_pairs``'s float16x2 sequence (53 PTX
instructions for 8 elements) becomes 4 ``xor`` and 3 ``prmt`` of the same inputs (7 for 8, about what sm_100's
``cvt.rn.satfinite.e2m1x2.f32`` and a byte pack cost), and ``_e2m1_rne_raw`` (the 16 x 16 tiles' shared float32
rounding, 8 instructions an element) a shift and an ``and``.

``python3 rounding_bound.py time TAG``: bfloat16 8192 x 8192 timed with ``tests/bench/conftest.py``'s ``median_ms``
(CUDA events, median), the copy bandwidth in the same process, appended to ``$OUT/bound_times.json``; run with the
tree under test first on ``PYTHONPATH`` and ``REPO`` the checkout.  ``rounding_bound.sh`` runs both trees, alternating.
"""

import importlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

FREE_PAIRS = (
    '"{\\n.reg .b32 x0, x1, x2, x3, y0, y1;\\n'
    "xor.b32 x0, $1, $5;\\nxor.b32 x1, $2, $6;\\nxor.b32 x2, $3, $7;\\nxor.b32 x3, $4, $8;\\n"
    'prmt.b32 y0, x0, x1, 0x7531;\\nprmt.b32 y1, x2, x3, 0x7531;\\nprmt.b32 $0, y0, y1, 0x6420;\\n}",\n        '
)


def patch(target: Path) -> None:
    shutil.copytree(Path(os.environ["REPO"]) / "fast", target / "fast", dirs_exist_ok=True)
    path = target / "fast" / "quant" / "nvfp4.py"
    source = path.read_text()
    start = source.index("tl.inline_asm_elementwise(", source.index("def _e2m1_pairs(low, high):"))
    start += len("tl.inline_asm_elementwise(\n        ")
    end = source.index('"=r,r,r,r,r,r,r,r,r",', start)
    source = source[:start] + FREE_PAIRS + source[end:]
    body = re.compile(r"(def _e2m1_rne_raw\(scaled\):\n    \"\"\".*?\"\"\"\n).*?(\n\n\n)", re.S)
    source, count = body.subn(r"\1    return (scaled.to(tl.int32, bitcast=True) >> 27) & 15\2", source)
    assert count == 1, "the _e2m1_rne_raw body was not found"
    path.write_text(source)


def time(tag: str) -> None:
    import torch

    sys.path.insert(0, os.environ["REPO"] + "/tests/bench")
    median_ms = importlib.import_module("conftest").median_ms
    nvfp4 = importlib.import_module("fast.quant.nvfp4").nvfp4
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    amax = x.float().abs().max().reshape(1)
    given = {"amax_source": "given", "amax": amax, "columnwise_amax": amax}
    cases = {
        "rowwise": {"usage": "rowwise"},
        "rowwise given": {"usage": "rowwise", "amax_source": "given", "amax": amax},
        "columnwise": {"usage": "columnwise"},
        "both": {"usage": "both"},
        "both given": {"usage": "both", **given},
        "both 16x16": {"usage": "both", "block": "16x16"},
        "both 16x16 given": {"usage": "both", "block": "16x16", **given},
    }
    record = {name: round(median_ms(lambda kw=kw: nvfp4(x, **kw)), 4) for name, kw in cases.items()}
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    record["copy GB/s"] = round(2 * src.numel() / median_ms(lambda: dst.copy_(src)) / 1e6, 1)
    codes = nvfp4(x, usage="both")
    record["codes sum"] = int(codes["data"].sum()) + int(codes["columnwise_data"].sum())
    out = Path(os.environ.get("OUT", "/tmp")) / "bound_times.json"
    times = json.loads(out.read_text()) if out.exists() else {}
    for name, value in record.items():
        times.setdefault(f"{name} {tag}", []).append(value)
    out.write_text(json.dumps(times, indent=1))
    print(tag, record)


if __name__ == "__main__":
    os.environ["QCONFORM_FAST_PATH"] = "triton"
    if sys.argv[1] == "patch":
        patch(Path(sys.argv[2]))
    else:
        time(sys.argv[2])
