"""Triton plumbing shared by the kernels of ``fast/``: mode-aware jit and the rounding device functions.

Kernels and device functions are written as plain Python functions and decorated lazily by
:func:`jit`, once per value of ``TRITON_INTERPRET``: ``triton.jit`` reads that variable when it
decorates, and an interpreted kernel cannot call a device function decorated for the compiler (or
the other way round).  :func:`jit` therefore decorates the kernel together with every function
marked :func:`device` that it names, recursively, each bound for the same mode.  A process that
imported ``fast`` can still switch the interpreter on before its first launch (CI checks the
kernels on CPU this way).  A device function marked with :func:`device_modes` has two bodies of one
signature and one contract: the decorated one for compiled kernels (hardware instructions) and an
``interpreted`` one that :func:`jit` binds instead under the interpreter, where those instructions are
emulated wrongly (Triton 3.9's interpreter mis-rounds float32 -> fp8 casts whose rounding carries into
the exponent).  Tests check the interpreted body on CPU and the compiled one on the GPU against the
same reference.  :func:`gluon_jit` binds a Gluon kernel (Triton's dialect with explicit layouts, compiled only:
Gluon has no interpreter) to the compiled bodies of the same device functions.

Device functions
----------------
- :func:`float32_bits`: an input block (float32, bfloat16 or float16) as ``(signed, bits)``: the
  input's own sign in bit 31 of ``signed`` (widening can drop a NaN's sign) and the exact float32
  bit pattern ``bits`` (bfloat16 by a 16-bit shift: Triton 3.9's interpreter flushes bfloat16
  subnormals in ``.to(tl.float32)``).
- :func:`round_to_code`: the integer rounding core of every narrow float cast (fp8, fp6, fp4):
  rounding (nearest even, toward zero, stochastic with explicit random bits), the overflow code,
  the sign and the NaN codes.  ``fast/cast.py``'s module docstring derives it.
- :func:`e8m0_byte`: an E8M0 scale byte from float32 bits and the mantissa thresholds of a rounding.
- :func:`fp8_code`: the saturating round-to-nearest-even FP8 (E4M3FN, E5M2) code of float32 values:
  the hardware conversion ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`` (two elements per instruction on
  sm_89+) when compiled, :func:`round_to_code` when interpreted.

Launches
--------
Triton's ``JITFunction`` binds every argument and looks up its cache on each call, host time comparable
to a memory-bound kernel's device time.  :class:`LaunchCache` keeps the ``CompiledKernel`` a first call
returned, bound to its grid, so that later calls with the same key launch it directly.
"""

from __future__ import annotations

import functools
import inspect
import os
import types
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

try:  # Triton is optional: ``fast`` imports without it and takes its torch paths.
    import triton
    import triton.language as tl
except ImportError:
    triton = None
    tl = None

__all__ = [
    "PATH_ENV",
    "LaunchCache",
    "device",
    "device_modes",
    "e8m0_byte",
    "float32_bits",
    "fp8_code",
    "gluon_jit",
    "gluon_sm90_ptx",
    "jit",
    "round_to_code",
    "selected_path",
    "wait_for_primary",
]

PATH_ENV = "QCONFORM_FAST_PATH"
"""Environment variable choosing the implementation at each call: ``auto``, ``triton`` or ``torch``."""
_PATHS: tuple[str, ...] = ("auto", "triton", "torch")

_DEVICE_MARK = "__qconform_device__"
_INTERPRETED_MARK = "__qconform_interpreted__"


