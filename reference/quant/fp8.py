"""FP8 per-tensor scaling recipes of TransformerEngine (contracts ``quant.fp8_tensor``, ``quant.fp8_delayed``).

Both recipes scale a whole tensor by one float32 ``scale`` and cast ``fl32(float(x) * scale)`` to FP8
with round to nearest even and saturation to the largest finite value (``cvt.rn.satfinite``).  They
differ in where the scale comes from: *current* scaling derives it from this tensor's amax
(:func:`scale_from_amax`), *delayed* scaling uses a scale computed from the amax history of earlier
steps and records this tensor's amax for the next update.

Names follow TransformerEngine's buffers: ``scale`` multiplies before the cast (``fp8_max / amax``),
``scale_inv`` multiplies after decoding (the dequantization factor), ``amax`` is the absolute
maximum.  ``data`` is the rowwise FP8 data (TE ``_data``), ``columnwise_data`` its transposed copy
(TE ``_transpose``), shape ``[K, *rest]`` for ``x`` of shape ``[*rest, K]``, bit-identical to
transposing ``data`` because both use the same scale.

Source: NVIDIA/TransformerEngine@d0067d0 ``transformer_engine/common/recipe/recipe_common.cuh``
(``compute_scale_from_amax``), ``common/recipe/current_scaling.cu`` (amax, scale kernels),
``common/recipe/delayed_scaling.cu`` (history update kernels), ``pytorch/quantization.py``.
"""

from __future__ import annotations

import math

import numpy as np

from reference._checks import check_array, check_choice
from reference.cast import fp8 as cast_fp8
from reference.formats import get_format

__all__ = [
    "AMAX_COMPUTE_ALGOS",
    "DELAYED_UPDATES",
    "FP8_FORMATS",
    "INF_SCALES",
    "USAGES",
    "X_DTYPES",
    "fp8_delayed",
    "fp8_tensor",
    "scale_from_amax",
]

FP8_FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
"""The recipes' element formats (TE ``Float8Format.E4M3`` / ``E5M2``), max 448 and 57344."""
USAGES: tuple[str, ...] = ("both", "rowwise", "columnwise")
"""Which copies are produced: ``data``, ``columnwise_data`` (transposed) or both."""
INF_SCALES: tuple[str, ...] = ("float32_max", "input_max")
"""What an infinite ``fp8_max / amax`` becomes: FLT_MAX, or the largest finite value of x's dtype."""
X_DTYPES: tuple[str, ...] = ("bfloat16", "float32", "float16")
"""Input dtypes (bfloat16 values arrive as float32, so the reference is told the dtype)."""
AMAX_COMPUTE_ALGOS: tuple[str, ...] = ("max", "most_recent")
"""Delayed scaling: the amax behind the new scale, the history's maximum or its newest entry."""
DELAYED_UPDATES: tuple[str, ...] = ("fused", "unfused")
"""Delayed scaling: which update kernel (they differ when the newest amax is zero)."""

F32 = np.float32
_F32_MAX = float(np.finfo(np.float32).max)
_DTYPE_MAX = {"float32": _F32_MAX, "bfloat16": float(get_format("bfloat16").max_finite), "float16": 65504.0}
_MAX_MARGIN = 64


def scale_from_amax(
    amax: np.ndarray, fp8_max: float, *, power_2_scale: bool, epsilon: float, value_for_inf: float
) -> np.ndarray:
    """TE's ``compute_scale_from_amax`` over float32 amaxes (any shape), in float32.

    1. ``amax < epsilon`` gives ``epsilon`` (NaN fails the comparison and stays NaN);
    2. amax ±Inf, 0 or NaN gives scale 1 (and nothing below applies);
    3. ``scale = fp8_max / amax``, an IEEE float32 division (``__fdiv_rn``);
    4. an infinite scale (amax at most about ``fp8_max / FLT_MAX``: float32 subnormals and tiny normals,
       e.g. below 1.3e-36 for E4M3) becomes ``value_for_inf``;
    5. ``power_2_scale``: the mantissa bits are cleared (``bits & 0xFF800000``), rounding the scale
       down to a power of two.
    """
    amax = np.asarray(amax, dtype=F32)
    amax = np.where(amax < F32(epsilon), F32(epsilon), amax)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        scale = F32(fp8_max) / amax
    scale = np.where(np.isinf(scale), F32(value_for_inf), scale).astype(F32)
    if power_2_scale:
        scale = (scale.view(np.uint32) & np.uint32(0xFF80_0000)).view(F32)
    return np.where(np.isinf(amax) | np.isnan(amax) | (amax == 0), F32(1), scale).astype(F32)


