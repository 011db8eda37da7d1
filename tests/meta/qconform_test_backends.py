"""Backends for the engine's own tests, loaded as ``qconform_test_backends:<name>`` (module:attr).

``backends_on_path`` in ``tests/meta/conftest.py`` puts this directory on ``sys.path`` (a spawned
worker inherits it; a ``qconform`` subprocess gets it through ``PYTHONPATH``).  Each backend is the
NumPy reference for a few small contracts, with at most one planted misbehaviour, so the tests do
not depend on every contract of the suite loading.
"""

from __future__ import annotations

import importlib
import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import reference.cast
import reference.decode
import reference.glu
import reference.int4
from conformance.backends import Backend, Implementation
from conformance.carriers import carrier_to_bits

Fn = Callable[..., Mapping[str, Any]]

CONTRACTS: dict[str, Fn] = {
    "cast.fp8": reference.cast.fp8,
    "decode.fp8": reference.decode.fp8,
    "glu.interleave": reference.glu.interleave,
    "glu.deinterleave": reference.glu.deinterleave,
    "int4.tinygemm_mm": reference.int4.tinygemm_mm,
}


def _backend(name: str, **replaced: Fn) -> Backend:
    contracts = {c: replaced.get(c.replace(".", "_"), fn) for c, fn in CONTRACTS.items()}
    return Backend(
        name=name,
        device="cpu",
        array_kind="numpy",
        contracts=contracts,
        info={"module": "reference"},
        validates_inputs=True,
    )


def reference_subset() -> Backend:
    """The reference for the contracts in ``CONTRACTS``."""
    return _backend("subset")


def other_subset() -> Backend:
    """The same, under another name: a second column of a merged matrix."""
    return _backend("other")


