"""SASS opcode histogram of the NVFP4 quantize kernel of both operands (Triton 3.6, sm_90), compiled without a GPU.

Run with Triton 3.6 first on the path (the GPU's version; its wheel unzipped to /tmp/t36site):
``PYTHONPATH=/tmp/t36site:. python docs/bench/2026-11-27i-h100/sass_hist.py``; ``TILE2D=1`` for 16 x 16 tiles,
``STAGES``, ``MAXNREG`` (default 128, the 1x16 launch's cap) and ``SASS_OUT`` (where the SASS goes).
"""

import collections
import importlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler import compile as triton_compile

from fast._triton import jit

kernel = jit(importlib.import_module("fast.quant.nvfp4")._nvfp4_quantize_kernel)
names = list(kernel.arg_names)
types = {name: "*i32" for name in names if name.endswith("_ptr")}
types |= {name: "*u8" for name in ("data_ptr", "scales_ptr", "columnwise_data_ptr", "columnwise_scales_ptr")}
types |= {"x_ptr": "*bf16", "tensor_scale_ptr": "*fp32", "columnwise_tensor_scale_ptr": "*fp32"}
constexprs = {
    "INPUT": 1,
    "ROWWISE": True,
    "COLUMNWISE": True,
    "TILE_2D": os.environ.get("TILE2D") == "1",
    "ROW_AMAX": False,
    "RHT": False,
    "ROUNDING": 0,
    "RANDOM_BITS": 0,
    "COLUMNWISE_RANDOM_BITS": 0,
    "RULE": 0,
    "ZERO_ENC": False,
    "BM": 128,
    "BK": 64,
    "EVEN": True,
    "SANITIZE": False,
    "SAME_AMAX": True,
    "STAGES": int(os.environ.get("STAGES", "1")),
    "SOURCES": 1,
    "STORE_EVICTION": "evict_first",
}
signature = {
    name: "constexpr" if index in kernel.constexprs else types.get(name, "i32") for index, name in enumerate(names)
}
attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in names if n.endswith("_ptr") or n in ("M", "K")}
source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
options = {"num_warps": 4, "enable_fp_fusion": False, "maxnreg": int(os.environ.get("MAXNREG", "128"))}
compiled = triton_compile(source, target=GPUTarget("cuda", 90, 32), options=options)
tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
with tempfile.TemporaryDirectory() as folder:
    cubin = Path(folder) / "kernel.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    sass = subprocess.run([tools / "nvdisasm", "-c", cubin], capture_output=True, text=True, check=True).stdout
    usage = subprocess.run([tools / "cuobjdump", "-res-usage", cubin], capture_output=True, text=True, check=True)
Path(os.environ.get("SASS_OUT", "/tmp/both.sass")).write_text(sass)
opcodes = collections.Counter()
for line in sass.splitlines():
    match = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
    if match:
        opcodes[match.group(1).split(".")[0]] += 1
total = sum(opcodes.values())
print(usage.stdout.strip().splitlines()[-1].strip())
print(f"{total} static SASS instructions, {total / 64:.2f} an element (64 a thread)")
for opcode, count in opcodes.most_common(40):
    print(f"{opcode:10s} {count}")
