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

# Experiments (not production code): a float-arithmetic rne_clamp and the stochastic kernel at other tilings.
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from fast._triton import jit  # noqa: E402


@triton.jit
def _int_rne_float(x_ptr, codes_ptr, n, LOWEST: tl.constexpr, HIGHEST: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    clamped = tl.minimum(tl.maximum(x, LOWEST), HIGHEST)
    rounded = (clamped + 12582912.0) - 12582912.0
    value = tl.where(x != x, 0, rounded.to(tl.int32))
    tl.store(codes_ptr + offsets, value.to(tl.uint8), mask=mask)


out = torch.empty(n, dtype=torch.uint8, device="cuda")
for lo, hi in ((-128.0, 127.0), (0.0, 15.0), (-8.0, 7.0)):
    print("int float-magic", lo, hi, ms(lambda lo=lo, hi=hi: _int_rne_float[(n // 4096,)](x, out, n, lo, hi, 4096)))
reference_codes = cast.int_(x, dtype="int8", mode="rne_clamp")["codes"]
_int_rne_float[(n // 4096,)](x, out, n, -128.0, 127.0, 4096)
print("float-magic int8 equals the kernel:", bool(torch.equal(out, reference_codes)))

kernel = jit(cast._cast_float_kernel)
codes = torch.empty(n, dtype=torch.uint8, device="cuda")
for block, warps in ((4096, 8), (2048, 8), (1024, 4), (2048, 4)):
    meta = dict(
        MANTISSA_BITS=3,
        BIAS=7,
        SIGN_SHIFT=24,
        SIGN_MASK=0x80,
        SIGNED_ZERO=True,
        OVERFLOW_CODE=0x7E,
        NAN_CODE=0x7F,
        NEGATIVE_NAN_CODE=0xFF,
        ROUNDING=2,
        RANDOM_BITS=32,
        INPUT=0,
        BLOCK=block,
        num_warps=warps,
    )
    r = r32b.view(torch.int32)
    print(
        "stochastic u32 block",
        block,
        "warps",
        warps,
        ms(lambda meta=meta, r=r: kernel[(n // meta["BLOCK"],)](x, r, codes, n, **meta)),
    )
