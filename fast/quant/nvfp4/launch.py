"""NVFP4 launches: tilings per variant, L2 cache policy, the amax and quantize passes, and the Triton path
(:func:`quantize_triton`), which picks the Gluon columnwise kernel (``fast.quant.nvfp4.gluon``) where it applies."""

from __future__ import annotations

import contextlib
import types
from typing import Any, NamedTuple

import torch

from fast._triton import (
    jit,
    triton,
)
from fast.quant.nvfp4.kernels import (
    nvfp4_amax_kernel,
    nvfp4_quantize_kernel,
    nvfp4_rowwise_kernel,
    nvfp4_tensor_amax_kernel,
)
from fast.quant.nvfp4.settings import INPUT_DTYPES, RANDOM_DTYPES, RULE_IDS, Settings

# %% Launcher


class Launch(NamedTuple):
    """One kernel's launch shape: tile rows, tile columns (elements; words for the flat amax pass), warps,
    resident programs per SM, whether the registers are capped at what keeps them resident (as ragged launches
    always are, see :func:`launch_options`), and the quantize kernel's load stages (``tl.range``'s ``num_stages``:
    with 2 or more, each program's tile loads go ahead ``stages - 1`` tiles through shared memory, ``cp.async`` on
    sm_90)."""

    rows: int
    cols: int
    num_warps: int
    programs_per_sm: int
    register_cap: bool = False
    stages: int = 1


class Tiling(NamedTuple):
    """The launch shapes of both passes."""

    quantize: Launch
    amax: Launch


