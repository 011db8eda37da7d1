"""Time a set of quantizer calls with whichever ``fast`` is first on the path; write times and output hashes."""

import hashlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "tests", "bench"))
from conftest import median_ms  # the benchmarks' device timing

from fast.group import quantize as gquantize
from fast.quant.fp8 import fp8_delayed, fp8_tensor
from fast.quant.fp8_block import fp8_block
from fast.quant.mx import mx
from fast.quant.nvfp4 import nvfp4

tag = sys.argv[1]
os.environ["QCONFORM_FAST_PATH"] = "triton"
g = torch.Generator(device="cuda").manual_seed(1)
x = (torch.randn(8192, 8192, device="cuda", generator=g) * 4).to(torch.bfloat16)
xs = x.clone()
xs[5, 7] = float("nan")
xs[300, 9] = float("inf")
xs[130:146, 0:64] = 0
xs[900, 10] = -30000.0
amax = x.float().abs().max().reshape(1)
rb = torch.randint(0, 256, (8192, 8192), device="cuda", generator=g, dtype=torch.uint8)
hist = torch.zeros(16, device="cuda")
hist[0] = 10.0
scale = torch.ones(1, device="cuda")
E4 = "float8_e4m3fn"
gx = (torch.randn(8 * 4096 * 7168, device="cuda", generator=g) * 64).to(torch.bfloat16)
RAGGED = [1056, 8160, 2048, 4096, 6144, 3072, 5120, 3072]


def grouped(recipe, block, usage, rows):
    return lambda inp: gquantize(
        gx,
        num_members=8,
        first_dims=rows,
        last_dims=[7168] * 8,
        recipe=recipe,
        block=block,
        usage=usage,
        x_dtype="bfloat16",
    )


cases = {
    "nvfp4 rowwise": lambda t: nvfp4(t, usage="rowwise"),
    "nvfp4 columnwise": lambda t: nvfp4(t, usage="columnwise"),
    "nvfp4 both": lambda t: nvfp4(t, usage="both"),
    "nvfp4 both 16x16": lambda t: nvfp4(t, usage="both", block="16x16"),
    "nvfp4 rowwise stochastic": lambda t: nvfp4(t, usage="rowwise", rounding="stochastic", random_bits=rb),
    "nvfp4 columnwise stochastic": lambda t: nvfp4(
        t, usage="columnwise", rounding="stochastic", columnwise_random_bits=rb
    ),
    "nvfp4 both stochastic": lambda t: nvfp4(
        t, usage="both", rounding="stochastic", random_bits=rb, columnwise_random_bits=rb
    ),
    "nvfp4 columnwise RHT": lambda t: nvfp4(t, usage="columnwise", rht=True),
    "nvfp4 both RHT": lambda t: nvfp4(t, usage="both", rht=True),
    "nvfp4 both RHT 16x16": lambda t: nvfp4(t, usage="both", rht=True, block="16x16"),
    "nvfp4 given rowwise": lambda t: nvfp4(t, usage="rowwise", amax_source="given", amax=amax),
    "nvfp4 given columnwise": lambda t: nvfp4(t, usage="columnwise", amax_source="given", columnwise_amax=amax),
    "nvfp4 given both": lambda t: nvfp4(t, usage="both", amax_source="given", amax=amax, columnwise_amax=amax),
    "mxfp8 rowwise": lambda t: mx(t, format=E4, scale_rule="rceil", usage="rowwise"),
    "mxfp8 columnwise": lambda t: mx(t, format=E4, scale_rule="rceil", usage="columnwise"),
    "mxfp8 both compact": lambda t: mx(t, format=E4, scale_rule="rceil", usage="both"),
    "mxfp8 both swizzled": lambda t: mx(t, format=E4, scale_rule="rceil", usage="both", scale_layout="swizzled"),
    "mxfp8 both 2d": lambda t: mx(t, format=E4, scale_rule="rceil", usage="both", blocks="2d"),
    "mxfp6 rowwise": lambda t: mx(t, format="float6_e2m3fn", scale_rule="rceil", usage="rowwise"),
    "mxfp4 rowwise": lambda t: mx(t, format="float4_e2m1fn", scale_rule="floor", usage="rowwise"),
    "mxfp4 both": lambda t: mx(t, format="float4_e2m1fn", scale_rule="floor", usage="both"),
    "fp8_block 1x128 rowwise": lambda t: fp8_block(t, format=E4, block="1x128", usage="rowwise"),
    "fp8_block 1x128 columnwise": lambda t: fp8_block(t, format=E4, block="1x128", usage="columnwise"),
    "fp8_block 1x128 both": lambda t: fp8_block(t, format=E4, block="1x128", usage="both"),
    "fp8_block 128x128 both": lambda t: fp8_block(t, format=E4, block="128x128", usage="both"),
    "fp8_tensor rowwise": lambda t: fp8_tensor(t, format=E4, usage="rowwise"),
    "fp8_tensor both": lambda t: fp8_tensor(t, format=E4, usage="both"),
    "fp8_delayed rowwise": lambda t: fp8_delayed(t, hist, scale, format=E4, usage="rowwise"),
    "group nvfp4 both": grouped("nvfp4", "1d", "both", [4096] * 8),
    "group nvfp4 both ragged": grouped("nvfp4", "1d", "both", RAGGED),
    "group nvfp4 rowwise": grouped("nvfp4", "1d", "rowwise", [4096] * 8),
    "group mxfp8 both": grouped("mxfp8", "1d", "both", [4096] * 8),
    "group fp8_block both": grouped("fp8_block", "1d", "both", [4096] * 8),
    "group fp8_tensor both": grouped("fp8_tensor", "none", "both", [4096] * 8),
}
only = sys.argv[2].split(",") if len(sys.argv) > 2 else None
hashes, times = {}, {}
for name, f in cases.items():
    if only and not any(o in name for o in only):
        continue
    h = hashlib.sha256()
    for inp in (x, xs):
        out = f(inp)
        for k in sorted(out):
            v = out[k]
            if torch.is_tensor(v):
                h.update(k.encode())
                h.update(v.contiguous().view(torch.uint8).cpu().numpy().tobytes() if v.numel() else b"")
    hashes[name] = h.hexdigest()
    times[name] = min(median_ms(lambda f=f: f(x)) for _ in range(3))
with open(os.path.join(os.environ.get("OUT", "/tmp"), f"ef_{tag}.json"), "w") as out_file:
    json.dump({"hashes": hashes, "times": times}, out_file, indent=1)
print(tag, "done", len(times))
