"""The ``onnx-reference`` and ``onnxruntime`` backends: ONNX's own evaluators on one-node graphs.

Each case becomes a one-node ONNX model built with ``onnx.helper`` (opset :data:`OPSET`): the
contract's first float input is the graph input, every other input (scales, zero points, codes of
types NumPy lacks, such as int4) is an initializer, and outputs NumPy cannot hold (int4, uint4,
bfloat16) get one exact ``Cast`` (to int8 / uint8 / float32) after the node.  ``onnx-reference`` runs
the model in ``onnx.reference.ReferenceEvaluator``; ``onnxruntime`` in an ``InferenceSession`` with
graph optimizations off (so the kernel of the execution provider runs, not the CPU constant folder),
on the provider named by ``onnxruntime:<Provider>`` or ``QCONFORM_ORT_PROVIDER`` (default
``CPUExecutionProvider``).

What each claims (``supports``), following ONNX's operators; ``onnxruntime`` claims a row only where the
provider has a kernel for it: it makes a session of the row's one-node model once (with CPU fallback off
for other providers) and reports ``NOT_IMPLEMENTED`` as the row's not-implemented reason (onnxruntime
1.32 CPU: no FP4 QuantizeLinear or DequantizeLinear, no bfloat16 DequantizeLinear output).

- ``quant.qdq`` (QuantizeLinear 25): ``division="true_divide"`` (ONNX's formula) and
  ``nan="minimum"`` (what both give on x86; the text leaves NaN undefined).
- ``dequant.qdq`` (DequantizeLinear 25): every row; a ``precision`` row is what the backend is judged on,
  and the divergence between them is a finding (``docs/findings.md``).
- ``cast.fp8`` (Cast 25 with ``saturate``): ``rounding="rne"`` only; ``cast.fp4``: ``rne`` with
  ``nan="max"`` (ONNX's float4.md: NaN -> 6); ``cast.int``: int4 / uint4 with ``mode="rne_wrap"`` (ONNX's
  int4.md: round half to even, then truncate to 4 bits).

bfloat16 inputs reach NumPy backends as float32 holding the bfloat16 value, and are run as float32:
the quotient and the cast are the same, only the bfloat16 input kernel is not exercised.
Loaded lazily: without onnx (``pip install -e '.[onnx]'``) the backend raises ``BackendError`` when
loaded, naming the missing package; listing backends needs neither package.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from conformance.backends import Backend, Implementation
from conformance.errors import BackendError

__all__ = ["OPSET", "build_cast", "build_dequantize", "build_quantize", "onnxruntime_backend", "reference_backend"]

OPSET = 25
IR_VERSION = 11
PROVIDER_ENV = "QCONFORM_ORT_PROVIDER"
_FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
_FOUR_BIT = ("uint4", "int4", "float4_e2m1fn")
_WIDE = ("uint16", "int16")


def _import_onnx() -> Any:
    try:
        import onnx
        from onnx import helper  # noqa: F401
    except ImportError as exc:
        raise BackendError(f"onnx is not installed ({exc}); pip install -e '.[onnx]'") from exc
    return onnx


def _types() -> dict[str, int]:
    tp = _import_onnx().TensorProto
    return {
        "float32": tp.FLOAT, "float16": tp.FLOAT16, "bfloat16": tp.BFLOAT16,
        "uint8": tp.UINT8, "int8": tp.INT8, "uint16": tp.UINT16, "int16": tp.INT16,
        "uint4": tp.UINT4, "int4": tp.INT4, "float4_e2m1fn": tp.FLOAT4E2M1,
        "float8_e4m3fn": tp.FLOAT8E4M3FN, "float8_e4m3fnuz": tp.FLOAT8E4M3FNUZ,
        "float8_e5m2": tp.FLOAT8E5M2, "float8_e5m2fnuz": tp.FLOAT8E5M2FNUZ,
    }  # fmt: skip


def _raw(codes: np.ndarray, dtype: str) -> bytes:
    """Codes (uint8 / uint16 carriers) as ONNX raw_data: 4-bit types packed two per byte, low nibble first,
    the flattened tensor padded with one nibble when odd (ONNX int4.md, float4.md)."""
    flat = np.ascontiguousarray(codes).reshape(-1)
    if dtype in _FOUR_BIT:
        nibbles = np.concatenate([flat.astype(np.uint8) & 0xF, np.zeros(flat.size % 2, np.uint8)])
        return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8).tobytes()
    return flat.astype("<u2" if dtype in _WIDE else np.uint8).tobytes()


def _initializer(name: str, array: np.ndarray, dtype: str, shape: tuple[int, ...]) -> Any:
    helper = _import_onnx().helper
    if dtype == "float32":
        return helper.make_tensor(name, _types()[dtype], shape, np.asarray(array, np.float32).reshape(-1).tolist())
    return helper.make_tensor(name, _types()[dtype], shape, _raw(array, dtype), raw=True)


def _scale_shape(scale: np.ndarray, granularity: str, axis: int) -> tuple[int, ...]:
    """ONNX's shape for a broadcast-aligned [SR, SC] scale: a scalar, 1-D of D_axis, or the blocked 2-D."""
    if granularity == "per_tensor":
        return ()
    if granularity == "per_axis":
        return (int(np.asarray(scale).shape[axis]),)
    return tuple(int(n) for n in np.asarray(scale).shape)


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], initializers: list[Any]) -> Any:
    helper = _import_onnx().helper
    graph = helper.make_graph(nodes, "qconform", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="qconform")
    model.ir_version = IR_VERSION
    return model