def negative_zero_flushed() -> Backend:
    """``cast.fp8`` turns -0 into +0."""

    def cast(x: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        codes = reference.cast.fp8(x, **params)["codes"]
        return {"codes": np.where(codes == 0x80, np.uint8(0), codes)}

    return _backend("flushes", cast_fp8=cast)


def one_ulp_off() -> Backend:
    """``int4.tinygemm_mm`` one bfloat16 ulp away from the reference (within the tolerance)."""

    def mm(a: np.ndarray, packed: np.ndarray, scales_and_zeros: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        out = reference.int4.tinygemm_mm(a, packed, scales_and_zeros, **params)["out"]
        bits = carrier_to_bits(out, "bfloat16")
        return {"out": np.where((bits & 0x7FFF) != 0, bits + np.uint16(1), bits).astype(np.uint16)}

    return _backend("ulp-off", int4_tinygemm_mm=mm)


def wrong_shape() -> Backend:
    """``glu.interleave`` returns one row too few."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        return {"out": reference.glu.interleave(w, **params)["out"][:-1]}

    return _backend("wrong-shape", glu_interleave=interleave)


def cuda_error() -> Backend:
    """``glu.interleave`` raises as a failed kernel launch does."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    return _backend("cuda-error", glu_interleave=interleave)


def crashes() -> Backend:
    """``glu.interleave`` kills its process, as a segfaulting kernel does."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        os._exit(139)

    return _backend("crashes", glu_interleave=interleave)


def hangs() -> Backend:
    """``glu.deinterleave`` never returns, as a deadlocked kernel does."""

    def deinterleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        time.sleep(3600)
        raise AssertionError("unreachable")

    return _backend("hangs", glu_deinterleave=deinterleave)


def kills_the_run() -> Backend:
    """``glu.interleave`` kills the process that runs the suite (its worker's parent): a run killed mid-way."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        os.kill(os.getppid(), signal.SIGKILL)
        os._exit(137)

    return _backend("killed", glu_interleave=interleave)


def _marked(w: np.ndarray) -> bool:
    """The cases the ``*_on_one_case`` backends misbehave on: an input of more than 40 elements (a few of
    a row's random cases, none of its boundary ones: a batch of cases holds passing ones before it)."""
    return w.size > 40


def crashes_on_one_case() -> Backend:
    """``glu.interleave`` kills its process on the marked cases only."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        if _marked(w):
            os._exit(139)
        return reference.glu.interleave(w, **params)

    return _backend("crashes-on-one", glu_interleave=interleave)


def raises_on_one_case() -> Backend:
    """``glu.interleave`` raises on the marked cases only."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        if _marked(w):
            raise ValueError(f"planted: {w.size} elements")
        return reference.glu.interleave(w, **params)

    return _backend("raises-on-one", glu_interleave=interleave)


def hangs_on_one_case() -> Backend:
    """``glu.interleave`` never returns on the marked cases only."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        if _marked(w):
            time.sleep(3600)
        return reference.glu.interleave(w, **params)

    return _backend("hangs-on-one", glu_interleave=interleave)


# %% Planted kernel bugs, one per block-scaled contract family (tests/meta/test_planted.py)
#
# Each is the reference with one bug of a kind a real kernel has, limited (``supports``) to the rows the bug
# lives in.  Names say the bug; docstrings say where it shows.


def _only(where: Callable[[Mapping[str, Any]], bool], why: str) -> Callable[[Mapping[str, Any]], str | None]:
    return lambda params: None if where(params) else why


def _planted(name: str, contract: str, fn: Fn, where: Callable[[Mapping[str, Any]], bool], why: str) -> Backend:
    return Backend(
        name=name,
        device="cpu",
        array_kind="numpy",
        contracts={contract: Implementation(fn, _only(where, why))},
        info={"module": "reference", "planted": name},
    )


def mx_rceil_exact_power_rounds_up() -> Backend:
    """``quant.mx`` rceil: a block whose ``d = amax / max`` is exactly ``2**j`` gets ``2**(j + 1)`` (an E8M0
    conversion that rounds up unconditionally, ``E + 1``, instead of ``cvt.rp``): every other block is right."""
    mx_module = importlib.import_module("reference.quant.mx")  # reference.quant.mx is also the function
    original = mx_module.scale_bytes

    def scale_bytes(amax: np.ndarray, *, format: str, scale_rule: str, edges: str) -> np.ndarray:
        byte = original(amax, format=format, scale_rule=scale_rule, edges=edges)
        value = np.asarray(amax, np.int64).astype(np.uint32).view(np.float32)
        top = np.float32(mx_module.get_format(format).max_finite)
        with np.errstate(invalid="ignore", over="ignore"):
            descale = value / top if edges == "torchao_018" else value * (np.float32(1) / top)
        bits = descale.view(np.uint32)
        exact = ((bits & 0x7F_FFFF) == 0) & (bits >= 0x0080_0000) & (bits < 0x7F80_0000)
        return np.where(exact & (byte < 254), byte + 1, byte).astype(np.uint8)

    def quantize(x: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        setattr(mx_module, "scale_bytes", scale_bytes)  # noqa: B010 (mx() looks it up as a module global)
        try:
            return mx_module.mx(x, **params)
        finally:
            setattr(mx_module, "scale_bytes", original)  # noqa: B010

    return _planted(
        "mx-rceil-exact-power-rounds-up", "quant.mx", quantize, lambda p: p["scale_rule"] == "rceil", "rceil only"
    )


def nvfp4_columnwise_nibbles_swapped() -> Backend:
    """``quant.nvfp4``: the columnwise data packs element ``2i`` in the high nibble; the rowwise data is right."""
    from reference.quant import nvfp4

    def quantize(x: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        out = dict(nvfp4(x, **params))
        if "columnwise_data" in out:
            data = out["columnwise_data"]
            out["columnwise_data"] = ((data & 0x0F) << 4 | data >> 4).astype(np.uint8)
        return out

    return _planted(
        "nvfp4-columnwise-nibbles-swapped",
        "quant.nvfp4",
        quantize,
        lambda p: p["usage"] != "rowwise",
        "the columnwise operand only",
    )


def nibbles_high_first_packs_low_first() -> Backend:
    """``pack.nibbles``: ``order="high_first"`` packs as ``low_first`` (the swapped layout); ``low_first`` is right."""
    import reference.pack

    def pack(codes: np.ndarray, *, order: str) -> dict[str, np.ndarray]:
        reference.pack.nibbles(codes, order=order)  # the argument checks stay right
        return reference.pack.nibbles(codes, order="low_first")

    return _planted("nibbles-high-first-swapped", "pack.nibbles", pack, lambda p: True, "")


def swizzle_padding_not_zeroed() -> Backend:
    """``layout.scale_swizzle``: the padding bytes of the 128x4 tiles keep garbage (0xA5) instead of zero, as
    an unfilled ``torch.empty`` buffer does (TransformerEngine#3070); every scale byte is in place."""
    import reference.layout

    def swizzle(scale: np.ndarray) -> dict[str, np.ndarray]:
        out = reference.layout.scale_swizzle(scale)["swizzled"]
        written = reference.layout.scale_swizzle(np.ones(scale.shape, np.uint8))["swizzled"] == 1
        return {"swizzled": np.where(written, out, np.uint8(0xA5)).astype(np.uint8)}

    return _planted("swizzle-padding-not-zeroed", "layout.scale_swizzle", swizzle, lambda p: True, "")


def fp8_block_tail_takes_previous_scale() -> Backend:
    """``quant.fp8_block`` 1x128: the ragged last block of each row (``K % 128 != 0``, ``K > 128``) is scaled by
    the block before it (a last-tile mistake: the tail reuses the previous tile's amax), in data and scale_inv."""
    fp8 = importlib.import_module("reference.quant.fp8")
    from reference.quant import fp8_block

    def quantize(x: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        out = dict(fp8_block(x, **params))
        k = x.shape[-1]
        if k <= 128 or k % 128 == 0 or x.size == 0:
            return out
        matrix = x.reshape(-1, k).astype(np.float32)
        last, previous = (k - 1) // 128, (k - 1) // 128 - 1
        magnitude = np.abs(matrix[:, previous * 128 : last * 128])
        amax = np.where(np.isnan(magnitude), np.float32(0), magnitude).max(axis=1)
        dtype = params.get("x_dtype") or x.dtype.name
        scale = fp8.scale_from_amax(
            amax,
            fp8.get_format(params["format"]).max_finite,
            power_2_scale=params["power_2_scale"],
            epsilon=params["epsilon"],
            value_for_inf=fp8._DTYPE_MAX[dtype],
        )
        with np.errstate(over="ignore", invalid="ignore"):
            tail = (matrix[:, last * 128 :] * scale[:, None]).astype(np.float32)
        codes = reference.cast.fp8(tail, format=params["format"], overflow="saturate")["codes"]
        data = out["data"].reshape(-1, k).copy()
        data[:, last * 128 :] = codes
        out["data"] = data.reshape(x.shape)
        scale_inv = out["scale_inv"].copy()
        scale_inv[last, : matrix.shape[0]] = scale_inv[previous, : matrix.shape[0]]
        out["scale_inv"] = scale_inv
        return out

    return _planted(
        "fp8-block-tail-takes-previous-scale",
        "quant.fp8_block",
        quantize,
        lambda p: p["block"] == "1x128" and p["usage"] == "rowwise",
        "1x128 rowwise only",
    )


def nvfp4_block_scale_association() -> Backend:
    """``quant.nvfp4`` te: the block scale's target as ``fl32(fl32(b * S_enc) * fl32(1/6))`` instead of ``fl32(b *
    fl32(S_enc * fl32(1/6)))``: one float32 ulp off on about a third of the blocks, so the E4M3 code changes only
    where the target lies within an ulp of an E4M3 rounding midpoint and ``S_enc`` is not a power of two."""
    nvfp4_module = importlib.import_module("reference.quant.nvfp4")
    f32 = np.float32

    def operand(values: np.ndarray, given: np.ndarray | None, zero_scale: str, prefix: str) -> dict[str, np.ndarray]:
        rows, cols = values.shape
        magnitude = nvfp4_module._magnitude_bits(values, False)
        amax = given.astype(f32).reshape(1) if given is not None else magnitude.max(keepdims=True).reshape(1).view(f32)
        block_amax = magnitude.reshape(rows, cols // 16, 16).max(axis=2).view(f32)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            encode = np.fmin(f32(2688) / amax, np.finfo(f32).max)
            encode = np.where((amax == 0) | (encode == 0), f32(1), encode).astype(f32)
            tensor_scale = (f32(1) / encode).astype(f32)
            target = (block_amax * encode) * f32(1 / 6)  # the planted association
            codes = reference.cast.fp8(np.fmin(target, np.finfo(f32).max), format="float8_e4m3fn", overflow="saturate")
            block_scale = nvfp4_module._E4M3_VALUES[codes["codes"]]
            enc = np.fmin(f32(1) / (block_scale * tensor_scale), np.finfo(f32).max)
            if zero_scale == "zero":
                enc = np.where(block_scale == 0, f32(0), enc)
            scaled = (values.reshape(rows, cols // 16, 16) * enc.astype(f32)[:, :, None]).reshape(rows, cols)
        fp4 = reference.cast.fp4(scaled.astype(f32), format="float4_e2m1fn", nan="max")["codes"]
        return {
            f"{prefix}data": nvfp4_module.nibbles(fp4, order="low_first")["packed"],
            f"{prefix}scales": codes["codes"],
            f"{prefix}amax": amax,
            f"{prefix}tensor_scale": tensor_scale.reshape(1),
            f"{prefix}data_dont_care": np.zeros((rows, cols // 2), bool),
        }

    def quantize(x: np.ndarray, amax: Any = None, columnwise_amax: Any = None, **params: Any) -> dict[str, Any]:
        nvfp4_module.nvfp4(x, amax=amax, columnwise_amax=columnwise_amax, **params)  # the argument checks
        values = np.asarray(x, np.float32)
        out: dict[str, np.ndarray] = {}
        if params["usage"] != "columnwise":
            out.update(operand(values, amax, params["zero_scale"], ""))
        if params["usage"] != "rowwise":
            out.update(operand(np.ascontiguousarray(values.T), columnwise_amax, params["zero_scale"], "columnwise_"))
        return out

    return _planted(
        "nvfp4-block-scale-association",
        "quant.nvfp4",
        quantize,
        lambda p: (
            (p["scale_rule"], p["block"], p["amax_scope"], p["rht"], p["rounding"])
            == ("te", "1x16", "tensor", False, "rne")
        ),
        "te, 1x16 blocks, tensor amax, no RHT, round to nearest",
    )


FP8_AMAX_CHUNK = 4096
"""Elements per program of ``fast.quant.fp8``'s amax kernel (``AMAX_TILE[0]``)."""
NVFP4_AMAX_CHUNK = 8192
"""Elements of bfloat16 input per program of ``fast.quant.nvfp4``'s flat amax kernel (4096 words of two)."""


def fp8_tensor_amax_first_chunk() -> Backend:
    """``quant.fp8_tensor``: the amax reads only the first ``FP8_AMAX_CHUNK`` elements (an amax kernel launched
    with one program and no stride loop); scale, scale_inv and data follow from that amax."""
    fp8 = importlib.import_module("reference.quant.fp8")

    def quantize(x: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        out = dict(fp8.fp8_tensor(x, **params))
        flat = x.reshape(-1)
        if flat.size <= FP8_AMAX_CHUNK:
            return out
        head = np.abs(flat[:FP8_AMAX_CHUNK].astype(np.float32))
        amax = np.where(np.isnan(head), np.float32(0), head).max().astype(np.float32)
        dtype = params.get("x_dtype") or x.dtype.name
        value_for_inf = fp8._F32_MAX if params["inf_scale"] == "float32_max" else fp8._DTYPE_MAX[dtype]
        scale = fp8.scale_from_amax(
            amax,
            fp8.get_format(params["format"]).max_finite,
            power_2_scale=params["power_2_scale"],
            epsilon=params["epsilon"],
            value_for_inf=value_for_inf,
        )
        out.update({"amax": amax.reshape(1), "scale": scale.reshape(1), "scale_inv": fp8._reciprocal(scale).reshape(1)})
        out.update(fp8._cast_with_scale(x.astype(np.float32), scale, params["format"], params["usage"]))
        return out

    return _planted("fp8-tensor-amax-first-chunk", "quant.fp8_tensor", quantize, lambda p: True, "")


def nvfp4_amax_first_chunk() -> Backend:
    """``quant.nvfp4`` (computed tensor amax): the amax reads only the first ``NVFP4_AMAX_CHUNK`` elements of ``x``
    (row-major), for both operands; everything else follows from it as a given amax would."""
    from reference.quant import nvfp4

    def quantize(x: np.ndarray, **params: Any) -> dict[str, Any]:
        if x.size <= NVFP4_AMAX_CHUNK:
            return nvfp4(x, **params)
        head = np.abs(x.reshape(-1)[:NVFP4_AMAX_CHUNK].astype(np.float32))
        amax = np.where(np.isnan(head), np.float32(0), head).max(keepdims=True).astype(np.float32)
        usage = params["usage"]
        given = {"amax": amax} if usage != "columnwise" else {}
        given |= {"columnwise_amax": amax} if usage != "rowwise" else {}
        return nvfp4(x, **{**params, "amax_source": "given"}, **given)

    return _planted(
        "nvfp4-amax-first-chunk",
        "quant.nvfp4",
        quantize,
        lambda p: p["amax_source"] == "computed" and p["amax_scope"] == "tensor" and not p["rht"],
        "the computed tensor amax without RHT",
    )


def fp8_delayed_fused_never_skips() -> Backend:
    """``quant.fp8_delayed`` ``update="fused"``: the history rolls and the scale updates even when the recorded
    amax is 0 (the fused kernel's skip is lost, as in the unfused kernel): a degenerate-state bug, visible only
    with an all-zero (or all-NaN) ``x`` and a history whose newest entry is 0 or -0 or negative."""
    fp8 = importlib.import_module("reference.quant.fp8")

    def step(x: np.ndarray, amax_history: np.ndarray, scale: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        return fp8.fp8_delayed(x, amax_history, scale, **{**params, "update": "unfused"})

    return _planted(
        "fp8-delayed-fused-never-skips", "quant.fp8_delayed", step, lambda p: p["update"] == "fused", "fused only"
    )


def supports_raises() -> Backend:
    """``decode.fp8``'s ``supports()`` raises for ``float8_e5m2`` (the other formats are implemented)."""

    def supports(params: Mapping[str, Any]) -> str | None:
        if params["format"] == "float8_e5m2":
            raise KeyError("no table for float8_e5m2")
        return None

    backend = _backend("supports-raises")
    contracts = {**backend.contracts, "decode.fp8": Implementation(reference.decode.fp8, supports)}
    return Backend(
        name=backend.name,
        device="cpu",
        array_kind="numpy",
        contracts=contracts,
        info=dict(backend.info),
        validates_inputs=backend.validates_inputs,
    )


def hangs_late() -> Backend:
    """``glu.interleave`` never returns; ``glu.deinterleave`` (run before it) passes: a run to interrupt mid-way."""

    def interleave(w: np.ndarray, **params: Any) -> dict[str, np.ndarray]:
        time.sleep(3600)
        raise AssertionError("unreachable")

    return _backend("hangs-late", glu_interleave=interleave)


def glu_only() -> Backend:
    """The reference for ``glu.interleave`` alone: every other contract is not implemented."""
    return Backend(name="glu-only", device="cpu", array_kind="numpy",
                   contracts={"glu.interleave": reference.glu.interleave}, info={"module": "reference"},
                   validates_inputs=True)  # fmt: skip
