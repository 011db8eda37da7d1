"""NVFP4 launches: tilings per variant, L2 cache policy, the amax and quantize passes, and the Triton path
(:func:`quantize_triton`), which picks the Gluon columnwise kernel (``fast.quant.nvfp4.gluon``) where it applies.

Each tiling below was chosen by timing the candidates on the GPU, every one bit-equal to the torch path; the figures
and the commands that reproduce them are in ``docs/performance.md``."""

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
of each of 2 rows), 4 warps, 8 programs per SM; the flat amax pass in chunks of 4096 words (16 per thread), 8
warps."""
_BOTH = Tiling(quantize=Launch(128, 64, 4, 2), amax=Launch(1, 4096, 8, 4))
"""Both operands (``nvfp4_quantize_kernel``): 128 x 64 tiles, 4 warps (each thread 8 rows of 8 columns), 2
programs per SM.  A tile gives each row of the columnwise outputs 64 bytes of codes and 8 of scales, so that the
transposed stores are wide (16-row tiles stored 8 and 1 bytes, which dominated the pass).  The tile amax pass
(row-scaled amax, Hadamard transform) uses the same tiles."""
_BOTH_3 = _BOTH._replace(quantize=Launch(128, 64, 4, 3))
"""Both operands in 16 x 16 tiles from 16-bit input with round to nearest, with RHT or without: 3 programs of 4
warps fit an SM uncapped (with RHT the register cap made it slower).  1x16 blocks take ``_BOTH_4_CAPPED`` or
``_BOTH_3_CAPPED``, and whole 16 x 16 tiles without RHT ``_BOTH_PIPELINED``; ragged shapes are capped anyway
(``launch_options``' ``resident``: the edge tiles' masked copy of the body, see :func:`quantize_tile`).  Row
amaxes and RHT in 1x16 blocks need more registers (2 programs)."""
_BOTH_3_CAPPED = _BOTH._replace(quantize=Launch(128, 64, 4, 3, register_cap=True))
"""Both operands in 1x16 blocks, per-tensor amax, no RHT: 3 programs per SM under the register cap of 3 programs.
From float32 and with stochastic rounding the cap is what lets 3 fit; 16-bit input with round to nearest fits
uncapped and keeps this tiling on ragged single shapes only (else ``_BOTH_4_CAPPED``).  With RHT 3 capped programs
were slower, so RHT in 1x16 blocks keeps ``_BOTH``, as does stochastic rounding of float32 input."""
_BOTH_4_CAPPED = _BOTH._replace(quantize=Launch(128, 64, 4, 4, register_cap=True))
"""Both operands in 1x16 blocks from 16-bit input, round to nearest, per-tensor amax, no RHT, whole 128 x 64 tiles
(and ``fast.group``'s grouped kernel): 4 programs per SM under the register cap of 4.  With 3 programs the quantize
pass stalls on its tile loads; a fourth hides more of that latency.  A ragged single shape was slower so, and keeps
``_BOTH_3_CAPPED``."""
_BOTH_PIPELINED = _BOTH._replace(quantize=Launch(128, 64, 4, 2, stages=3))
"""Both operands in 16 x 16 tiles from 16-bit input, round to nearest, no RHT, whole tiles: 2 programs per SM, each
loading two tiles ahead (3 stages).  Pipelined loads lost elsewhere (1x16 blocks, RHT, stochastic rounding, the
columnwise operand alone); ragged shapes and ``fast.group``'s grouped kernel (whose loop crosses members) keep
``_BOTH_3``."""
_COLUMNWISE = _BOTH._replace(quantize=Launch(128, 64, 4, 4))
"""The columnwise operand alone: 128 x 64 tiles, 4 warps, 4 programs per SM, with a block's 16 rows in a thread
(see :func:`_column_tile`)."""
_ROWWISE_STOCHASTIC = _ROWWISE._replace(quantize=Launch(2, 4096, 8, 4))
"""The rowwise operand alone, stochastic rounding: 2 x 4096 tiles, 8 warps, 4 programs per SM.  With a columnwise
operand stochastic rounding takes the round to nearest tilings (since :func:`e2m1_stochastic`)."""
_WIDE_RANDOM = _BOTH._replace(quantize=Launch(64, 64, 4, 2))
"""uint32 random bits with a columnwise operand: 32 elements a thread, since the generic rounding of
``round_to_code`` (:func:`e2m1_stochastic` for 32 bits) spills registers at 64."""


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
    needs; under the cap neither spills."""
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
    (none in the interpreter); the shares were the fastest whole calls of a sweep (``docs/performance.md``)."""
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
    operand alone with a given amax or RHT and for both operands with RHT, where ``evict_last`` was slower (each
    entry is the faster hint of both, same bytes; ``docs/performance.md``)."""
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
        # With RHT the tile pass holds the transform and needs many registers: about as many programs per SM as fit.
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
    """``fast.quant.nvfp4.gluon``, whose kernel quantizes the columnwise operand alone, where it applies: a CUDA tensor
    of bfloat16 or float16, ``usage="columnwise"``, round to nearest, the per-tensor amax, TE's scale rule, 1x16 blocks,
    no RHT, whole 128 x 64 tiles, and a Triton with Gluon; else None (the Triton kernel)."""
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
        # Capped: ragged tiles (two copies of the body), and the columnwise operand alone (stochastic rounding fits
        # the cap of 4 programs without spills).
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