def fp8_tensor(
    x: np.ndarray,
    *,
    format: str,
    power_2_scale: bool = False,
    epsilon: float = 0.0,
    inf_scale: str = "float32_max",
    usage: str = "both",
    x_dtype: str | None = None,
) -> dict[str, np.ndarray]:
    """Quantize ``x`` to FP8 with one scale from its own amax (TE ``Float8CurrentScaling``).

    Contract
    --------
    ``quant.fp8_tensor``: ``amax = max|x|`` over the whole tensor, NaN ignored (0 for an empty
    tensor); ``scale = scale_from_amax(amax, fp8_max, power_2_scale, epsilon, value_for_inf)``
    (:func:`scale_from_amax`) with ``fp8_max`` 448 (E4M3) or 57344 (E5M2) and ``value_for_inf``
    FLT_MAX (``inf_scale="float32_max"``) or the largest finite value of ``x_dtype``
    (``"input_max"``: bfloat16 ``0x1.FEp127``, float16 65504, float32 FLT_MAX); ``scale_inv`` the
    correctly rounded float32 reciprocal of ``scale``; ``data = satfinite_rne(fl32(x * scale))``.

    Source
    ------
    TE ``Float8CurrentScalingQuantizer::quantize_impl`` (``pytorch/csrc/quantizer.cpp``):
    ``nvte_compute_amax``, ``nvte_compute_scale_from_amax`` (value_for_inf = FLT_MAX), then the cast
    with ``scale_inv = __frcp_rn(scale)``.  ``inf_scale="input_max"`` is TE's Python references
    (``tests/pytorch/references/quantize_scale_calc.py``,
    ``pytorch/custom_recipes/reference_current_scaling.py``), which otherwise differ from the
    kernel only where this contract follows the kernel (pow2 with amax Inf gives 1, not 0; a NaN
    amax cannot arise since amax ignores NaN).  ``specs/quant/fp8_tensor.yaml``.

    Encoding
    --------
    ``x``: float32 or float16 array of rank >= 1 (bfloat16 values as float32, with
    ``x_dtype="bfloat16"``), shape ``[*rest, K]``.  Outputs: ``amax``, ``scale``, ``scale_inv``
    float32 ``[1]``; ``data`` uint8 ``x.shape`` (unless ``usage="columnwise"``); ``columnwise_data``
    uint8 ``[K, *rest]`` (unless ``usage="rowwise"``), ``columnwise_data[k, ...] = data[..., k]``.

    Edge cases
    ----------
    - amax 0 (all zeros, all NaN, empty), Inf (an infinite element) -> scale 1, scale_inv 1.
    - amax a float32 subnormal -> ``fp8_max / amax`` is infinite -> ``value_for_inf`` (with
      ``power_2_scale`` 2**127, scale_inv 2**-127, a float32 subnormal).
    - ``epsilon`` > 0: amax below it is raised to it first (zero tensors get ``fp8_max / epsilon``).
    - Elements: ±Inf and overflow saturate to ±max (E4M3 0x7E/0xFE, E5M2 0x7B/0xFB); -0.0 -> 0x80;
      NaN -> a NaN code (0x7F or 0xFF; the sign is unspecified: TE's multiply loses it on the GPU).

    Raises ``TypeError`` unless ``x`` is a float32 or float16 array; ``ValueError`` for an unknown
    ``format``, ``inf_scale``, ``usage`` or ``x_dtype``, an ``x_dtype`` that contradicts ``x``
    (bfloat16 values must have zero low 16 bits), a negative or non-finite ``epsilon``, and a 0-d ``x``.
    """
    x32, dtype = _check_x(x, x_dtype)
    check_choice("format", format, FP8_FORMATS)
    check_choice("power_2_scale", power_2_scale, (False, True))
    check_choice("inf_scale", inf_scale, INF_SCALES)
    check_choice("usage", usage, USAGES)
    _check_epsilon(epsilon)
    amax = _amax(x32)
    value_for_inf = _F32_MAX if inf_scale == "float32_max" else _DTYPE_MAX[dtype]
    fp8_max = get_format(format).max_finite
    scale = scale_from_amax(amax, fp8_max, power_2_scale=power_2_scale, epsilon=epsilon, value_for_inf=value_for_inf)
    out = {"amax": amax.reshape(1), "scale": scale.reshape(1), "scale_inv": _reciprocal(scale).reshape(1)}
    out.update(_cast_with_scale(x32, scale, format, usage))
    return out