_ROWWISE = Tiling(quantize=Launch(2, 2048, 4, 8), amax=Launch(1, 4096, 8, 4))
"""Rowwise operand only (``nvfp4_rowwise_kernel``): 2 x 2048 tiles (each thread half of two blocks of 16
of each of 2 rows), 4 warps, 8 programs per SM (4 x 2048 tiles and 4 per SM: 6% slower on the H200); the
flat amax pass in chunks of 4096 words (16 per thread), 8 warps."""
_BOTH = Tiling(quantize=Launch(128, 64, 4, 2), amax=Launch(1, 4096, 8, 4))
"""Both operands (``nvfp4_quantize_kernel``): 128 x 64 tiles, 4 warps (each thread 8 rows of 8 columns,
167 registers in Triton 3.6 for sm_90), 2 programs per SM.  A tile gives each row of the columnwise outputs
64 bytes of codes and 8 of scales: the transposed stores of 16-row tiles (8 and 1 bytes) took 60% of the
pass (H100, bfloat16 8192 x 8192: both 0.298 -> 0.191 ms, 16x16 0.287 -> 0.169, RHT 0.486 -> 0.314; 64 x 64
tiles with 2 warps were level for both).  The tile amax pass (row-scaled amax, Hadamard transform) uses the
same tiles."""
_BOTH_3 = _BOTH._replace(quantize=Launch(128, 64, 4, 3))
"""Both operands in 16 x 16 tiles from 16-bit input with round to nearest, with RHT or without: 167-168 registers
in Triton 3.6 (sm_90), so 3 programs of 4 warps fit an SM uncapped (H100, bfloat16 8192 x 8192: 0.1562 -> 0.1527 ms,
with RHT 0.1996 -> 0.1855; with RHT the 168-register cap made it slower, 0.2214).  1x16 blocks in the same 168
registers since the float16x2 rounding (0.1851 -> 0.1696 ms at 3 programs) take ``_BOTH_4_CAPPED`` or
``_BOTH_3_CAPPED``, and whole 16 x 16 tiles without RHT ``_BOTH_PIPELINED``; ragged shapes are capped anyway
(``launch_options``' ``resident``: the edge tiles' masked copy of the body, see :func:`quantize_tile`).  Row
amaxes and RHT in 1x16 blocks take 226-255 registers (2 programs)."""
_BOTH_3_CAPPED = _BOTH._replace(quantize=Launch(128, 64, 4, 3, register_cap=True))
"""Both operands in 1x16 blocks, per-tensor amax, no RHT: 3 programs per SM under the 168-register cap.  From float32
(228 registers uncapped; Triton 3.6 for sm_90: no spills capped) and with stochastic rounding (193; 5 spilled words)
the cap is what lets 3 fit (H100, 8192 x 8192: float32 0.2526 -> 0.2430 ms, bfloat16 stochastic 0.2752 -> 0.2417;
3 programs uncapped: 0.2874, 0.3321).  16-bit input with round to nearest fits uncapped (168) and gained by the cap
too (0.1677 -> 0.1659 ms, given amax 0.1140 -> 0.1129; 16 x 16 tiles did not: 0.1526 -> 0.1513, given 0.1055 ->
0.1065); it keeps this tiling on ragged single shapes only (else ``_BOTH_4_CAPPED``).  With RHT capped 3 per SM
were slower (0.2215 -> 0.2334, and with stochastic rounding 0.3163 -> 0.3377), so RHT in 1x16 blocks keeps
``_BOTH``, as does stochastic rounding of float32 input (not measured capped).
``fast.group``'s grouped kernel takes 168 registers and ran this tiling for 16-bit input before ``_BOTH_4_CAPPED``:
on 8 uneven experts x 7168 (H100, bfloat16) 0.617 ms at 3 programs against 0.639 ms at 2."""
_BOTH_4_CAPPED = _BOTH._replace(quantize=Launch(128, 64, 4, 4, register_cap=True))
"""Both operands in 1x16 blocks from 16-bit input, round to nearest, per-tensor amax, no RHT, whole 128 x 64 tiles
(and ``fast.group``'s grouped kernel): 4 programs per SM under the 128-register cap (Triton 3.6 for sm_90: no
spills, but one spilled word with the ``torchao`` rule's divisions).  With 3 programs the quantize pass stalls on
its tile loads (ncu, given amax: 0.60 instructions issued a cycle per scheduler, 2.7 active warps of 3); 4 hide
more of it.  H100, bfloat16: 8192 x 8192 both 0.1658 -> 0.1614 ms, given amax 0.1125 -> 0.1090; [32768, 7168]
0.5717 -> 0.5611; grouped 8 x [4096, 7168] 0.5773 -> 0.5610, uneven experts 0.6088 -> 0.5942; but a ragged single
shape (8176 x 8208) 0.2213 -> 0.2345, so ragged single shapes keep ``_BOTH_3_CAPPED`` (64 x 64 tiles on 2 warps at
8 per SM: 0.1648 ms, 128 x 32: 0.2169; raw in ``docs/bench/2026-11-27b-h100-nvfp4-occupancy.json``)."""
_BOTH_PIPELINED = _BOTH._replace(quantize=Launch(128, 64, 4, 2, stages=3))
"""Both operands in 16 x 16 tiles from 16-bit input, round to nearest, no RHT, whole tiles: 2 programs per SM, each
loading two tiles ahead (3 stages; 230-232 registers in Triton 3.6 for sm_90).  H100, bfloat16: 8192 x 8192
0.1533 -> 0.1409 ms, given amax 0.1057 -> 0.1014; [32768, 7168] 0.5762 -> 0.4894, but given amax 0.3993 -> 0.4124
(2 stages slower, 4 and 5 level or slower; 4 programs under the 128-register cap 0.1759).  Pipelined loads lost
elsewhere: 1x16 blocks 0.1612 ms (level with ``_BOTH_4_CAPPED``, given amax slower), RHT 0.2149 -> 0.2631,
stochastic rounding 0.2407 -> 0.2553, the columnwise operand alone 0.1197 -> 0.1738.  Ragged shapes and
``fast.group``'s grouped kernel (whose loop crosses members) keep ``_BOTH_3``."""
_COLUMNWISE = _BOTH._replace(quantize=Launch(128, 64, 4, 4))
"""The columnwise operand alone: 128 x 64 tiles, 4 warps, 4 programs per SM (128 registers in Triton 3.6 for sm_90
with a block's 16 rows in a thread, see :func:`_column_tile`; H100, bfloat16 8192 x 8192: 0.1198 ms, 0.1285 with
128 x 32 tiles on 2 warps and 8 programs, 0.1229 with 3 programs; 0.251 with the 16 x 128 tiles of before)."""
_ROWWISE_STOCHASTIC = _ROWWISE._replace(quantize=Launch(2, 4096, 8, 4))
"""The rowwise operand alone, stochastic rounding: 2 x 4096 tiles, 8 warps, 4 programs per SM (H100, bfloat16 8192
x 8192 with uint8 random bits: 0.1367 ms; 0.1553 with ``_ROWWISE``'s tiles, 0.1413 with 4 x 2048, 0.1396 with 4 x
1024 on 2 warps, 0.1442-0.1708 with five others).  With a columnwise operand stochastic rounding takes the round to
nearest tilings since :func:`e2m1_stochastic` (on the tiles of then: both 0.2758 ms, columnwise 0.1600, both with
RHT 0.3792, against 0.3433, 0.2568 and 1.4656 ms on the 64 x 64 tiles that the generic rounding needed)."""
_WIDE_RANDOM = _BOTH._replace(quantize=Launch(64, 64, 4, 2))
"""uint32 random bits with a columnwise operand: 32 elements a thread, since the generic rounding of
``round_to_code`` (:func:`e2m1_stochastic` for 32 bits) spills registers at 64 (Triton 3.6 for sm_90, both
operands: 255 registers and 1176 bytes of stack on 128 x 64 tiles)."""


