"""Kernels to profile under ncu: NVFP4 given rowwise / both, NVFP4 computed both, MXFP8 both compact (fixed tile)."""
import importlib, os, sys
import torch
os.environ["QCONFORM_MX_TILE"] = "32x128x2x96"
nv = importlib.import_module("fast.quant.nvfp4")
mx = importlib.import_module("fast.quant.mx")
x = (torch.randn(8192, 8192, device="cuda") * 4).to(torch.bfloat16)
amax = x.abs().max().float().reshape(1)
which = sys.argv[1]
for _ in range(3):
    if which == "given_rowwise":
        nv.nvfp4(x, usage="rowwise", amax_source="given", amax=amax)
    elif which == "given_both":
        nv.nvfp4(x, usage="both", amax_source="given", amax=amax, columnwise_amax=amax)
    elif which == "mx_both":
        mx.mx(x, format="float8_e4m3fn", scale_rule="rceil", usage="both")
    elif which == "fp8b_both":
        from fast.quant import fp8_block
        fp8_block(x, format="float8_e4m3fn", block="1x128", usage="both")
    elif which == "fp8b_rowwise":
        from fast.quant import fp8_block
        fp8_block(x, format="float8_e4m3fn", block="1x128", usage="rowwise")
    elif which == "copy":
        y = torch.empty_like(x); y.copy_(x)
torch.cuda.synchronize()
