"""MX launches: autotuned tiles, the launch cache, staging of rowwise scale bytes, the kernel's constexprs
(:func:`kernel_constants`) and the choice between the Triton and torch paths (:func:`use_triton`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Hashable
from typing import Any, NamedTuple

import torch

from fast._triton import LaunchCache, jit, triton
from fast.quant.mx.kernels import mx_kernel, unstage_row_scales
from fast.quant.mx.plan import BLOCK_SIZE, EDGE_IDS, INPUT_IDS, PATH_ENV, RULE_IDS, Plan, fp8_id, round_up

# %% Tile configurations


class Tile(NamedTuple):
    block_m: int
    block_k: int
    num_warps: int
    max_registers: int | None = None
    """ptxas's register cap per thread (``maxnreg``), or its own choice: fewer registers, more programs per SM."""

    @property
    def options(self) -> dict[str, int]:
        """Compile options of the tile besides its constexprs."""
        cap = {} if self.max_registers is None else {"maxnreg": self.max_registers}
        return {"num_warps": self.num_warps, **cap}


def _autotune_configs(rows_of_32: bool, staged: bool = False) -> list[Tile]:
    """Tiles tried on CUDA (the first is also the interpreter's): ``rows_of_32`` when columnwise or 2d blocks
    fix ``BLOCK_M = 32``; rowwise-only tiles may take more or fewer rows.  ``BLOCK_K`` is a power of two >= 32.

    Beside the general tiles, the fastest of GPU sweeps of the kernel-bound cases (``docs/performance.md``):
    one warp on 32x64 or 32x128 for columnwise and both (a columnwise block then lies within one warp: its maximum
    takes register and shuffle operations, no shared memory round trip and barrier across warps), 32x256 for 2d,
    8x512x4 for FP4; and 32x128 on 2 warps with registers capped at 96 (MXFP8 rowwise + columnwise does not spill
    at 96, so more programs fit an SM).  ``staged``
    (:func:`stages_row_scales`) keeps the tiles at least 128 wide.
    """
    if rows_of_32:
        tiles = [
            Tile(32, 256, 8),
            Tile(32, 64, 1),
            Tile(32, 128, 1),
            Tile(32, 128, 2),
            Tile(32, 64, 2),
            Tile(32, 256, 4),
            Tile(32, 128, 2, 96),
        ]
        return [tile for tile in tiles if tile.block_k >= 128 or not staged]
    return [Tile(32, 256, 8), Tile(16, 256, 4), Tile(32, 128, 4), Tile(64, 256, 8), Tile(8, 512, 4)]


_AUTOTUNE_MIN_ELEMENTS = 1 << 22
"""Inputs smaller than this take the first tile of :func:`_autotune_configs` without autotuning: tuning compiles
every tile for each new shape (seconds), which dominates conformance runs over many small shapes."""
_TILE_ENV = "QCONFORM_MX_TILE"
"""Optional ``BLOCK_MxBLOCK_KxWARPS[xMAX_REGISTERS]`` (e.g. ``32x256x8``, ``32x128x2x96``) fixing the tile instead
of autotuning it (benchmarks)."""


@functools.cache
def _tuned_kernel(interpret: str | None, rows_of_32: bool, staged: bool) -> Any:
    """The kernel, autotuned over :func:`_autotune_configs` on CUDA (keyed on shape and what it writes)."""
    configs = [
        triton.Config({"BLOCK_M": t.block_m, "BLOCK_K": t.block_k}, num_warps=t.num_warps, maxnreg=t.max_registers)
        for t in _autotune_configs(rows_of_32, staged)
    ]
    key = ["rows", "cols", "ROWWISE", "COLUMNWISE", "TWO_D", "PACK", "INPUT", "SWIZZLED"]
    even = triton.heuristics(
        {"EVEN": lambda args: args["rows"] % args["BLOCK_M"] == 0 and args["cols"] % args["BLOCK_K"] == 0}
    )
    return triton.autotune(configs=configs, key=key)(even(jit(mx_kernel)))


# %% Launcher