def select_tiling(
    s: Settings,
    device_: torch.device,
    shape: tuple[int, int],
    dtype: torch.dtype,
    wide_random: bool = False,
    grouped: bool = False,
) -> Tiling:
    """The launch shapes of these settings for inputs of ``shape`` (the largest member's, ``grouped``: for
    ``fast.group``'s grouped kernel) and type ``dtype`` on ``device_`` (``wide_random``: some random bits are uint32).
    Triton's interpreter pays per program, not per element: large CPU inputs take 128-row tiles there (the same code,
    other constexprs; small inputs keep the GPU's tiles, which the CPU tests check)."""
    rows, cols = shape
    sixteen_bit = dtype in (torch.bfloat16, torch.float16)
    whole = rows % _BOTH.quantize.rows == 0 and cols % _BOTH.quantize.cols == 0  # the 128 x 64 tiles
    if not s.columnwise:
        tiling = _ROWWISE_STOCHASTIC if s.rounding == "stochastic" and not wide_random else _ROWWISE
    elif wide_random:
        tiling = _WIDE_RANDOM
    elif not s.rowwise:
        tiling = _COLUMNWISE
    elif s.amax_scope == "row":
        tiling = _BOTH
    elif sixteen_bit and s.rounding == "rne" and s.block == "16x16":
        tiling = _BOTH_PIPELINED if whole and not s.rht and not grouped else _BOTH_3
    elif sixteen_bit and s.rounding == "rne" and s.block == "1x16" and not s.rht and (whole or grouped):
        tiling = _BOTH_4_CAPPED
    elif s.block == "1x16" and not s.rht and (sixteen_bit or s.rounding == "rne"):
        tiling = _BOTH_3_CAPPED
    else:
        tiling = _BOTH
    if device_.type != "cuda" and rows >= 1024:
        tiling = tiling._replace(quantize=tiling.quantize._replace(rows=128))
    if s.block == "16x16" and not s.columnwise:
        tiling = tiling._replace(quantize=tiling.quantize._replace(rows=max(16, tiling.quantize.rows)))
    return tiling


def _tile_amax_pass(s: Settings) -> bool:
    """Whether the amax pass is ``nvfp4_amax_kernel`` over tiles (row amaxes, or the RHT of a columnwise operand),
    which ``atomic_max``-es into the amax outputs, rather than the flat ``nvfp4_tensor_amax_kernel``."""
    return s.amax_scope == "row" or (s.rht and s.columnwise)


