"""Kernels profiled under ncu (``docs/bench/2026-11-26e-h100-ncu/README.md``): ``python3 prof.py <case>`` runs the
case three times on bfloat16 8192 x 8192; ncu's ``-s 2 -c 1`` picks the third launch of the kernel named."""

import importlib
import os
import sys

import torch

os.environ["QCONFORM_MX_TILE"] = "32x128x2x96"
nv = importlib.import_module("fast.quant.nvfp4")
mx = importlib.import_module("fast.quant.mx")
block = importlib.import_module("fast.quant.fp8_blockwise")
x = (torch.randn(8192, 8192, device="cuda") * 4).to(torch.bfloat16)
amax = x.abs().max().float().reshape(1)
CASES = {
    "given_rowwise": lambda: nv.nvfp4(x, usage="rowwise", amax_source="given", amax=amax),
    "given_both": lambda: nv.nvfp4(x, usage="both", amax_source="given", amax=amax, columnwise_amax=amax),
    "mx_both": lambda: mx.mx(x, format="float8_e4m3fn", scale_rule="rceil", usage="both"),
    "fp8b_both": lambda: block.fp8_block(x, format="float8_e4m3fn", block="1x128", usage="both"),
    "fp8b_rowwise": lambda: block.fp8_block(x, format="float8_e4m3fn", block="1x128", usage="rowwise"),
    "copy": lambda: torch.empty_like(x).copy_(x),
}
for _ in range(3):
    CASES[sys.argv[1]]()
torch.cuda.synchronize()