def _readable_output(nodes: list[Any], produced: str, dtype: str, shape: tuple[int, ...]) -> tuple[str, Any]:
    """The graph output: ``produced``, or an exact Cast of it for types NumPy lacks (int4, uint4, bfloat16)."""
    helper, types = _import_onnx().helper, _types()
    wider = {"int4": "int8", "uint4": "uint8", "bfloat16": "float32"}.get(dtype)
    if wider is None:
        return produced, helper.make_tensor_value_info(produced, types[dtype], shape)
    nodes.append(helper.make_node("Cast", [produced], ["out"], to=types[wider]))
    return "out", helper.make_tensor_value_info("out", types[wider], shape)


def _x_input(x: np.ndarray, shape: tuple[int, ...]) -> tuple[list[Any], list[Any], dict[str, np.ndarray]]:
    """The graph input ``x`` and its feed; a bfloat16 ``x`` (ml_dtypes) becomes an initializer of its raw bits
    instead, since onnxruntime's Python binding takes no bfloat16 feed (graph optimizations are off)."""
    helper, types = _import_onnx().helper, _types()
    if x.dtype.name == "bfloat16":
        bits = np.ascontiguousarray(x).view(np.uint16).reshape(-1)
        tensor = helper.make_tensor("x", types["bfloat16"], shape, bits.astype("<u2").tobytes(), raw=True)
        return [], [tensor], {}
    x_type = "float16" if x.dtype == np.float16 else "float32"
    return [helper.make_tensor_value_info("x", types[x_type], shape)], [], {"x": x}