def _outputs(x: torch.Tensor, s: Settings, given: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    """Allocate every output; the amax buffers are int32 zeros for the tile amax pass (``atomic_max`` of float bit
    patterns), else left for the quantize kernel to write (the given amaxes, or the flat pass's maximum)."""
    rows, cols = x.shape
    out: dict[str, torch.Tensor] = {}
    amax_sizes = []
    if s.rowwise:
        amax_sizes.append(rows if s.amax_scope == "row" else 1)
    if s.columnwise:
        amax_sizes.append(cols if s.amax_scope == "row" else 1)
    make = torch.zeros if _tile_amax_pass(s) and not given else torch.empty
    amax_bits = make(sum(amax_sizes), dtype=torch.int32, device=x.device)
    parts = list(torch.split(amax_bits, amax_sizes))
    for prefix, wanted, shape in (("", s.rowwise, (rows, cols)), ("columnwise_", s.columnwise, (cols, rows))):
        if not wanted:
            continue
        amax = parts.pop(0)
        out[f"{prefix}data"] = torch.empty((shape[0], shape[1] // 2), dtype=torch.uint8, device=x.device)
        out[f"{prefix}scales"] = torch.empty((shape[0], shape[1] // 16), dtype=torch.uint8, device=x.device)
        out[f"{prefix}amax"] = amax
        out[f"{prefix}tensor_scale"] = torch.empty(amax.shape, dtype=torch.float32, device=x.device)
    return out


def _interpreter_errstate(x: torch.Tensor) -> contextlib.AbstractContextManager[Any]:
    """Triton's interpreter runs the kernels in NumPy, which warns on every Inf and NaN it computes."""
    if x.device.type == "cuda":
        return contextlib.nullcontext()
    import numpy as np

    return np.errstate(over="ignore", invalid="ignore", divide="ignore")


def launch_options(x: torch.Tensor, launch: Launch, resident: bool = False) -> dict[str, Any]:
    """Warps, and no floating-point contraction on the GPU: an FMA would skip the rounding of a product.

    ``resident``: cap the registers at what keeps ``launch.programs_per_sm`` programs on an SM (65536 registers
    for ``programs_per_sm * num_warps * 32`` threads).  :func:`quantize_tile` on a ragged operand holds two
    copies of its body (masked edge tiles, unmasked others) and ptxas gives the pair more registers than either
    needs (both operands, bfloat16: 245 against 168, and 168 without spills under the cap of 3 programs of 4
    warps; Triton 3.6 for sm_90)."""
    if x.device.type != "cuda":
        return {"num_warps": launch.num_warps}
    options = {"num_warps": launch.num_warps, "enable_fp_fusion": False}
    cap = 65536 // (launch.programs_per_sm * launch.num_warps * 32) // 8 * 8
    if (resident or launch.register_cap) and cap < 256:
        options["maxnreg"] = cap
    return options


def program_count(x: torch.Tensor, tiles: int, per_sm: int) -> int:
    """Persistent grid: ``per_sm`` programs per SM (the interpreter runs four), never more than the tiles."""
    if x.device.type != "cuda":
        return min(tiles, 4)
    return min(tiles, per_sm * torch.cuda.get_device_properties(x.device).multi_processor_count)


def kept_bytes(x: torch.Tensor, columnwise: bool) -> int:
    """How much of the end of ``x`` the amax pass marks evict-last, for the quantize pass, which reads it first,
    before its own writes push it out: 45% of the GPU's L2 for the rowwise operand alone, 30% with a columnwise one
    (none in the interpreter).  H100, bfloat16 8192 x 8192, whole calls at 60 / 45 / 30 / 15 / 0%: rowwise 0.1111 /
    0.1111 / 0.1118 / 0.1121 / 0.1123 ms, stochastic 0.1366 / 0.1352 / 0.1355 / 0.1356 / 0.1356; both 0.1593 / 0.1577
    / 0.1570 / 0.1571 / 0.1570, in 16 x 16 tiles 0.1395 / 0.1375 / 0.1368 / 0.1364 / 0.1361, stochastic 0.2368 / 0.2354
    / 0.2351 / 0.2360 / 0.2361, with RHT 0.2135 / 0.2135 / 0.2129 / 0.2135 / 0.2136; columnwise with RHT 0.1303 /
    0.1291 / 0.1287 / 0.1287 / 0.1290 (``scratch/kept.py``, ``docs/bench/2026-11-27b-h100-nvfp4-occupancy.json``)."""
    if x.device.type != "cuda":
        return 0
    return int((0.3 if columnwise else 0.45) * torch.cuda.get_device_properties(x.device).L2_cache_size)


def near_l2(x: torch.Tensor) -> bool:
    """Whether CUDA ``x`` is at most 4 times its GPU's L2: the size up to which the quantize pass's stores are hinted
    ``evict_first`` (:func:`store_eviction`), and up to which ``fast.group``'s amax pass keeps the end of the buffer
    in L2 for a columnwise operand."""
    return x.numel() * x.element_size() <= 4 * torch.cuda.get_device_properties(x.device).L2_cache_size


def store_eviction(x: torch.Tensor, s: Settings) -> str:
    """The L2 hint of the quantize kernels' data and scale stores (:func:`quantize_tile`).  ``evict_first`` (the
    written bytes leave L2 first; after a computed amax, before the input the amax pass kept there) when ``x`` is at
    most 4 times the GPU's L2; above that ``evict_last`` (the written bytes stay until whole: the scale sectors,
    which 4 to 8 tiles fill, and transposed rows that start inside a sector), except ``evict_first`` for the rowwise
    operand alone with a given amax or RHT and for both operands with RHT.

    H100, bfloat16, best of 2-3 in one process, the same bytes.  Without against ``evict_first`` (2026-11-27 sixth
    session, ``docs/bench/2026-11-27f-h100/store-hint/``): 8192 x 8192 rowwise 0.1081 -> 0.1039 ms, columnwise
    0.1161 -> 0.1118, both 0.1552 -> 0.1531, both with RHT 0.2135 -> 0.2080, given amax both 0.1085 -> 0.1041;
    [32768, 7168] (4.5 x the L2) given amax both 0.4070 -> 0.3789, both with RHT 0.7194 -> 0.7139.  Without against
    ``evict_last`` (eighth session, ``docs/bench/2026-11-27h-h100/``), computed amax: [32768, 7168] rowwise 0.3777 ->
    0.3774, columnwise 0.4066 -> 0.3930, both 0.5549 -> 0.5307, both in 16 x 16 tiles 0.5053 -> 0.4812; [16384,
    8192] columnwise 0.2303 -> 0.2248, both 0.3106 -> 0.3042.  ``evict_first`` against ``evict_last`` on [32768,
    7168]: given amax both 0.3782 -> 0.3700 and columnwise with RHT 0.4512 -> 0.4325, but given amax rowwise 0.2075
    -> 0.2192 and both with RHT 0.7096 -> 0.7182; at 8192 x 8192 ``evict_last`` lost everywhere (rowwise 0.1041 ->
    0.1083, columnwise 0.1083 -> 0.1116)."""
    if x.device.type != "cuda":
        return ""
    if near_l2(x):
        return "evict_first"
    if s.columnwise:
        return "evict_first" if s.rht and s.rowwise else "evict_last"
    return "evict_first" if s.amax_source == "given" or s.rht else "evict_last"


def _as_words(t: torch.Tensor) -> torch.Tensor:
    """A contiguous ``[R, C]`` tensor of 1-, 2- or 4-byte elements as ``[R, C / 2]`` words holding two each
    (int16, int32 or int64), element ``2i`` in the low half (little-endian)."""
    words = {1: torch.int16, 2: torch.int32, 4: torch.int64}[t.element_size()]
    if t.storage_offset() % 2:
        t = t.clone()
    return t.view(words)


def _kernel_bits(t: torch.Tensor | None, dummy: torch.Tensor) -> torch.Tensor:
    """uint32 random bits travel as int32 (the kernel reinterprets them); absent ones as a dummy pointer."""
    if t is None:
        return dummy
    return t.view(torch.int32) if t.dtype == torch.uint32 else t


def _amax_pass(
    x: torch.Tensor, s: Settings, out: dict[str, torch.Tensor], tiling: Tiling
) -> tuple[list[torch.Tensor], int]:
    """The first pass: the amax of each operand into ``out``'s int32 amax buffers (:func:`_tile_amax_pass`), or as
    per-program maxima of the flat pass.  Returns where the quantize pass reads each operand's amax bits, and how
    many there are (:func:`operand_scales`)."""
    rows, cols = x.shape
    rule = RULE_IDS[s.scale_rule]
    if _tile_amax_pass(s):
        amax = [out[f"{prefix}amax"] for prefix in ("", "columnwise_") if f"{prefix}amax" in out]
        q = tiling.quantize
        tiles = triton.cdiv(rows, q.rows) * triton.cdiv(cols, q.cols)
        # With RHT the tile pass holds the transform (222 registers for both operands, Triton 3.6 for sm_90): about
        # as many programs per SM as fit (H100, bfloat16 8192 x 8192, whole call: both 0.2235 -> 0.2146 ms at 2 rather
        # than 8, columnwise 0.1333 -> 0.1316 at 3; 4 was slower for both).
        per_sm = (2 if s.rowwise else 3) if s.rht and s.columnwise else 8
        jit(nvfp4_amax_kernel)[(program_count(x, tiles, per_sm),)](
            x,
            amax[0],
            amax[-1],
            rows,
            cols,
            min(tiles, kept_bytes(x, s.columnwise) // (q.rows * q.cols * x.element_size())),
            INPUT=INPUT_DTYPES[x.dtype],
            ROWWISE=s.rowwise,
            COLUMNWISE=s.columnwise,
            ROW_AMAX=s.amax_scope == "row",
            RHT=s.rht and s.columnwise,
            RULE=rule,
            BM=q.rows,
            BK=q.cols,
            EVEN=rows % q.rows == 0 and cols % q.cols == 0,
            SANITIZE=x.device.type != "cuda",
            **launch_options(x, q),
        )
        return amax, 1
    a = tiling.amax
    words = _as_words(x)
    n_words = words.numel()
    chunks = triton.cdiv(n_words, a.cols)
    programs = program_count(x, chunks, a.programs_per_sm)
    partial = torch.empty(programs, dtype=torch.int32, device=x.device)
    jit(nvfp4_tensor_amax_kernel)[(programs,)](
        words,
        partial,
        n_words,
        min(chunks, kept_bytes(x, s.columnwise) // (a.cols * words.element_size())) * a.cols,
        INPUT=INPUT_DTYPES[x.dtype],
        RULE=rule,
        CHUNK=a.cols,
        EVEN=n_words % a.cols == 0,
        SANITIZE=x.device.type != "cuda",
        **launch_options(x, a),
    )
    return [partial] * (s.rowwise + s.columnwise), programs


def _gluon_columnwise(x: torch.Tensor, s: Settings) -> types.ModuleType | None:
    """``fast.quant.nvfp4_gluon``, whose kernel quantizes the columnwise operand alone (its docstring: the H100
    figures), where it applies: a CUDA tensor of bfloat16 or float16, ``usage="columnwise"``, round to nearest, the
    per-tensor amax, TE's scale rule, 1x16 blocks, no RHT, whole 128 x 64 tiles, and a Triton with Gluon; else None
    (the Triton kernel)."""
    covered = s._replace(
        usage="columnwise", block="1x16", amax_scope="tensor", rht=False, rounding="rne", scale_rule="te"
    )
    if x.device.type != "cuda" or x.dtype not in (torch.bfloat16, torch.float16) or s != covered:
        return None
    try:
        from fast.quant.nvfp4 import gluon as nvfp4_gluon
    except ImportError:  # Triton before 3.5
        return None
    rows, cols = x.shape
    return nvfp4_gluon if rows % nvfp4_gluon.ROWS == 0 and cols % nvfp4_gluon.COLS == 0 else None


def _quantize_pass(
    x: torch.Tensor,
    s: Settings,
    out: dict[str, torch.Tensor],
    random_bits: torch.Tensor | None,
    columnwise_random_bits: torch.Tensor | None,
    sources: list[torch.Tensor],
    n_sources: int,
    tiling: Tiling,
) -> None:
    """The second pass: scales and codes of each operand from the int32 amax bits in ``sources`` (the operands' in
    order, ``n_sources`` each: :func:`_amax_pass`'s, or the given amaxes), which the kernel writes into ``out``."""
    rows, cols = x.shape
    dummy = out.get("amax", out.get("columnwise_amax"))
    q = tiling.quantize
    variant = {
        "INPUT": INPUT_DTYPES[x.dtype],
        "TILE_2D": s.block == "16x16",
        "ROW_AMAX": s.amax_scope == "row",
        "ROUNDING": 0 if s.rounding == "rne" else 2,
        "RANDOM_BITS": 0 if random_bits is None else RANDOM_DTYPES[random_bits.dtype],
        "RULE": RULE_IDS[s.scale_rule],
        "ZERO_ENC": s.zero_scale == "zero",
        "EVEN": rows % q.rows == 0 and cols % q.cols == 0,
        "SANITIZE": x.device.type != "cuda",
        "SOURCES": triton.next_power_of_2(n_sources),
        "STORE_EVICTION": store_eviction(x, s),
    }
    if not s.columnwise:
        tiles = triton.cdiv(rows, q.rows) * triton.cdiv(cols // 16, q.cols // 16)
        jit(nvfp4_rowwise_kernel)[(program_count(x, tiles, q.programs_per_sm),)](
            _as_words(x),
            dummy if random_bits is None else _as_words(random_bits),
            out["data"],
            out["scales"],
            out["amax"],
            out["tensor_scale"],
            sources[0],
            n_sources,
            rows,
            cols,
            **variant,
            BR=q.rows,
            NB=q.cols // 16,
            V=8 // x.element_size(),
            **launch_options(x, q),
        )
        return
    gluon_kernel = _gluon_columnwise(x, s)
    if gluon_kernel is not None:
        constexprs = {name: variant[name] for name in ("INPUT", "ZERO_ENC", "STORE_EVICTION")}
        gluon_kernel.quantize_columnwise(x, out, sources[0], n_sources, constexprs)
        return
    tiles = triton.cdiv(rows, q.rows) * triton.cdiv(cols, q.cols)
    jit(nvfp4_quantize_kernel)[(program_count(x, tiles, q.programs_per_sm),)](
        x,
        _kernel_bits(random_bits, dummy),
        _kernel_bits(columnwise_random_bits, dummy),
        *(out.get(f"{p}{n}", dummy) for p in ("", "columnwise_") for n in ("data", "scales", "amax", "tensor_scale")),
        *(sources if s.rowwise else [dummy, *sources]),
        n_sources,
        rows,
        cols,
        **variant,
        ROWWISE=s.rowwise,
        COLUMNWISE=True,
        RHT=s.rht,
        COLUMNWISE_RANDOM_BITS=0 if columnwise_random_bits is None else RANDOM_DTYPES[columnwise_random_bits.dtype],
        SAME_AMAX=s.amax_source == "computed",
        BM=q.rows,
        BK=q.cols,
        STAGES=q.stages,
        # Capped: ragged tiles (two copies of the body), and the columnwise operand alone (stochastic rounding takes
        # 159-167 registers uncapped, 128 without spills under the cap of 4 programs; Triton 3.6 for sm_90).
        **launch_options(x, q, resident=not variant["EVEN"] or not s.rowwise),
    )


def quantize_triton(
    x: torch.Tensor,
    s: Settings,
    random_bits: torch.Tensor | None,
    columnwise_random_bits: torch.Tensor | None,
    given: list[torch.Tensor],
    tiling: Tiling | None = None,
) -> dict[str, torch.Tensor]:
    """Both passes with the Triton kernels, or the quantize pass alone from the ``given`` amaxes (arguments checked,
    ``x`` contiguous); ``tiling`` overrides the launch shapes (the benchmarks' sweeps)."""
    out = _outputs(x, s, given)
    wide_random = any(b is not None and b.dtype == torch.uint32 for b in (random_bits, columnwise_random_bits))
    tiling = tiling or select_tiling(s, x.device, (x.shape[0], x.shape[1]), x.dtype, wide_random)
    with _interpreter_errstate(x):
        if given:
            sources, n_sources = [amax.detach().view(torch.int32) for amax in given], 1
        else:
            sources, n_sources = _amax_pass(x, s, out, tiling)
        _quantize_pass(x, s, out, random_bits, columnwise_random_bits, sources, n_sources, tiling)
    for prefix in ("", "columnwise_"):
        if f"{prefix}amax" in out:
            out[f"{prefix}amax"] = out[f"{prefix}amax"].view(torch.float32)
    return out