def selected_path(tensor_device: Any) -> str:
    """``"triton"`` or ``"torch"`` for tensors on ``tensor_device``, from ``QCONFORM_FAST_PATH``.

    ``auto`` (default): the kernel for CUDA tensors when Triton is importable, else torch; ``triton``:
    always the kernel (CPU tensors then need ``TRITON_INTERPRET=1``); ``torch``: always the torch path.
    """
    choice = os.environ.get(PATH_ENV, "auto")
    if choice not in _PATHS:
        raise ValueError(f"Got {PATH_ENV}={choice!r}, but {PATH_ENV} must be one of {list(_PATHS)}")
    if choice == "auto":
        return "triton" if tensor_device.type == "cuda" and triton is not None else "torch"
    if choice == "triton" and triton is None:
        raise RuntimeError(f"Got {PATH_ENV}=triton, but triton is not installed")
    if choice == "triton" and tensor_device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            f"Got {PATH_ENV}=triton and a tensor on {tensor_device}, but the Triton kernels run CPU tensors only in "
            "Triton's interpreter: set TRITON_INTERPRET=1 before the first call in this process"
        )
    return choice


def device(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``fn`` as a Triton device function, decorated by :func:`jit` with the kernels that call it."""
    setattr(fn, _DEVICE_MARK, True)
    return fn


def device_modes(*, interpreted: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark the decorated function as a device function whose body under the interpreter is ``interpreted``.

    Both bodies take the same arguments and meet the same contract; :func:`jit` binds the decorated body
    into compiled kernels and ``interpreted`` (itself free to call other device functions) into
    interpreted ones.
    """

    def mark(compiled: Callable[..., Any]) -> Callable[..., Any]:
        setattr(compiled, _INTERPRETED_MARK, interpreted)
        return device(compiled)

    return mark


def jit(fn: Callable[..., Any]) -> Any:
    """``triton.jit(fn)`` for the current ``TRITON_INTERPRET``, with its device functions bound alike."""
    return _jit(fn, os.environ.get("TRITON_INTERPRET"))


def gluon_jit(fn: Callable[..., Any]) -> Any:
    """``gluon.jit(fn)``: a kernel of Gluon, Triton's dialect with explicit layouts (compiled only, no interpreter),
    with its device functions bound alike (their compiled bodies), so that it shares them with the Triton kernels."""
    return _jit(fn, _GLUON)


def gluon_sm90_ptx(
    fn: Callable[..., Any],
    types: Mapping[str, str],
    constexprs: Mapping[str, Any],
    aligned: Sequence[str] = (),
    **options: Any,
) -> str:
    """The PTX of the Gluon kernel ``fn`` (bound as :func:`gluon_jit` binds it) for sm_90, compiled without
    a GPU (Triton ships ptxas; the CPU tests read it): ``types`` gives each runtime argument's Triton type (``"i32"``
    where absent), ``constexprs`` the constexprs, ``aligned`` the runtime arguments to specialize as a launch does for
    16-byte aligned pointers and multiples of 16, ``options`` the compile options (``num_warps``, ``maxnreg``, ...)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import compile as triton_compile
    from triton.experimental.gluon._runtime import GluonASTSource

    kernel = gluon_jit(fn)
    names = list(kernel.arg_names)
    signature = {
        name: "constexpr" if index in kernel.constexprs else types.get(name, "i32") for index, name in enumerate(names)
    }
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in aligned}
    source = GluonASTSource(fn=kernel, signature=signature, constexprs=dict(constexprs), attrs=attrs)
    return triton_compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]


_GLUON = "gluon"
""":func:`_jit`'s mode for :func:`gluon_jit` (the others are values of ``TRITON_INTERPRET``)."""


@functools.cache
def _jit(fn: Callable[..., Any], mode: str | None) -> Any:
    namespace = dict(fn.__globals__)
    for name in fn.__code__.co_names:
        target = namespace.get(name)
        if getattr(target, _DEVICE_MARK, False):
            body = getattr(target, _INTERPRETED_MARK, target) if mode == "1" else target
            namespace[name] = _jit(body, mode)
    bound = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    bound.__module__, bound.__qualname__, bound.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
    bound.__annotations__ = dict(fn.__annotations__)
    if mode == _GLUON:
        from triton.experimental import gluon

        return gluon.jit(bound)
    return triton.jit(bound)


class LaunchCache:
    """Compiled launches of one kernel by key (module docstring, "Launches").

    The key must hold everything the compiled kernel depends on besides the runtime argument values: shapes
    and constexprs, dtypes, the device and each pointer's 16-byte alignment (Triton specializes on it).
    ``kernel`` is the plain function (its signature gives the constexpr names after ``runtime_args``).
    """

    def __init__(self, kernel: Callable[..., Any], runtime_args: int, max_entries: int = 1024) -> None:
        self._constexprs = list(inspect.signature(kernel).parameters)[runtime_args:]
        self._max_entries = max_entries
        self._launches: dict[Hashable, tuple[Any, tuple[Any, ...]]] = {}

    def __len__(self) -> int:
        """How many launches are cached."""
        return len(self._launches)

    def launch(self, key: Hashable, args: Sequence[Any]) -> bool:
        """Launch the kernel cached under ``key`` with the runtime ``args``; ``False`` when none is cached."""
        cached = self._launches.get(key)
        if cached is None:
            return False
        runner, constants = cached
        runner(*args, *constants)
        return True

    def constant(self, key: Hashable, name: str) -> Any:
        """The constexpr ``name`` of the launch cached under ``key`` (a tile the autotuner chose, say)."""
        return self._launches[key][1][self._constexprs.index(name)]

    def store(self, key: Hashable, compiled: Any, grid: int, meta: Mapping[str, Any]) -> None:
        """Keep ``compiled`` (what the first launch returned) on a 1-D ``grid`` with the constexprs in ``meta``."""
        if len(self._launches) >= self._max_entries:
            self._launches.clear()
        self._launches[key] = (compiled[(grid, 1, 1)], tuple(meta[name] for name in self._constexprs))


@device
def float32_bits(raw, INPUT: tl.constexpr):
    """``(signed, bits)`` of an input block; INPUT 0 float32, 1 bfloat16, 2 float16."""
    signed = raw.to(tl.int32, bitcast=True) if INPUT == 0 else raw.to(tl.int16, bitcast=True).to(tl.int32)
    bits = signed if INPUT == 0 else signed << 16 if INPUT == 1 else raw.to(tl.float32).to(tl.int32, bitcast=True)
    return signed, bits


@device
def round_to_code(
    bits,
    signed,
    random,
    MANTISSA_BITS: tl.constexpr,
    BIAS: tl.constexpr,
    SIGN_SHIFT: tl.constexpr,
    SIGN_MASK: tl.constexpr,
    SIGNED_ZERO: tl.constexpr,
    OVERFLOW_CODE: tl.constexpr,
    NAN_CODE: tl.constexpr,
    NEGATIVE_NAN_CODE: tl.constexpr,
    ROUNDING: tl.constexpr,
    RANDOM_BITS: tl.constexpr,
):
    """The int32 code of float32 ``bits`` (sign from ``signed``); ``random`` is used by stochastic rounding only.

    ROUNDING 0 rne, 1 rtz, 2 stochastic with RANDOM_BITS-bit ``random`` (uint8 values, or uint32
    carried as int32).  OVERFLOW_CODE is the largest finite magnitude code (saturate) or the one
    after it (non-saturating).
    """
    magnitude = bits & 0x7FFFFFFF
    exponent = tl.maximum(magnitude >> 23, 1)
    value = tl.where(
        exponent > 127 - BIAS,
        magnitude - ((127 - BIAS) << 23),
        magnitude - ((exponent - 1) << 23),
    )
    full_shift = tl.maximum((151 - MANTISSA_BITS - BIAS) - exponent, 23 - MANTISSA_BITS)
    shift = tl.minimum(full_shift, 31)
    if ROUNDING == 0:  # rne
        code = (value + ((1 << (shift - 1)) - 1) + ((value >> shift) & 1)) >> shift
    elif ROUNDING == 1:  # rtz
        code = value >> shift
    else:  # stochastic: q = floor(d * 2^k / 2^s) > 2^k - 1 - r, in uint32
        kept = value >> shift
        dropped = (value - (kept << shift)).to(tl.uint32, bitcast=True)
        left = tl.maximum(RANDOM_BITS - full_shift, 0).to(tl.uint32)
        right = tl.minimum(tl.maximum(full_shift - RANDOM_BITS, 0), 31).to(tl.uint32)
        q = (dropped << left) >> right
        limit = ~random.to(tl.uint32, bitcast=True) if RANDOM_BITS == 32 else 255 - random.to(tl.uint32)
        code = kept + (q > limit).to(tl.int32)

    # Overflow policy, sign, NaN.
    code = tl.minimum(code, OVERFLOW_CODE)
    sign = (signed >> SIGN_SHIFT) & SIGN_MASK
    if not SIGNED_ZERO:
        sign = tl.where(code == 0, 0, sign)
    return tl.where(magnitude > 0x7F800000, tl.where(signed < 0, NEGATIVE_NAN_CODE, NAN_CODE), code | sign)


@device
def e8m0_byte(
    bits,
    signed,
    SUBNORMAL_THRESHOLD: tl.constexpr,
    NORMAL_THRESHOLD: tl.constexpr,
    OVERFLOW_BYTE: tl.constexpr,
    ZERO_IS_NAN: tl.constexpr,
):
    """The int32 E8M0 byte of float32 ``bits``: exponent field plus a carry when the mantissa reaches the threshold."""
    magnitude = bits & 0x7FFFFFFF
    exponent = magnitude >> 23
    threshold = tl.where(exponent == 0, SUBNORMAL_THRESHOLD, NORMAL_THRESHOLD)
    byte = exponent + ((magnitude & 0x7FFFFF) >= threshold).to(tl.int32)
    byte = tl.where(byte > 0xFE, OVERFLOW_BYTE, byte)
    not_a_scale = magnitude > 0x7F800000
    if ZERO_IS_NAN:
        not_a_scale = not_a_scale | (signed <= 0)
    return tl.where(not_a_scale, 0xFF, byte)


@device
def _fp8_code_interpreted(value, E5M2: tl.constexpr):
    """:func:`fp8_code` in integer arithmetic (:func:`round_to_code`), as the interpreter cannot run the cast."""
    bits = value.to(tl.int32, bitcast=True)
    if E5M2:
        code = round_to_code(bits, bits, bits, 2, 15, 24, 0x80, True, 0x7B, 0x7F, 0x7F, 0, 8)
    else:
        code = round_to_code(bits, bits, bits, 3, 7, 24, 0x80, True, 0x7E, 0x7F, 0x7F, 0, 8)
    return code.to(tl.uint8)


@device_modes(interpreted=_fp8_code_interpreted)
def fp8_code(value, E5M2: tl.constexpr):
    """uint8 FP8 code of float32 ``value``: E4M3FN, or E5M2 if E5M2; round to nearest even, saturating.

    Finite values beyond the largest finite magnitude and infinities give +-max (E4M3FN 0x7E/0xFE, E5M2
    0x7B/0xFB), -0 gives 0x80, float32 subnormals give +-0, and NaN gives 0x7F whatever its sign.
    Compiled: ``cvt.rn.satfinite.e4m3x2.f32`` / ``e5m2x2`` (sm_89+), which is what Triton lowers
    ``.to(tl.float8e4nv)`` / ``.to(tl.float8e5)`` to there; interpreted: :func:`round_to_code`.
    ``tests/gpu/test_gpu_mx.py`` checks the hardware against ``reference.cast.fp8`` on every bfloat16
    pattern, float32 boundaries and both NaN signs.
    """
    if E5M2:
        return value.to(tl.float8e5).to(tl.uint8, bitcast=True)
    return value.to(tl.float8e4nv).to(tl.uint8, bitcast=True)


@device
def wait_for_primary():
    """``griddepcontrol.wait`` (sm_90+): in a kernel launched as a programmatic dependent (``launch_pdl``), wait
    until the kernel before it on the stream has finished and its writes are visible.  The compiled kernel only:
    the interpreter has no inline assembly."""
    tl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