def build_quantize(inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> tuple[Any, dict[str, np.ndarray]]:
    """QuantizeLinear for one ``quant.qdq`` case: the model and its feeds."""
    helper, types = _import_onnx().helper, _types()
    x = np.asarray(inputs["x"])
    shape, out = tuple(x.shape), str(params["output_dtype"])
    granularity, axis = str(params["granularity"]), int(params["axis"])
    graph_inputs, x_inits, feeds = _x_input(x, shape)
    scale_shape = _scale_shape(inputs["y_scale"], granularity, axis)
    inits = [_initializer("y_scale", inputs["y_scale"], "float32", scale_shape)]
    names = ["x", "y_scale"]
    zp = inputs.get("y_zero_point16", inputs.get("y_zero_point"))
    attrs: dict[str, Any] = {"axis": axis}
    if zp is not None:
        inits.append(_initializer("y_zero_point", zp, out, scale_shape))
        names.append("y_zero_point")
    else:
        attrs["output_dtype"] = types[out]
    if granularity == "blocked":
        attrs["block_size"] = int(params["block_size"])
    if out in _FLOAT8:
        attrs["saturate"] = int(bool(params["saturate"]))
    nodes = [helper.make_node("QuantizeLinear", names, ["y"], **attrs)]
    _, value_info = _readable_output(nodes, "y", out, shape)
    return _model(nodes, graph_inputs, [value_info], x_inits + inits), feeds


def build_dequantize(inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> tuple[Any, dict[str, np.ndarray]]:
    """DequantizeLinear for one ``dequant.qdq`` case (codes as an initializer: NumPy has no int4)."""
    helper, types = _import_onnx().helper, _types()
    codes = np.asarray(inputs["x16"] if "x16" in inputs else inputs["x"])
    shape, in_type, out = tuple(codes.shape), str(params["input_dtype"]), str(params["output_dtype"])
    granularity, axis = str(params["granularity"]), int(params["axis"])
    # x_scale is the graph input so that the graph is not constant
    scale_shape = _scale_shape(inputs["x_scale"], granularity, axis)
    inits = [_initializer("x", codes, in_type, shape)]
    names = ["x", "x_scale"]
    zp = inputs.get("x_zero_point16", inputs.get("x_zero_point"))
    if zp is not None:
        inits.append(_initializer("x_zero_point", zp, in_type, scale_shape))
        names.append("x_zero_point")
    attrs: dict[str, Any] = {"axis": axis, "output_dtype": types[out]}
    if granularity == "blocked":
        attrs["block_size"] = int(params["block_size"])
    nodes = [helper.make_node("DequantizeLinear", names, ["y"], **attrs)]
    _, value_info = _readable_output(nodes, "y", out, shape)
    graph_input = helper.make_tensor_value_info("x_scale", types["float32"], scale_shape)
    feeds = {"x_scale": np.asarray(inputs["x_scale"], np.float32).reshape(scale_shape)}
    return _model(nodes, [graph_input], [value_info], inits), feeds


def build_cast(x: np.ndarray, target: str, saturate: bool | None) -> tuple[Any, dict[str, np.ndarray]]:
    """Cast of ``x`` (float32 / float16) to ``target`` (``saturate`` for float8 targets)."""
    helper, types = _import_onnx().helper, _types()
    x = np.asarray(x)
    shape = tuple(x.shape)
    attrs: dict[str, Any] = {"to": types[target]}
    if saturate is not None:
        attrs["saturate"] = int(saturate)
    nodes = [helper.make_node("Cast", ["x"], ["y"], **attrs)]
    _, value_info = _readable_output(nodes, "y", target, shape)
    graph_inputs, x_inits, feeds = _x_input(x, shape)
    return _model(nodes, graph_inputs, [value_info], x_inits), feeds


def to_codes(value: np.ndarray, dtype: str) -> np.ndarray:
    """An evaluator's output as the spec's carrier: uint8 / uint16 codes, or float32 values."""
    array = np.asarray(value)
    if dtype in ("float32", "float16", "bfloat16"):
        return array.astype(np.float32)
    if dtype in _WIDE:
        return array.astype(np.int16).view(np.uint16) if dtype == "int16" else array.astype(np.uint16)
    if dtype in ("int4", "uint4", "int8"):
        mask = 0xF if dtype != "int8" else 0xFF
        return (array.astype(np.int16) & mask).astype(np.uint8)
    if array.dtype.itemsize == 1:  # float8 / float4 (ml_dtypes) or raw bytes (onnxruntime)
        codes = array.view(np.uint8)
        return codes & 0xF if dtype == "float4_e2m1fn" else codes
    return array.astype(np.uint8)


Runner = Callable[[Any, dict[str, np.ndarray]], np.ndarray]
Probe = Callable[[str, Any], "str | None"]
"""``probe(key, model)``: ``None`` when the runtime has a kernel for ``model``'s node, else why not."""


def _zeros_like_case(contract: str, params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A 2x2 case of ``contract`` with ``params``' types and layout, to probe a runtime for a kernel."""
    granularity, axis = str(params.get("granularity", "per_tensor")), int(params.get("axis", 1))
    scale_shape = {"per_tensor": (1, 1), "per_axis": (2, 1) if axis == 0 else (1, 2)}.get(granularity, (2, 2))
    scale = np.ones(scale_shape, np.float32)
    if contract == "quant.qdq":
        out = str(params["output_dtype"])
        arrays = {"x": np.zeros((2, 2), np.float32), "y_scale": scale}
        if out in _INTEGERS:
            arrays["y_zero_point16" if out in _WIDE else "y_zero_point"] = np.zeros(scale_shape, np.uint8)
        return arrays
    in_type = str(params["input_dtype"])
    codes = np.zeros((2, 2), np.uint16 if in_type in _WIDE else np.uint8)
    arrays = {"x16" if in_type in _WIDE else "x": codes, "x_scale": scale}
    if in_type in _INTEGERS:
        arrays["x_zero_point16" if in_type in _WIDE else "x_zero_point"] = np.zeros(scale_shape, codes.dtype)
    return arrays


def _contracts(run: Runner, probe: Probe | None = None) -> dict[str, Implementation]:
    """The four contracts over ``run``; with ``probe``, a row is claimed only where the runtime has a kernel."""

    def quantize(**kwargs: Any) -> dict[str, np.ndarray]:
        params = {k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray)}
        arrays = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray)}
        out = str(params["output_dtype"])
        codes = to_codes(run(*build_quantize(arrays, params)), out)
        return {"y16": codes} if out in _WIDE else {"y": codes}

    def dequantize(**kwargs: Any) -> dict[str, np.ndarray]:
        params = {k: v for k, v in kwargs.items() if not isinstance(v, np.ndarray)}
        arrays = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray)}
        return {"y": to_codes(run(*build_dequantize(arrays, params)), "float32")}

    def cast_fp8(x: np.ndarray, *, format: str, overflow: str, rounding: str) -> dict[str, np.ndarray]:
        return {"codes": to_codes(run(*build_cast(x, format, overflow == "saturate")), format)}

    def cast_fp4(x: np.ndarray, *, format: str, rounding: str, nan: str) -> dict[str, np.ndarray]:
        return {"codes": to_codes(run(*build_cast(x, format, None)), format)}

    def cast_int(x: np.ndarray, *, dtype: str, mode: str) -> dict[str, np.ndarray]:
        return {"codes": to_codes(run(*build_cast(x, dtype, None)), dtype)}

    def has_kernel(contract: str, params: Mapping[str, Any]) -> str | None:
        if probe is None:
            return None
        probe_params = {**params, "axis": params.get("axis", 1), "block_size": 1, "saturate": True}
        key = f"{contract}:{sorted(probe_params.items())}"
        if contract == "quant.qdq":
            return probe(key, build_quantize(_zeros_like_case(contract, params), probe_params)[0])
        if contract == "dequant.qdq":
            return probe(key, build_dequantize(_zeros_like_case(contract, params), probe_params)[0])
        target = str(params["dtype"] if contract == "cast.int" else params["format"])
        return probe(key, build_cast(np.zeros(2, np.float32), target, True if "float8" in target else None)[0])

    def quant_supports(params: Mapping[str, Any]) -> str | None:
        if params.get("division") != "true_divide":
            return "ONNX QuantizeLinear divides (division='true_divide' only)"
        if params.get("nan") != "minimum" and str(params.get("output_dtype")) in _INTEGERS:
            return "claims nan='minimum' (a NaN quotient gives the minimum on x86; ONNX leaves it undefined)"
        return has_kernel("quant.qdq", params)

    def dequant_supports(params: Mapping[str, Any]) -> str | None:
        return has_kernel("dequant.qdq", params)

    def fp8_supports(params: Mapping[str, Any]) -> str | None:
        if params.get("rounding") != "rne":
            return "ONNX Cast rounds to nearest even only"
        return has_kernel("cast.fp8", params)

    def fp4_supports(params: Mapping[str, Any]) -> str | None:
        if params.get("rounding") != "rne":
            return "ONNX Cast rounds to nearest even only"
        if params.get("nan") != "max":
            return "ONNX float4.md: NaN -> 6 (nan='max')"
        return has_kernel("cast.fp4", params)

    def int_supports(params: Mapping[str, Any]) -> str | None:
        if params.get("dtype") not in ("int4", "uint4"):
            return "ONNX Cast from float to int8 is undefined out of range"
        if params.get("mode") != "rne_wrap":
            return "ONNX int4.md: Cast to int4 rounds half to even and wraps (mode='rne_wrap')"
        return has_kernel("cast.int", params)

    return {
        "cast.int": Implementation(cast_int, int_supports, validates_inputs=False),
        "quant.qdq": Implementation(quantize, quant_supports, validates_inputs=False),
        "dequant.qdq": Implementation(dequantize, dequant_supports, validates_inputs=False),
        "cast.fp8": Implementation(cast_fp8, fp8_supports, validates_inputs=False),
        "cast.fp4": Implementation(cast_fp4, fp4_supports, validates_inputs=False),
    }