_RUNTIME_ARGS = 10
"""The kernel's leading runtime arguments (pointers and sizes); the rest of its signature is constexpr."""
_LAUNCHES = LaunchCache(mx_kernel, _RUNTIME_ARGS)
"""Compiled launches by plan, input dtype, device, input alignment and tile override (module docstring, "Launch")."""


def launch_kernel(x: torch.Tensor, plan: Plan, outputs: dict[str, torch.Tensor]) -> None:
    """Run the kernel over ``x`` (contiguous, viewed as ``[M, K]``) into the allocated ``outputs``; when it stages
    the rowwise scales (:func:`stages_row_scales`), :func:`unstage_row_scales` after it."""
    fixed = os.environ.get(_TILE_ENV)
    tile = _fixed_tile(fixed, plan) if fixed else None
    staging = None
    if stages_row_scales(plan, tile):
        widest = tile.block_k if tile else max(t.block_k for t in _autotune_configs(True, staged=True))
        staging = torch.empty(round_up(plan.rows, 32) * round_up(plan.cols, widest) // 32, dtype=torch.uint8,
                              device=x.device)  # fmt: skip
    key = (plan, x.dtype, x.device, x.data_ptr() % 16, fixed)  # Triton specializes on 16-byte alignment
    block_k = _launch_quantize(x, plan, outputs, staging, key, tile)
    if staging is not None:
        _unstage(staging, outputs["scale_rowwise"], plan, block_k // 32, key)


def _fixed_tile(fixed: str, plan: Plan) -> Tile:
    """The tile that ``QCONFORM_MX_TILE=fixed`` names, checked against ``plan``."""
    tile = Tile(*(int(part) for part in fixed.split("x")))
    if (
        ((plan.columnwise or plan.two_d) and tile.block_m != 32)
        or tile.block_k % 32
        or tile.block_k & (tile.block_k - 1)
    ):
        raise ValueError(
            f"Got {_TILE_ENV}={fixed!r}, but BLOCK_K must be a power of two >= 32 and BLOCK_M 32 with "
            "columnwise or 2d blocks"
        )
    return tile


def stages_row_scales(plan: Plan, tile: Tile | None) -> bool:
    """Whether the kernel stages its rowwise scale bytes (:func:`_store_row_scales`) for
    :func:`unstage_row_scales` to copy into the compact matrix: MXFP8 with rowwise and columnwise 1x32 blocks and
    compact scales, ``K`` a multiple of 128 and tiles (the fixed ``tile`` or every autotuned one) at least 128
    wide, so that rows of staged scales are whole int32 words.

    A 32-row tile's row holds ``BLOCK_K / 32`` bytes of a 32-byte sector of the compact matrix, and stores
    narrower than a sector cost the L2 one transaction each (``docs/performance.md``, "Partial-sector scale
    writes"); the staged tiles and the copy store whole sectors, which is faster for MXFP8; MXFP6 and MXFP4, whose
    kernels the scale stores do not hold back, get slower, as does 2d.
    """
    return (
        plan.fmt.bits == 8
        and plan.rowwise
        and plan.columnwise
        and not plan.two_d
        and not plan.swizzled
        and plan.cols % 128 == 0
        and (tile is None or tile.block_k >= 128)
    )


_UNSTAGE_BYTES = 64
"""Scale bytes along a row that one program of :func:`unstage_row_scales` copies, at most (two sectors)."""
_UNSTAGE_LAUNCHES = LaunchCache(unstage_row_scales, 5)
"""Compiled launches of :func:`unstage_row_scales` by the quantize kernel's key."""


def _unstage(staging: torch.Tensor, scale: torch.Tensor, plan: Plan, per_tile: int, key: Hashable) -> None:
    """Copy the staged rowwise scales (``per_tile`` bytes a row of each tile, a multiple of 4) into the compact
    ``scale``, as int32 words.  Launched dependent on the quantize kernel where the GPU can (compute capability
    9.0+): its programs start as the kernel's last ones finish and wait for it (``griddepcontrol.wait``), which
    takes its launch off the critical path."""
    words = plan.cols // BLOCK_SIZE // 4
    args = (staging.view(torch.int32), scale.view(torch.int32), plan.rows, words, scale.shape[1] // 4)
    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if not interpret and _UNSTAGE_LAUNCHES.launch(key, args):
        return
    tiles_k = triton.cdiv(words, per_tile // 4)
    tiles = unstaged_tiles(per_tile, tiles_k)
    dependent = dependent_launch(scale.device)
    meta = {"BLOCK_M": 32, "PER_TILE": per_tile // 4, "TILES": tiles, "WAIT": dependent}
    grid = triton.cdiv(plan.rows, 32) * triton.cdiv(tiles_k, tiles)
    options = {"launch_pdl": True} if dependent else {}
    compiled = jit(unstage_row_scales)[(grid,)](*args, **meta, num_warps=4, **options)
    if not interpret:
        _UNSTAGE_LAUNCHES.store(key, compiled, grid, meta)


def dependent_launch(device_: torch.device) -> bool:
    """Whether a kernel on ``device_`` can be launched as a programmatic dependent of the one before it
    (``launch_pdl``, :func:`~fast._triton.wait_for_primary`): compiled, on compute capability 9.0 and later."""
    return os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.get_device_capability(device_) >= (9, 0)


def unstaged_tiles(per_tile: int, tiles_k: int) -> int:
    """Tiles one program of :func:`unstage_tiles` copies: ``_UNSTAGE_BYTES`` of a row, as few as the row has."""
    return min(max(_UNSTAGE_BYTES // per_tile, 1), triton.next_power_of_2(tiles_k))


def _launch_quantize(
    x: torch.Tensor,
    plan: Plan,
    outputs: dict[str, torch.Tensor],
    staging: torch.Tensor | None,
    key: Hashable,
    tile: Tile | None,
) -> int:
    """Run the quantize kernel on the fixed ``tile`` or the autotuned one (rowwise scales into ``staging`` when
    given); its ``BLOCK_K``."""
    interpret = os.environ.get("TRITON_INTERPRET")
    # A direction not asked for gets the other's buffers as (never written) stand-ins.
    row_data = outputs.get("data_rowwise", outputs.get("data_columnwise"))
    assert row_data is not None  # _allocate makes at least one direction
    col_data = outputs.get("data_columnwise", row_data)
    row_scale = outputs.get("scale_rowwise", row_data) if staging is None else staging
    col_scale = outputs.get("scale_columnwise", row_data)
    row_scale_stride = plan.row_scale_shape[1] // 4 if plan.swizzled else plan.row_scale_shape[1]
    col_scale_stride = plan.col_scale_shape[0] // 4 if plan.swizzled else plan.col_scale_shape[1]
    data_stride = plan.cols // 2 if plan.fmt.bits == 4 else plan.cols
    args = (x, row_data, row_scale, col_data, col_scale, plan.rows, plan.cols, data_stride, row_scale_stride,
            col_scale_stride)  # fmt: skip
    if interpret != "1" and _LAUNCHES.launch(key, args):
        return _LAUNCHES.constant(key, "BLOCK_K")
    if x.device.type != "cuda" and interpret != "1":
        raise RuntimeError(
            f"Got {PATH_ENV}=triton and x on {x.device}, but the Triton kernel runs CPU tensors only in Triton's "
            "interpreter: set TRITON_INTERPRET=1 before the first call in this process"
        )
    if interpret != "1" and fp8_id(plan.fmt) and not has_fp8_conversion(x.device):
        raise RuntimeError(
            f"Got {PATH_ENV}=triton and an FP8 format on {x.device} (compute capability "
            f"{torch.cuda.get_device_capability(x.device)}), but the MXFP8 kernel converts with "
            f"cvt.rn.satfinite.e4m3x2.f32, which needs 8.9 or later; use {PATH_ENV}=auto or torch there"
        )
    meta = {**kernel_constants(plan, x.dtype), "STAGED": staging is not None}
    rows_of_32 = plan.columnwise or plan.two_d
    if interpret == "1" or tile or plan.rows * plan.cols < _AUTOTUNE_MIN_ELEMENTS:
        tile = tile or _autotune_configs(rows_of_32)[0]
        even = plan.rows % tile.block_m == 0 and plan.cols % tile.block_k == 0
        meta.update(BLOCK_M=tile.block_m, BLOCK_K=tile.block_k, EVEN=even)
        kernel = jit(mx_kernel)[(_grid(plan, tile.block_m, tile.block_k),)]
        if interpret == "1":
            import numpy as np  # the interpreter computes in NumPy: NaN inputs must not raise warnings there

            with np.errstate(all="ignore"):
                kernel(*args, **meta, num_warps=tile.num_warps)  # the interpreter has no registers to cap
            return tile.block_k
        compiled = kernel(*args, **meta, **tile.options)
    else:
        tuned = _tuned_kernel(interpret, rows_of_32, staging is not None)
        compiled = tuned[lambda config: (_grid(plan, config["BLOCK_M"], config["BLOCK_K"]),)](*args, **meta)
        best = tuned.best_config.kwargs
        meta.update(BLOCK_M=best["BLOCK_M"], BLOCK_K=best["BLOCK_K"])
        meta.update(EVEN=plan.rows % meta["BLOCK_M"] == 0 and plan.cols % meta["BLOCK_K"] == 0)
    _LAUNCHES.store(key, compiled, _grid(plan, meta["BLOCK_M"], meta["BLOCK_K"]), meta)
    return meta["BLOCK_K"]


def _grid(plan: Plan, block_m: int, block_k: int) -> int:
    """Programs of the 1-D grid: one per ``block_m x block_k`` tile."""
    return triton.cdiv(plan.rows, block_m) * triton.cdiv(plan.cols, block_k)


def kernel_constants(plan: Plan, dtype: torch.dtype) -> dict[str, Any]:
    """The kernel's constexpr arguments other than the tile."""
    fmt = plan.fmt
    return {
        "FP8": fp8_id(fmt),
        "MANTISSA_BITS": fmt.mantissa_bits,
        "BIAS": fmt.bias,
        "MAX_CODE": fmt.max_code,
        "MAX_VALUE": fmt.max_value,
        "SIGN_SHIFT": 32 - fmt.bits,
        "SIGN_MASK": 1 << (fmt.bits - 1),
        "SUBNORMAL_ADDEND": 2.0 ** (24 - fmt.bias - fmt.mantissa_bits),
        "PACK": fmt.bits == 4,
        "EMAX": fmt.emax,
        "EVEN_ADD": 1 << (22 - fmt.mantissa_bits),
        "RULE": RULE_IDS[plan.rule],
        "EDGES": EDGE_IDS[plan.edges],
        "RCEIL_OPERAND": fmt.max_value if plan.edges == "torchao_018" else fmt.reciprocal_of_max,
        "RCEIL_DIVIDE": plan.edges == "torchao_018",
        "ZERO_BITS": plan.zero_reciprocal_bits,
        "ROWWISE": plan.rowwise,
        "COLUMNWISE": plan.columnwise,
        "TWO_D": plan.two_d,
        "SWIZZLED": plan.swizzled,
        "INPUT": INPUT_IDS[dtype],
    }


def use_triton(device_: torch.device, plan: Plan) -> bool:
    """The kernel, or the torch path; ``auto`` takes the kernel for CUDA tensors when Triton is importable and, for
    FP8, the GPU converts to FP8 in hardware."""
    choice = os.environ.get(PATH_ENV, "auto")
    if choice not in ("auto", "triton", "torch"):
        raise ValueError(f"Got {PATH_ENV}={choice!r}, but {PATH_ENV} must be one of ['auto', 'triton', 'torch']")
    if choice == "triton" and triton is None:
        raise RuntimeError(f"Got {PATH_ENV}=triton, but triton is not installed")
    if choice != "auto":
        return choice == "triton"
    return device_.type == "cuda" and triton is not None and (fp8_id(plan.fmt) == 0 or has_fp8_conversion(device_))


@functools.cache
def has_fp8_conversion(device_: torch.device) -> bool:
    """Whether ``device_`` has ``cvt.rn.satfinite.e4m3x2.f32`` (compute capability 8.9 and later)."""
    return torch.cuda.get_device_capability(device_) >= (8, 9)
