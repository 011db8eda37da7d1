"""GPU timing diagnostics of issue #3's open kernels: candidates side by side, printed as one table.

Groups, all on 2^28 elements beside the device-to-device copy bandwidth of a 1 GiB float32 buffer
measured in the same run (bytes read + written):

- ``sr32``: ``cast.fp8`` e4m3fn saturate with stochastic rounding and uint32 random bits (9 bytes per
  element): the production launch (1024 elements per program since this script's first run), its
  kernel at other tilings, an experimental copy of it with cache hints, two tiles per program and
  int64 offsets, the random bits 1 MiB + 4 KiB + 128 B further into their buffer (DRAM aliasing of
  the two 1 GiB streams?), and a kernel that only moves the same bytes (the roofline of this access
  pattern); uint8 random bits for comparison.
- ``sr8``: the same kernel with uint8 random bits at other tilings.
- ``decode``: ``decode.fp6`` / ``fp4`` (production: range flag by a plain predicated store, then one
  host sync to read it) against copies of the kernel alone raising the flag by ``atomic_or``
  (acq_rel, the former kernel; relaxed) or by a per-program reduction; ``decode.fp8`` (no flag).
- ``pack``: ``pack.nibbles`` (production: flag by a plain store, then a host sync) against the kernel
  alone with the former ``atomic_or`` flag or a store, larger tiles, and 4 codes read as one int32.

Every candidate's output is compared bit for bit with the production path's (column ``equal``);
``regs`` / ``spills`` come from the compiled kernel.  Times: CUDA events, median of 20 after 5
warm-up calls.  Experiments, not production code.
Usage: ``python scripts/diag_kernels.py [--groups sr32,sr8,decode,pack] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch

os.environ["QCONFORM_FAST_PATH"] = "triton"
os.environ.pop("TRITON_INTERPRET", None)

from fast import cast, decode, pack
from fast._triton import float32_bits, jit, round_to_code, tl, triton

N = 1 << 28
ROWS: list[dict[str, Any]] = []


def median_ms(fn: Callable[[], object], warmup: int = 5, reps: int = 20) -> float:
    for _ in range(warmup):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(start.elapsed_time(end) for start, end in events)


def row(group: str, name: str, fn: Callable[[], Any], bytes_moved: int, equal: Any = "", compiled: Any = None) -> None:
    ms = median_ms(fn)
    gb_per_s = bytes_moved / ms / 1e6
    regs = getattr(compiled, "n_regs", "")
    spills = getattr(compiled, "n_spills", "")
    ROWS.append(
        {
            "group": group,
            "name": name,
            "ms": ms,
            "gb_per_s": gb_per_s,
            "of_copy": gb_per_s / COPY_GB_PER_S,
            "equal": equal,
            "regs": regs,
            "spills": spills,
        }
    )
    print(
        f"{group:7} {name:48} {ms:7.3f} ms {gb_per_s:7.0f} GB/s {100 * gb_per_s / COPY_GB_PER_S:6.1f}%"
        f"  equal={equal!s:5} regs={regs} spills={spills}",
        flush=True,
    )


# %% Experimental kernels


def _sr_variant_kernel(
    x_ptr,
    random_ptr,
    codes_ptr,
    n_elements,
    BLOCK: tl.constexpr,
    TILES: tl.constexpr,
    WIDE: tl.constexpr,
    LOAD_CACHE: tl.constexpr,
    LOAD_EVICTION: tl.constexpr,
    STORE_CACHE: tl.constexpr,
):
    """fp8 e4m3fn saturate stochastic (uint32 bits): TILES consecutive tiles per program, hints as given."""
    pid = tl.program_id(0).to(tl.int64) if WIDE else tl.program_id(0)
    for tile in tl.static_range(TILES):
        offsets = (pid * TILES + tile) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n_elements
        raw = tl.load(x_ptr + offsets, mask=mask, cache_modifier=LOAD_CACHE, eviction_policy=LOAD_EVICTION)
        random = tl.load(random_ptr + offsets, mask=mask, cache_modifier=LOAD_CACHE, eviction_policy=LOAD_EVICTION)
        signed, bits = float32_bits(raw, 0)
        code = round_to_code(bits, signed, random, 3, 7, 24, 0x80, True, 0x7E, 0x7F, 0xFF, 2, 32)
        tl.store(codes_ptr + offsets, code.to(tl.uint8), mask=mask, cache_modifier=STORE_CACHE)


def _move_kernel(x_ptr, random_ptr, codes_ptr, n_elements, BLOCK: tl.constexpr):
    """Reads 4 + 4 bytes and writes 1 per element, with one xor: the same traffic, almost no work."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    a = tl.load(x_ptr + offsets, mask=mask).to(tl.int32, bitcast=True)
    b = tl.load(random_ptr + offsets, mask=mask)
    tl.store(codes_ptr + offsets, (a ^ b).to(tl.uint8), mask=mask)