_INTEGERS = ("uint8", "int8", "uint16", "int16", "uint4", "int4")
_ORT_NUMPY = {
    f"tensor({name})": np.dtype(dtype)
    for name, dtype in (("float", "<f4"), ("float16", "<f2"), ("uint8", "u1"), ("int8", "i1"), ("uint16", "<u2"),
                        ("int16", "<i2"))
}  # fmt: skip


def reference_backend() -> Backend:
    """``onnx-reference``: ``onnx.reference.ReferenceEvaluator``."""
    onnx = _import_onnx()
    from onnx.reference import ReferenceEvaluator

    def run(model: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
        with np.errstate(all="ignore"):
            outputs: Any = ReferenceEvaluator(model).run(None, feeds)  # a list of arrays, whatever its stubs say
            return np.asarray(outputs[0])

    info = {"onnx": onnx.__version__, "opset": str(OPSET), "evaluator": "onnx.reference.ReferenceEvaluator"}
    return Backend("onnx-reference", "cpu", "numpy", _contracts(run), info)


def onnxruntime_backend(provider: str = "") -> Backend:
    """``onnxruntime``: an ``InferenceSession`` on ``provider`` (or ``$QCONFORM_ORT_PROVIDER``, default CPU)."""
    onnx = _import_onnx()
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise BackendError(f"onnxruntime is not installed ({exc}); pip install -e '.[onnx]'") from exc
    provider = provider or os.environ.get(PROVIDER_ENV, "") or "CPUExecutionProvider"
    if provider not in ort.get_available_providers():
        raise BackendError(
            f"onnxruntime {ort.__version__} has no {provider!r}; available: {ort.get_available_providers()}"
        )
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if provider != "CPUExecutionProvider":  # a node the provider lacks must fail, not run on the CPU instead
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    probes: dict[str, str | None] = {}

    def run(model: Any, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The output's bytes, read through an I/O binding to the CPU: onnxruntime's ``run`` has no NumPy type
        for float8 E5M2 outputs, and a binding also copies a device provider's output back."""
        session = ort.InferenceSession(model.SerializeToString(), options, providers=[provider])
        binding = session.io_binding()
        for name, array in feeds.items():
            binding.bind_cpu_input(name, np.ascontiguousarray(array))
        output = session.get_outputs()[0]
        binding.bind_output(output.name, "cpu")
        session.run_with_iobinding(binding)
        value = binding.get_outputs()[0]
        dtype = np.dtype(np.uint8) if "float8" in output.type else _ORT_NUMPY[output.type]
        shape = tuple(value.shape())
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:
            return np.zeros(shape, dtype)
        raw = ctypes.string_at(value.data_ptr(), count * dtype.itemsize)
        return np.frombuffer(raw, dtype).reshape(shape).copy()

    def probe(key: str, model: Any) -> str | None:
        """Whether a session of ``model`` can be made on ``provider`` (cached per row)."""
        if key not in probes:
            try:
                ort.InferenceSession(model.SerializeToString(), options, providers=[provider])
                probes[key] = None
            except Exception as exc:  # onnxruntime raises its own exception types (NOT_IMPLEMENTED, ...)
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                probes[key] = f"onnxruntime {ort.__version__} {provider} has no kernel: {first[:160]}"
        return probes[key]

    device = "cpu" if provider == "CPUExecutionProvider" else provider.removesuffix("ExecutionProvider").lower()
    name = "onnxruntime" if provider == "CPUExecutionProvider" else f"onnxruntime:{provider}"
    info = {"onnxruntime": ort.__version__, "onnx": onnx.__version__, "opset": str(OPSET), "provider": provider}
    return Backend(name, device, "numpy", _contracts(run, probe=probe), info)