def fp8_delayed(
    x: np.ndarray,
    amax_history: np.ndarray,
    scale: np.ndarray,
    *,
    format: str,
    amax_compute_algo: str = "max",
    margin: int = 0,
    update: str = "fused",
    usage: str = "both",
) -> dict[str, np.ndarray]:
    """One step of TE's delayed scaling: cast ``x`` with the given scale, record its amax, update.

    Contract
    --------
    ``quant.fp8_delayed``, in TE's order:

    1. Cast: ``data = satfinite_rne(fl32(x * scale))`` with the given ``scale``;
       ``scale_inv = fl32(1 / scale)``; ``amax = max|x|``, NaN ignored.
    2. Record: the cast kernel's ``atomicMaxFloat(&history[0], amax)``, an integer max of the
       float32 bit patterns (``amax`` is never negative): ``history[0]`` becomes ``amax`` when
       ``int32(bits(history[0])) < int32(bits(amax))`` (a positive NaN stays, a negative value or
       NaN is replaced).
    3. Update with ``last = history[0]``.  ``update="fused"`` skips steps 3-4 entirely when
       ``last == 0`` (history unchanged, amax 0, old scale kept).  Otherwise the history rolls:
       ``new[L-1] = last``, ``new[i] = history[i+1]`` for ``1 <= i <= L-2``, ``new[0] = 0`` (for
       ``L == 1``: ``[0]``).  ``amax_compute_algo="max"``: ``a = fmax(0, history[0..L-1])`` (NaN and
       negative entries ignored); ``"most_recent"``: ``a = last``.
    4. ``scaled_max = fp8_max * 2**-margin``; if ``a`` is finite and > 0, ``new_scale =
       fl32(scaled_max / a)``, else the old scale is kept; an infinite result (either way) becomes
       FLT_MAX.

    Source
    ------
    TE ``common/recipe/delayed_scaling.cu``: ``update="fused"`` is ``kernel_bulk``
    (``nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction``, which PyTorch TE runs,
    ``pytorch/quantization.py`` ``tex.fused_amax_and_scale_update_after_reduction``),
    ``"unfused"`` is ``kernel`` (``nvte_delayed_scaling_recipe_amax_and_scale_update``, the C API's
    single-tensor update).  TE's Python fallback (``NVTE_UNFUSED_FP8_UPDATE=1``, ``torch.max``
    propagating NaN, ``(fp8_max / amax) / 2**margin`` under ``torch.compile``) is not modelled.
    ``specs/quant/fp8_delayed.yaml``.

    Encoding
    --------
    ``x`` as :func:`fp8_tensor` (any float dtype); ``amax_history`` float32 ``[L]`` (one quantizer's
    column of TE's ``[L, n]`` history), ``scale`` float32 ``[1]``.  Outputs: ``data``,
    ``columnwise_data`` as :func:`fp8_tensor`; ``scale_inv`` float32 ``[1]`` (of the scale used);
    ``amax`` float32 ``[1]`` (of ``x``); ``amax_history`` float32 ``[L]`` and ``scale`` float32 ``[1]``
    after the update.

    Edge cases
    ----------
    - A NaN product (NaN element, or 0 * Inf with an infinite scale) gives a NaN code, sign unspecified.
    - ``scale`` 0 -> ``scale_inv`` +Inf; ``scale`` NaN is kept by an update that keeps the old scale.
    - amax Inf or NaN in the history under ``"max"``: Inf wins (old scale kept); NaN is ignored.

    Raises ``TypeError`` unless ``x`` is a float32/float16 array and ``amax_history``, ``scale`` float32
    arrays; ``ValueError`` for an unknown ``format``, ``amax_compute_algo``, ``update`` or ``usage``,
    ``amax_history`` not of shape ``[L]`` with ``L >= 1``, ``scale`` not of shape ``[1]``, ``margin``
    not an int in 0..64, and a 0-d ``x``.
    """
    x32, _ = _check_x(x, None)
    check_array("amax_history", amax_history, (np.float32,))
    check_array("scale", scale, (np.float32,))
    check_choice("format", format, FP8_FORMATS)
    check_choice("amax_compute_algo", amax_compute_algo, AMAX_COMPUTE_ALGOS)
    check_choice("update", update, DELAYED_UPDATES)
    check_choice("usage", usage, USAGES)
    if amax_history.ndim != 1 or amax_history.shape[0] < 1:
        raise ValueError(f"Got amax_history.shape={amax_history.shape}, but amax_history must have shape [L], L >= 1")
    if scale.shape != (1,):
        raise ValueError(f"Got scale.shape={scale.shape}, but scale must have shape [1]")
    if isinstance(margin, bool) or not isinstance(margin, (int, np.integer)) or not 0 <= margin <= _MAX_MARGIN:
        raise ValueError(f"Got margin={margin!r}, but margin must be an int in 0..{_MAX_MARGIN}")

    old_scale = scale.astype(F32).reshape(())
    amax = _amax(x32)
    out = {"scale_inv": _reciprocal(old_scale).reshape(1), "amax": amax.reshape(1)}
    out.update(_cast_with_scale(x32, old_scale, format, usage))

    history = amax_history.astype(F32).copy()
    if history[:1].view(np.int32)[0] < amax.reshape(1).view(np.int32)[0]:
        history[0] = amax
    last = history[0]
    if update == "fused" and last == 0:
        chosen, new_history = F32(0), history
    else:
        new_history = np.roll(history, -1)
        new_history[0] = 0
        chosen = _without_nan(history).max(initial=F32(0)) if amax_compute_algo == "max" else last
    scaled_max = F32(math.ldexp(get_format(format).max_finite, -int(margin)))
    new_scale = old_scale
    if np.isfinite(chosen) and chosen > 0:
        with np.errstate(over="ignore"):
            new_scale = np.asarray(scaled_max / F32(chosen), dtype=F32)
    if np.isinf(new_scale):
        new_scale = np.asarray(_F32_MAX, dtype=F32)
    out["amax_history"] = new_history.astype(F32)
    out["scale"] = np.asarray(new_scale, dtype=F32).reshape(1)
    return out


