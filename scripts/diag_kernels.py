"""One-off timing diagnostics on the GPU (stochastic uint32 random bits, int rne_clamp), printed as a table."""

import os

import torch

os.environ["QCONFORM_FAST_PATH"] = "triton"
from fast import cast


def ms(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


n = 1 << 28
x = torch.randn(n, device="cuda") * 100
p = {"format": "float8_e4m3fn", "overflow": "saturate", "rounding": "stochastic"}
r8 = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
r32a = torch.randint(0, 256, (4 * n,), dtype=torch.uint8, device="cuda").view(torch.uint32)
r32b = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32, device="cuda").view(torch.uint32)
print("stochastic uint8", ms(lambda: cast.fp8(x, **p, random_bits=r8)))
print("stochastic uint32 (bytes view)", ms(lambda: cast.fp8(x, **p, random_bits=r32a)))
print("stochastic uint32 (int32 view)", ms(lambda: cast.fp8(x, **p, random_bits=r32b)))
print("rne", ms(lambda: cast.fp8(x, format="float8_e4m3fn", overflow="saturate")))
for d in cast.INT_DTYPES:
    for m in cast.INT_MODES:
        print("int", d, m, ms(lambda d=d, m=m: cast.int_(x, dtype=d, mode=m)))
print("copy", ms(lambda: x.clone()))