def _decode_flag_kernel(
    codes_ptr,
    values_ptr,
    flag_ptr,
    n_elements,
    WIDTH: tl.constexpr,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SUBNORMAL_UNIT: tl.constexpr,
    FLAG: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """decode.fp6/fp4 (finite formats) with the range flag raised by FLAG: 0 atomic acq_rel, 1 relaxed, 2 reduction."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    code = tl.load(codes_ptr + offsets, mask=mask).to(tl.int32)
    above = code >> WIDTH
    if FLAG == 0:
        tl.atomic_or(flag_ptr + offsets * 0, above, mask=mask & (above != 0))
    elif FLAG == 1:
        tl.atomic_or(flag_ptr + offsets * 0, above, mask=mask & (above != 0), sem="relaxed")
    else:
        bad = tl.max(tl.where(mask, above, 0), axis=0)
        tl.store(flag_ptr, 1, mask=bad != 0)
    magnitude = code & ((1 << SIGN_SHIFT) - 1)
    exponent = magnitude >> MANTISSA_BITS
    mantissa = magnitude & ((1 << MANTISSA_BITS) - 1)
    normal = ((exponent + (127 - BIAS)) << 23) | (mantissa << (23 - MANTISSA_BITS))
    tiny = (mantissa.to(tl.float32) * SUBNORMAL_UNIT).to(tl.int32, bitcast=True)
    bits = tl.where(exponent == 0, tiny, normal) | ((code >> SIGN_SHIFT) << 31)
    tl.store(values_ptr + offsets, bits.to(tl.float32, bitcast=True), mask=mask)


def _pack_variant_kernel(words_ptr, packed_ptr, flag_ptr, n_words, ATOMIC: tl.constexpr, BLOCK: tl.constexpr):
    """pack.nibbles low_first from int16 words; ATOMIC: the flag by atomic_or (the former kernel) or a plain store."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_words
    word = tl.load(words_ptr + offsets, mask=mask, other=0).to(tl.int32) & 0xFFFF
    above = word & 0xF0F0
    if ATOMIC:
        tl.atomic_or(flag_ptr + offsets * 0, above, mask=mask & (above != 0))
    else:
        tl.store(flag_ptr + offsets * 0, 1, mask=mask & (above != 0))
    tl.store(packed_ptr + offsets, ((word & 0xF) | ((word >> 4) & 0xF0)).to(tl.uint8), mask=mask)


def _pack_quad_kernel(quads_ptr, pairs_ptr, flag_ptr, n_quads, BLOCK: tl.constexpr):
    """pack.nibbles low_first from int32 words of 4 codes, two packed bytes stored as one int16."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_quads
    quad = tl.load(quads_ptr + offsets, mask=mask, other=0)
    tl.store(flag_ptr + offsets * 0, 1, mask=mask & (((quad >> 4) & 0x0F0F0F0F) != 0))
    low = (quad & 0xF) | ((quad >> 4) & 0xF0)
    high = ((quad >> 16) & 0xF) | ((quad >> 20) & 0xF0)
    tl.store(pairs_ptr + offsets, (low | (high << 8)).to(tl.int16), mask=mask)


# %% Groups


def sr32() -> None:
    x = torch.randn(N, device="cuda") * 100
    r32 = torch.randint(-(2**31), 2**31 - 1, (N,), dtype=torch.int32, device="cuda")
    r8 = torch.randint(0, 256, (N,), dtype=torch.uint8, device="cuda")
    p = {"format": "float8_e4m3fn", "overflow": "saturate", "rounding": "stochastic"}
    expected = cast.fp8(x, **p, random_bits=r32.view(torch.uint32))["codes"]
    row("sr32", "production (uint32 bits)", lambda: cast.fp8(x, **p, random_bits=r32.view(torch.uint32)), 9 * N)
    row("sr32", "production, uint8 bits (6 B/element)", lambda: cast.fp8(x, **p, random_bits=r8), 6 * N)
    shifted = torch.empty(N + (1 << 20) // 4 + 1056, dtype=torch.int32, device="cuda")[(1 << 20) // 4 + 1056 :]
    shifted.copy_(r32)
    row(
        "sr32",
        "production, bits +1 MiB+4 KiB+128 B",
        lambda: cast.fp8(x, **p, random_bits=shifted.view(torch.uint32)),
        9 * N,
        torch.equal(cast.fp8(x, **p, random_bits=shifted.view(torch.uint32))["codes"], expected),
    )
    codes = torch.empty(N, dtype=torch.uint8, device="cuda")
    kernel = jit(cast._cast_float_kernel)
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
    )
    for block, warps in ((512, 4), (1024, 4), (1024, 8), (2048, 4), (2048, 8), (2048, 16), (4096, 8), (4096, 16)):
        compiled = kernel[(N // block,)](x, r32, codes, N, **meta, BLOCK=block, num_warps=warps)
        row(
            "sr32",
            f"kernel BLOCK={block} warps={warps}",
            lambda b=block, w=warps: kernel[(N // b,)](x, r32, codes, N, **meta, BLOCK=b, num_warps=w),
            9 * N,
            torch.equal(codes, expected),
            compiled,
        )
    variant = jit(_sr_variant_kernel)
    hints = {"plain": ("", "", ""), "evict_first": ("", "evict_first", ""), "cg loads, cs store": (".cg", "", ".cs")}
    for block, warps, tiles, wide, hint in (
        (2048, 8, 1, False, "plain"),
        (2048, 8, 1, False, "evict_first"),
        (2048, 8, 1, False, "cg loads, cs store"),
        (1024, 4, 1, False, "evict_first"),
        (1024, 4, 2, False, "plain"),
        (2048, 8, 2, False, "plain"),
        (2048, 8, 1, True, "plain"),
    ):
        cache, eviction, store = hints[hint]
        kw = dict(BLOCK=block, TILES=tiles, WIDE=wide, LOAD_CACHE=cache, LOAD_EVICTION=eviction, STORE_CACHE=store)
        grid = (N // (block * tiles),)
        codes.zero_()
        compiled = variant[grid](x, r32, codes, N, **kw, num_warps=warps)
        row(
            "sr32",
            f"variant B={block} w={warps} tiles={tiles} int64={wide} {hint}",
            lambda g=grid, k=kw, w=warps: variant[g](x, r32, codes, N, **k, num_warps=w),
            9 * N,
            torch.equal(codes, expected),
            compiled,
        )
    move = jit(_move_kernel)
    for block, warps in ((2048, 8), (4096, 8)):
        compiled = move[(N // block,)](x, r32, codes, N, BLOCK=block, num_warps=warps)
        row(
            "sr32",
            f"bytes only (load x, r; store x^r) B={block} w={warps}",
            lambda b=block, w=warps: move[(N // b,)](x, r32, codes, N, BLOCK=b, num_warps=w),
            9 * N,
            "",
            compiled,
        )


def decodes() -> None:
    flag_kernel = jit(_decode_flag_kernel)
    for format, width, fn in (("float6_e2m3fn", 6, decode.fp6), ("float4_e2m1fn", 4, decode.fp4)):
        codes = torch.randint(0, 1 << width, (N,), dtype=torch.uint8, device="cuda")
        expected = fn(codes, format=format)["values"]
        row("decode", f"{format} production (flag by store)", lambda c=codes, f=fn, fm=format: f(c, format=fm), 5 * N)
        fmt = decode._FORMATS[format]
        values = torch.empty_like(expected)
        flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        meta = dict(
            WIDTH=width,
            MANTISSA_BITS=fmt.mantissa_bits,
            BIAS=fmt.bias,
            SIGN_SHIFT=fmt.exponent_bits + fmt.mantissa_bits,
            SUBNORMAL_UNIT=2.0 ** (1 - fmt.bias - fmt.mantissa_bits),
            BLOCK=4096,
        )
        for flag_id, name in ((0, "atomic_or acq_rel (former)"), (1, "atomic_or relaxed"), (2, "per-program max")):
            values.zero_()
            compiled = flag_kernel[(N // 4096,)](codes, values, flag, N, **meta, FLAG=flag_id, num_warps=8)
            row(
                "decode",
                f"{format} flag by {name}",
                lambda c=codes, v=values, f=flag, m=meta, i=flag_id: flag_kernel[(N // 4096,)](
                    c, v, f, N, **m, FLAG=i, num_warps=8
                ),
                5 * N,
                torch.equal(values.view(torch.int32), expected.view(torch.int32)),
                compiled,
            )
    codes = torch.randint(0, 256, (N,), dtype=torch.uint8, device="cuda")
    row("decode", "float8_e4m3fn production", lambda: decode.fp8(codes, format="float8_e4m3fn"), 5 * N)


def packs() -> None:
    codes = torch.randint(0, 16, (1 << 14, 1 << 14), dtype=torch.uint8, device="cuda")
    expected = pack.nibbles(codes, order="low_first")["packed"]
    row("pack", "production low_first (flag by store)", lambda: pack.nibbles(codes, order="low_first"), 3 * N // 2)
    words = codes.view(-1).view(torch.int16)
    out = torch.empty(N // 2, dtype=torch.uint8, device="cuda")
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    variant = jit(_pack_variant_kernel)
    for atomic, block, warps in ((True, 4096, 4), (False, 4096, 4), (False, 8192, 8), (False, 16384, 8)):
        out.zero_()
        compiled = variant[(N // 2 // block,)](words, out, flag, N // 2, ATOMIC=atomic, BLOCK=block, num_warps=warps)
        row(
            "pack",
            f"int16 words, {'atomic_or' if atomic else 'store'} flag, B={block} w={warps}",
            lambda a=atomic, b=block, w=warps: variant[(N // 2 // b,)](
                words, out, flag, N // 2, ATOMIC=a, BLOCK=b, num_warps=w
            ),
            3 * N // 2,
            torch.equal(out, expected.view(-1)),
            compiled,
        )
    quad = jit(_pack_quad_kernel)
    quads, pairs = codes.view(-1).view(torch.int32), out.view(torch.int16)
    for block, warps in ((4096, 4), (8192, 8)):
        out.zero_()
        compiled = quad[(N // 4 // block,)](quads, pairs, flag, N // 4, BLOCK=block, num_warps=warps)
        row(
            "pack",
            f"int32 quads, store flag, B={block} w={warps}",
            lambda b=block, w=warps: quad[(N // 4 // b,)](quads, pairs, flag, N // 4, BLOCK=b, num_warps=w),
            3 * N // 2,
            torch.equal(out, expected.view(-1)),
            compiled,
        )
    print("pack flag stayed 0 on valid codes:", int(flag.item()) == 0)


def copy_gb_per_s() -> float:
    src = torch.randn(N, device="cuda")
    dst = torch.empty_like(src)
    return 2 * 4 * N / median_ms(lambda: dst.copy_(src)) / 1e6


def sr8() -> None:
    """The same kernel with uint8 random bits (6 bytes per element) at other tilings."""
    x = torch.randn(N, device="cuda") * 100
    r8 = torch.randint(0, 256, (N,), dtype=torch.uint8, device="cuda")
    p = {"format": "float8_e4m3fn", "overflow": "saturate", "rounding": "stochastic"}
    expected = cast.fp8(x, **p, random_bits=r8)["codes"]
    row("sr8", "production (uint8 bits)", lambda: cast.fp8(x, **p, random_bits=r8), 6 * N)
    codes = torch.empty(N, dtype=torch.uint8, device="cuda")
    kernel = jit(cast._cast_float_kernel)
    meta = dict(MANTISSA_BITS=3, BIAS=7, SIGN_SHIFT=24, SIGN_MASK=0x80, SIGNED_ZERO=True, OVERFLOW_CODE=0x7E,
                NAN_CODE=0x7F, NEGATIVE_NAN_CODE=0xFF, ROUNDING=2, RANDOM_BITS=8, INPUT=0)  # fmt: skip
    for block, warps in ((1024, 8), (2048, 8), (2048, 16), (4096, 8), (4096, 16)):
        codes.zero_()
        compiled = kernel[(N // block,)](x, r8, codes, N, **meta, BLOCK=block, num_warps=warps)
        row(
            "sr8",
            f"kernel BLOCK={block} warps={warps}",
            lambda b=block, w=warps: kernel[(N // b,)](x, r8, codes, N, **meta, BLOCK=b, num_warps=w),
            6 * N,
            torch.equal(codes, expected),
            compiled,
        )


GROUPS: dict[str, Callable[[], None]] = {"sr32": sr32, "sr8": sr8, "decode": decodes, "pack": packs}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="sr32,decode,pack", help=f"comma-separated, of {list(GROUPS)}")
    parser.add_argument("--json", help="also write every row here")
    args = parser.parse_args()
    COPY_GB_PER_S = copy_gb_per_s()
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
        f"copy {COPY_GB_PER_S:.0f} GB/s (1 GiB float32, read + write)"
    )
    for group in args.groups.split(","):
        GROUPS[group]()
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"copy_gb_per_s": COPY_GB_PER_S, "rows": ROWS}, f, indent=1)