# -- shared pieces ------------------------------------------------------------------------------------
def _check_x(x: object, x_dtype: str | None) -> tuple[np.ndarray, str]:
    """``x`` as float32 and its logical dtype; ``TypeError``/``ValueError`` as the public docstrings say."""
    check_array("x", x, (np.float32, np.float16))
    assert isinstance(x, np.ndarray)
    if x_dtype is not None:
        check_choice("x_dtype", x_dtype, X_DTYPES)
    dtype = x_dtype or x.dtype.name
    if (x.dtype == np.float16) != (dtype == "float16"):
        raise ValueError(f"Got x.dtype={x.dtype} and x_dtype={x_dtype!r}, but they must name the same dtype")
    if dtype == "bfloat16" and np.any(x.reshape(-1).view(np.uint32) & 0xFFFF):
        raise ValueError("Got x_dtype='bfloat16', but x holds float32 values that are not bfloat16 values")
    if x.ndim == 0:
        raise ValueError(f"Got x.shape={x.shape}, but x must have at least one dimension (its last is K)")
    return x.astype(F32), dtype


def _check_epsilon(epsilon: object) -> None:
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon < math.inf:
        raise ValueError(f"Got epsilon={epsilon!r}, but epsilon must be a finite number >= 0")


def _amax(x: np.ndarray) -> np.ndarray:
    """max |x| over every element as a float32 0-d array, NaN ignored, 0 for an empty or all-NaN ``x``."""
    return _without_nan(np.abs(x)).max(initial=F32(0)).astype(F32).reshape(())


def _without_nan(values: np.ndarray) -> np.ndarray:
    """``values`` with every NaN replaced by 0.

    Not ``np.fmax.reduce``: NumPy 2.4's vectorised ``fmax`` reduction mishandles signalling NaNs
    (float32 0x7F802000, what float16 0x7C01 widens to) and can return 0 past a larger value.
    """
    return np.where(np.isnan(values), F32(0), values)


def _reciprocal(scale: np.ndarray) -> np.ndarray:
    """The correctly rounded float32 ``1 / scale`` (``__frcp_rn``): ±0 -> ±Inf, ±Inf -> ±0."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return (F32(1) / np.asarray(scale, dtype=F32)).astype(F32)


def _cast_with_scale(x: np.ndarray, scale: np.ndarray, format: str, usage: str) -> dict[str, np.ndarray]:
    """``data`` / ``columnwise_data`` of ``satfinite_rne(fl32(x * scale))`` per ``usage`` (float32 ``x``)."""
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (x * np.asarray(scale, dtype=F32)).astype(F32)
    codes = cast_fp8(scaled, format=format, overflow="saturate")["codes"]
    out = {}
    if usage != "columnwise":
        out["data"] = codes
    if usage != "rowwise":
        out["columnwise_data"] = np.ascontiguousarray(np.moveaxis(codes, -1, 0))
    return out
