import importlib
import sys

import torch

nv = importlib.import_module("fast.quant.nvfp4")
x = (torch.randn(8192, 8192, device="cuda") * 4).to(torch.bfloat16)
amax = x.abs().max().float().reshape(1)
CASES = {
    "given_rowwise": lambda: nv.nvfp4(x, usage="rowwise", amax_source="given", amax=amax),
    "given_columnwise": lambda: nv.nvfp4(x, usage="columnwise", amax_source="given", columnwise_amax=amax),
}
for _ in range(3):
    CASES[sys.argv[1]]()
torch.cuda.synchronize()
