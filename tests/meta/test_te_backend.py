"""The ``te`` / ``te-direct`` adapters on the CPU, against a fake ``transformer_engine`` (no TE needed).

The fake records each quantizer's constructor arguments and returns objects with the attributes
TE 2.20.2's tensor classes have (``_data``, ``_transpose``, ``_scale_inv``, ``_rowwise_data``,
``_rowwise_scale_inv``, ``_columnwise_*``, ``_amax_rowwise``, ``_with_gemm_swizzled_scales``), with
TE's padded scale shapes filled by position so the adapters' slicing and unswizzling can be checked.
The arithmetic is TE's and is checked on a GPU; here: the parameter mapping, the n/i decisions per
TE version and GPU architecture, and the layout conversions.
"""

from __future__ import annotations

import subprocess
import sys
import types
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest
import torch

import conformance.backends as backends_module
from conformance.cli import main
from conformance.errors import BackendError
from conformance.plugins import te_ops
from reference.layout import scale_swizzle, scale_unswizzle

ROOT = Path(__file__).parents[2]
H200 = {
    "arch": (9, 0),
    "fp8": (True, ""),
    "block": (True, ""),
    "mxfp8": (False, "Device compute capability 10.0 or higher required for MXFP8 execution."),
    "nvfp4": (False, "Device compute capability 10.0 or higher required for NVFP4 execution."),
}
B200 = {"arch": (10, 0), "fp8": (True, ""), "block": (True, ""), "mxfp8": (True, ""), "nvfp4": (True, "")}


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _positions(rows: int, cols: int) -> torch.Tensor:
    """A uint8 buffer whose byte (r, c) tells its position (distinct for the small shapes used)."""
    return ((torch.arange(rows).reshape(-1, 1) * 7 + torch.arange(cols).reshape(1, -1) * 3) % 251).to(torch.uint8)


class _Fake:
    """The fake ``transformer_engine.pytorch`` / ``transformer_engine_torch`` pair and what was called."""

    def __init__(self, gpu: dict, version: str = "2.20.2", non_tn: bool = False, swizzled: bool = False) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.gpu, self.non_tn, self.swizzled = gpu, non_tn, swizzled
        fake = self
        te = types.ModuleType("transformer_engine.pytorch")
        te.DType = types.SimpleNamespace(kFloat8E4M3="E4M3", kFloat8E5M2="E5M2", kFloat4E2M1="E2M1")
        te.get_device_compute_capability = lambda: gpu["arch"]
        for key, name in te_ops._CHECKS.items():
            setattr(te, name, (lambda k: lambda return_reason=False: gpu[k] if return_reason else gpu[k][0])(key))

        class Quantizer:
            def __init__(self, *args, **kwargs):
                fake.calls.append((type(self).__name__, {"args": args, **kwargs}))
                self.rowwise = kwargs.get("rowwise", True)
                self.columnwise = kwargs.get("columnwise", True)
                self.kwargs = kwargs
                self.optimize_for_gemm = False

            def __call__(self, x):
                return self.quantize(x)

        class Float8CurrentScalingQuantizer(Quantizer):
            def quantize(self, x):
                data = torch.arange(x.numel(), dtype=torch.uint8).reshape(x.shape)
                keep_data = self.rowwise or fake.non_tn
                transpose = te_ops._transposed(data) if self.columnwise and not fake.non_tn else None
                return types.SimpleNamespace(
                    _data=data if keep_data else None, _transpose=transpose, _scale_inv=torch.tensor([0.25])
                )

        class Float8Quantizer(Float8CurrentScalingQuantizer):
            def __init__(self, scale, amax, fp8_dtype, **kwargs):
                super().__init__(scale, amax, fp8_dtype, **kwargs)
                amax.fill_(max(float(amax), 3.0))  # the kernel's atomic max of amax 3

        class Float8BlockQuantizer(Quantizer):
            def quantize(self, x):
                m, k = x.reshape(-1, x.shape[-1]).shape
                return types.SimpleNamespace(
                    _rowwise_data=torch.zeros(x.shape, dtype=torch.uint8) if self.rowwise else None,
                    _rowwise_scale_inv=torch.ones(-(-k // 128), _round_up(m, 4)) if self.rowwise else None,
                    _columnwise_data=torch.zeros(k, m, dtype=torch.uint8) if self.columnwise else None,
                    _columnwise_scale_inv=torch.ones(-(-m // 128), _round_up(k, 4)) if self.columnwise else None,
                )

        class MXFP8Quantizer(Quantizer):
            def quantize(self, x):
                m, k = x.shape
                row = _positions(_round_up(m, 128), _round_up(k // 32, 4))
                col = _positions(_round_up(m // 32, 4), _round_up(k, 128))
                if fake.swizzled:
                    row = torch.from_numpy(scale_swizzle(row.numpy())["swizzled"])
                    col = torch.from_numpy(scale_swizzle(np.ascontiguousarray(col.numpy().T))["swizzled"]).reshape(
                        col.shape
                    )
                return types.SimpleNamespace(
                    _rowwise_data=torch.zeros(m, k, dtype=torch.uint8),
                    _rowwise_scale_inv=row,
                    _columnwise_data=torch.zeros(m, k, dtype=torch.uint8),
                    _columnwise_scale_inv=col,
                    _with_gemm_swizzled_scales=fake.swizzled,
                )

        class NVFP4Quantizer(Quantizer):
            def quantize(self, x, amax=None):
                m, k = x.shape
                rows = m if self.kwargs["row_scaled_nvfp4"] else 1
                row = _positions(_round_up(m, 128), _round_up(k // 16, 4))
                col = _positions(_round_up(k, 128), _round_up(m // 16, 4))
                if fake.swizzled:
                    row = torch.from_numpy(scale_swizzle(row.numpy())["swizzled"])
                    col = torch.from_numpy(scale_swizzle(col.numpy())["swizzled"])
                return types.SimpleNamespace(
                    _rowwise_data=torch.zeros(m, k // 2, dtype=torch.uint8),
                    _rowwise_scale_inv=row,
                    _columnwise_data=torch.zeros(k, m // 2, dtype=torch.uint8),
                    _columnwise_scale_inv=col,
                    _amax_rowwise=torch.full((rows,), 2688.0) if amax is None else amax,
                    _amax_columnwise=torch.full((1,), 2688.0) if amax is None else amax,
                    _with_gemm_swizzled_scales=fake.swizzled,
                )

        def storage(name):
            class Storage:
                def __init__(self, *args, **kwargs):
                    fake.calls.append((name, {"args": args, **kwargs}))

                def dequantize(self, *, dtype):
                    fake.calls.append((name + ".dequantize", {"dtype": dtype}))
                    return torch.zeros(2, 2, dtype=dtype)

            return Storage

        for cls in (Float8CurrentScalingQuantizer, Float8Quantizer, Float8BlockQuantizer, MXFP8Quantizer):
            setattr(te, cls.__name__, cls)
        te.NVFP4Quantizer = NVFP4Quantizer
        for name in (
            "Float8TensorStorage",
            "Float8BlockwiseQTensorStorage",
            "MXFP8TensorStorage",
            "NVFP4TensorStorage",
        ):
            setattr(te, name, storage(name))

        def deinterleave_glu_tensor(tensor, interleave_size):  # TE 2.20.2 pytorch/utils.py, verbatim
            shape = tensor.shape
            x = tensor.reshape(shape[0] // (2 * interleave_size), 2, interleave_size, *shape[1:])
            return x.transpose(0, 1).contiguous().reshape(shape)

        def interleave_glu_tensor(tensor, interleave_size):
            shape = tensor.shape
            x = tensor.reshape(2, shape[0] // (2 * interleave_size), interleave_size, *shape[1:])
            return x.transpose(0, 1).contiguous().reshape(shape)

        te.interleave_glu_tensor, te.deinterleave_glu_tensor = interleave_glu_tensor, deinterleave_glu_tensor

        tex = types.ModuleType("transformer_engine_torch")

        def record(name):
            def fn(*args, **kwargs):
                fake.calls.append((name, {"args": args, **kwargs}))
                if name == "compute_amax":
                    args[1].fill_(float(args[0].abs().max()))
                if name == "multi_tensor_compute_scale_and_scale_inv":
                    args[2][1][0].fill_(args[3] / float(args[2][0][0]))
                if name == "nvfp4_compute_global_scale":
                    args[1].copy_(2688.0 / args[0])
                if name == "nvfp4_quantize_with_amax":
                    return args[1].quantize(args[0], amax=args[2])
                return None

            return fn

        for name in (
            "compute_amax",
            "multi_tensor_compute_scale_and_scale_inv",
            "nvfp4_compute_global_scale",
            "fused_amax_and_scale_update_after_reduction",
            "nvfp4_quantize_with_amax",
        ):
            setattr(tex, name, record(name))
        root = types.ModuleType("transformer_engine")
        root.__version__ = version
        root.pytorch = te
        self.modules = {"transformer_engine": root, "transformer_engine.pytorch": te, "transformer_engine_torch": tex}

    def named(self, name: str) -> list[dict]:
        return [kwargs for called, kwargs in self.calls if called == name]


@pytest.fixture
def fake_te(monkeypatch):
    def install(gpu: dict = H200, **kwargs) -> _Fake:
        fake = _Fake(gpu, **kwargs)
        for name, module in fake.modules.items():
            monkeypatch.setitem(sys.modules, name, module)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        return fake

    return install


def _call(backend, contract: str, **kwargs):
    return backend.implementation(contract).fn(**kwargs)


# ---- loading ---------------------------------------------------------------------------------------


def test_importing_the_module_imports_neither_torch_nor_te():
    code = "import sys, conformance.plugins.te_ops; print(sorted(m for m in ('torch', 'transformer_engine') if m in sys.modules))"  # noqa: E501
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("build", [te_ops.backend, te_ops.direct_backend])
def test_without_te_building_raises_backend_error_with_the_reason(monkeypatch, build):
    monkeypatch.setitem(sys.modules, "transformer_engine", None)  # import fails as when TE is absent
    with pytest.raises(
        BackendError, match=r"need TransformerEngine \(transformer_engine.pytorch\), which is not importable"
    ):
        build()


def test_qconform_backends_lists_te_as_unavailable_and_run_is_a_usage_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "transformer_engine", None)
    points = [
        EntryPoint("te", "conformance.plugins.te_ops:backend", backends_module.ENTRY_POINT_GROUP),
        EntryPoint("te-direct", "conformance.plugins.te_ops:direct_backend", backends_module.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(backends_module, "entry_points", lambda group: points)
    assert main(["backends"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert all("unavailable: " in line and "the te backends need TransformerEngine" in line for line in lines)
    assert lines[0].startswith("te ") and lines[1].startswith("te-direct ")
    args = ["run", "--backend", "te", "--spec", "glu.interleave", "--isolation", "none", "--report", str(tmp_path)]
    assert main(args) == 2
    assert "not importable" in capsys.readouterr().err


def test_the_info_records_version_arch_and_te_s_verdicts(fake_te):
    fake_te(H200)
    backend = te_ops.backend()
    assert backend.name == "te" and backend.device == "cuda" and backend.array_kind == "torch"
    assert backend.info["transformer_engine"] == "2.20.2" and backend.info["sm"] == "90"
    assert backend.info["nvfp4_available"].startswith("no: Device compute capability 10.0")
    assert te_ops.direct_backend().info["availability_checks"] == "bypassed"


# ---- supports(): per architecture and version ---------------------------------------------------------

MX = {
    "format": "float8_e4m3fn",
    "scale_rule": "rceil",
    "usage": "both",
    "blocks": "1d",
    "scale_layout": "compact",
    "edges": "te",
}
NVFP4 = {
    "usage": "both",
    "block": "1x16",
    "amax_scope": "tensor",
    "rht": False,
    "rounding": "rne",
    "scale_rule": "te",
    "zero_scale": "flt_max",
    "amax_source": "computed",
}
FP8T = {
    "x_dtype": "bfloat16",
    "format": "float8_e4m3fn",
    "power_2_scale": False,
    "epsilon": 0.0,
    "inf_scale": "float32_max",
    "usage": "both",
}


def test_on_sm90_te_reports_mxfp8_and_nvfp4_n_i_with_te_s_reason_and_te_direct_claims_them(fake_te):
    fake_te(H200)
    te, direct = te_ops.backend(), te_ops.direct_backend()
    for contract, params in (("quant.mx", MX), ("quant.nvfp4", NVFP4), ("dequant.nvfp4", {"scale_rule": "te"})):
        reason = te.unsupported_reason(contract, params)
        assert reason is not None and "sm_90" in reason and "compute capability 10.0 or higher" in reason
        assert direct.unsupported_reason(contract, params) is None
    assert te.unsupported_reason("quant.fp8_tensor", FP8T) is None
    assert te.unsupported_reason("quant.fp8_block", {}) is None


def test_on_sm100_te_claims_mxfp8_and_nvfp4(fake_te):
    fake_te(B200)
    te = te_ops.backend()
    assert te.unsupported_reason("quant.mx", MX) is None
    assert te.unsupported_reason("quant.nvfp4", NVFP4) is None


@pytest.mark.parametrize(
    ("contract", "base", "change", "words"),
    [
        ("quant.mx", MX, {"format": "float6_e2m3fn"}, "MXFP8 only"),
        ("quant.mx", MX, {"scale_rule": "floor"}, "scale_rule=rceil"),
        ("quant.mx", MX, {"edges": "torchao"}, "edges=te"),
        ("quant.nvfp4", NVFP4, {"rounding": "stochastic"}, "own random bits"),
        ("quant.nvfp4", NVFP4, {"scale_rule": "torchao"}, "scale_rule=te"),
        ("quant.nvfp4", NVFP4, {"zero_scale": "zero"}, "FLT_MAX"),
        ("quant.fp8_tensor", FP8T, {"inf_scale": "input_max"}, "inf_scale=float32_max"),
        ("quant.fp8_delayed", {"update": "fused"}, {"update": "unfused"}, "fused update"),
        ("dequant.mx", {"format": "float4_e2m1fn"}, {}, "MXFP8 only"),
    ],
)
def test_values_te_does_not_implement_are_n_i_in_both_backends(fake_te, contract, base, change, words):
    fake_te(B200)
    for backend in (te_ops.backend(), te_ops.direct_backend()):
        reason = backend.unsupported_reason(contract, {**base, **change})
        assert reason is not None and words in reason
    if change:
        assert te_ops.backend().unsupported_reason(contract, base) is None


@pytest.mark.parametrize("usage", ["rowwise", "both"])
def test_row_scaled_nvfp4_is_claimed_rowwise_and_with_the_columnwise_copy(fake_te, usage):
    # TE 2.20.2 quantizes the columnwise copy of a row-scaled tensor for bf16 and dims % 32 (dispatch/quantize.cuh)
    fake_te(B200)
    assert te_ops.backend().unsupported_reason("quant.nvfp4", {**NVFP4, "amax_scope": "row", "usage": usage}) is None


def test_versions_before_the_modelled_api_are_n_i(fake_te):
    fake_te(B200, version="2.16.0")
    te = te_ops.direct_backend()
    assert "predates" in te.unsupported_reason("quant.fp8_tensor", FP8T)
    assert "predates" in te.unsupported_reason("glu.interleave", {"block_size": 4})
    fake_te(B200, version="2.18.0")
    te = te_ops.backend()
    assert "2.19" in te.unsupported_reason("quant.mx", {**MX, "blocks": "2d"})
    assert te.unsupported_reason("quant.mx", MX) is None


def test_missing_availability_check_counts_as_unavailable(fake_te, monkeypatch):
    fake = fake_te(B200)
    monkeypatch.delattr(fake.modules["transformer_engine.pytorch"], "is_nvfp4_available")
    assert "has no is_nvfp4_available" in te_ops.backend().unsupported_reason("quant.nvfp4", NVFP4)


# ---- parameter mapping ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "rowwise", "columnwise"), [("both", True, True), ("rowwise", True, False), ("columnwise", False, True)]
)
def test_fp8_tensor_maps_to_current_scaling_and_te_s_amax_and_scale_kernels(fake_te, usage, rowwise, columnwise):
    fake = fake_te(H200)
    x = torch.tensor([[1.0, -8.0, 2.0], [0.5, 4.0, -1.0]])
    params = {**FP8T, "format": "float8_e5m2", "power_2_scale": True, "epsilon": 1e-4, "usage": usage}
    out = _call(te_ops.backend(), "quant.fp8_tensor", x=x, **params)
    (ctor,) = fake.named("Float8CurrentScalingQuantizer")
    assert ctor["args"] == ("E5M2", x.device)
    assert (ctor["rowwise"], ctor["columnwise"]) == (rowwise, columnwise)
    assert ctor["force_pow_2_scales"] is True and ctor["amax_epsilon"] == 1e-4
    (scale_call,) = fake.named("multi_tensor_compute_scale_and_scale_inv")
    assert scale_call["args"][3:] == (57344.0, True, 1e-4)
    assert float(out["amax"]) == 8.0 and float(out["scale"]) == 57344.0 / 8 and float(out["scale_inv"]) == 0.25
    assert ("data" in out) == rowwise and ("columnwise_data" in out) == columnwise
    if columnwise:
        expected = te_ops._transposed(torch.arange(6, dtype=torch.uint8).reshape(2, 3))
        assert torch.equal(out["columnwise_data"], expected)


def test_fp8_tensor_on_a_non_tn_gpu_transposes_te_s_single_copy(fake_te):
    fake_te(B200, non_tn=True)  # Blackwell: TE keeps _data and no _transpose
    x = torch.ones(2, 3, 5)
    out = _call(te_ops.backend(), "quant.fp8_tensor", x=x, **{**FP8T, "usage": "columnwise"})
    data = torch.arange(30, dtype=torch.uint8).reshape(2, 3, 5)
    assert out["columnwise_data"].shape == (5, 2, 3)
    assert torch.equal(out["columnwise_data"], data.reshape(6, 5).t().reshape(5, 2, 3))


def test_fp8_delayed_records_into_history_0_and_runs_the_fused_update(fake_te):
    fake = fake_te(H200)
    x = torch.ones(2, 4)
    history = torch.tensor([1.0, 5.0, 7.0])
    params = {
        "format": "float8_e4m3fn",
        "amax_compute_algo": "most_recent",
        "update": "fused",
        "usage": "both",
        "margin": 2,
    }
    out = _call(te_ops.backend(), "quant.fp8_delayed", x=x, amax_history=history, scale=torch.tensor([2.0]), **params)
    cast, record = fake.named("Float8Quantizer")
    assert float(cast["args"][1]) == 3.0  # the zeroed amax, maxed with 3 by the (fake) kernel: the amax output
    assert record["args"][1].shape == (1,) and float(record["args"][1]) == 3.0  # history[0], a view
    (update,) = fake.named("fused_amax_and_scale_update_after_reduction")
    buffer, histories, _scales, algo, dtype, margin = update["args"]
    assert histories[0].shape == (3, 1) and float(buffer[0]) == 3.0
    assert (algo, dtype, margin) == ("most_recent", "E4M3", 2)
    assert out["amax_history"].tolist() == [3.0, 5.0, 7.0] and float(out["amax"]) == 3.0
    assert history.tolist() == [1.0, 5.0, 7.0]  # the input is not written


@pytest.mark.parametrize(("block", "dim"), [("1x128", 1), ("128x128", 2)])
def test_fp8_block_maps_block_pow2_epsilon_and_passes_the_gemm_ready_buffers(fake_te, block, dim):
    fake = fake_te(H200)
    x = torch.ones(130, 3)
    params = {
        "x_dtype": "float32",
        "block": block,
        "format": "float8_e4m3fn",
        "power_2_scale": False,
        "epsilon": 1e-4,
        "usage": "both",
    }
    out = _call(te_ops.backend(), "quant.fp8_block", x=x, **params)
    (ctor,) = fake.named("Float8BlockQuantizer")
    assert ctor["args"] == ("E4M3",) and ctor["block_scaling_dim"] == dim
    assert ctor["force_pow_2_scales"] is False and ctor["amax_epsilon"] == 1e-4
    assert out["scale_inv"].shape == (1, 132) and out["columnwise_scale_inv"].shape == (2, 4)
    assert out["columnwise_data"].shape == (3, 130)


@pytest.mark.parametrize("te_swizzles", [False, True])
@pytest.mark.parametrize("layout", ["compact", "swizzled"])
def test_mx_scales_come_out_in_the_requested_layout(fake_te, te_swizzles, layout):
    fake = fake_te(B200, swizzled=te_swizzles)
    x = torch.ones(64, 160)
    out = _call(te_ops.backend(), "quant.mx", x=x, **{**MX, "blocks": "2d", "scale_layout": layout})
    (ctor,) = fake.named("MXFP8Quantizer")
    assert ctor["args"] == ("E4M3",) and ctor["with_2d_quantization"] is True
    row, col = _positions(128, 8).numpy(), _positions(4, 256).numpy()  # TE's padded compact buffers
    if layout == "swizzled":
        row = scale_swizzle(row)["swizzled"]
        col = scale_swizzle(np.ascontiguousarray(col.T))["swizzled"].reshape(col.shape)
    assert np.array_equal(out["scale_rowwise"].numpy(), row)
    assert np.array_equal(out["scale_columnwise"].numpy(), col)
    assert out["data_columnwise"].shape == (64, 160)  # MX columnwise data keeps x's layout


def test_mx_1d_does_not_pass_with_2d_quantization(fake_te):
    fake = fake_te(B200)
    _call(te_ops.backend(), "quant.mx", x=torch.ones(32, 32), **{**MX, "usage": "rowwise"})
    (ctor,) = fake.named("MXFP8Quantizer")
    assert "with_2d_quantization" not in ctor and (ctor["rowwise"], ctor["columnwise"]) == (True, False)


@pytest.mark.parametrize("te_swizzles", [False, True])
def test_nvfp4_cuts_te_s_padded_scales_to_the_compact_matrix(fake_te, te_swizzles):
    fake = fake_te(B200, swizzled=te_swizzles)
    x = torch.ones(32, 48)
    out = _call(te_ops.backend(), "quant.nvfp4", x=x, **{**NVFP4, "block": "16x16", "rht": True})
    (ctor,) = fake.named("NVFP4Quantizer")
    assert ctor["with_rht"] is True and ctor["with_post_rht_amax"] is True
    assert ctor["with_2d_quantization"] is True and ctor["row_scaled_nvfp4"] is False
    assert torch.equal(out["scales"], _positions(128, 4)[:32, :3])
    assert torch.equal(out["columnwise_scales"], _positions(128, 4)[:48, :2])
    assert out["data"].shape == (32, 24) and out["columnwise_data"].shape == (48, 16)
    assert out["amax"].tolist() == [2688.0] and out["tensor_scale"].tolist() == [1.0]  # 1 / (2688 / amax)


def test_nvfp4_given_amax_goes_through_quantize_with_amax_and_row_scaling_maps(fake_te):
    fake = fake_te(B200)
    x = torch.ones(16, 32)
    amax = torch.tensor([5376.0])
    out = _call(
        te_ops.backend(), "quant.nvfp4", x=x, amax=amax, **{**NVFP4, "usage": "rowwise", "amax_source": "given"}
    )
    (given,) = fake.named("nvfp4_quantize_with_amax")
    assert float(given["args"][2]) == 5376.0 and given["args"][2] is not amax  # a copy: TE may write it
    assert out["amax"].tolist() == [5376.0] and out["tensor_scale"].tolist() == [2.0]
    assert set(out) == {"data", "scales", "amax", "tensor_scale"}
    out = _call(te_ops.backend(), "quant.nvfp4", x=x, **{**NVFP4, "usage": "rowwise", "amax_scope": "row"})
    assert fake.named("NVFP4Quantizer")[-1]["row_scaled_nvfp4"] is True
    assert out["amax"].shape == (16,) and out["tensor_scale"].shape == (16,)


# ---- dequantization and GLU ----------------------------------------------------------------------------


def test_dequant_nvfp4_puts_compact_scales_into_te_s_zero_padded_buffer(fake_te):
    fake = fake_te(B200)
    scales = torch.full((3, 2), 0x38, dtype=torch.uint8)
    data, amax = torch.zeros(3, 16, dtype=torch.uint8), torch.tensor([1.0, 2.0, 3.0])
    out = _call(
        te_ops.backend(),
        "dequant.nvfp4",
        data=data,
        scales=scales,
        amax=amax,
        scale_rule="te",
        amax_scope="row",
        out_dtype="bfloat16",
    )
    (ctor,) = fake.named("NVFP4TensorStorage")
    padded = ctor["args"][1]
    assert padded.shape == (128, 4) and torch.equal(padded[:3, :2], scales) and int(padded.sum()) == 0x38 * 6
    assert (
        ctor["args"][0] is data and ctor["args"][4] is amax and ctor["args"][6] == "E2M1" and ctor["args"][8] is False
    )
    assert ctor["row_scaled_nvfp4"] is True and ctor["fake_dtype"] == torch.bfloat16
    assert fake.named("NVFP4TensorStorage.dequantize") == [{"dtype": torch.bfloat16}]
    assert out["x"].dtype == torch.float32


@pytest.mark.parametrize("operand", ["rowwise", "columnwise"])
def test_dequant_block_and_mx_place_the_buffers_by_operand(fake_te, operand):
    fake = fake_te(B200)
    data, scale = torch.zeros(4, 4, dtype=torch.uint8), torch.ones(1, 4)
    te = te_ops.backend()
    _call(
        te,
        "dequant.fp8_block",
        data=data,
        scale_inv=scale,
        block="128x128",
        operand=operand,
        format="float8_e5m2",
        out_dtype="float16",
    )
    _call(te, "dequant.mx", data=data, scale=scale, format="float8_e4m3fn", usage=operand, scale_layout="swizzled")
    (block,) = fake.named("Float8BlockwiseQTensorStorage")
    (mx,) = fake.named("MXFP8TensorStorage")
    slots = (0, 1) if operand == "rowwise" else (2, 3)
    for ctor in (block, mx):
        assert ctor["args"][slots[0]] is data and ctor["args"][slots[1]] is scale
        assert all(ctor["args"][i] is None for i in range(4) if i not in slots)
    assert block["args"][4:] == ("E5M2", None, True) and block["fake_dtype"] == torch.float16
    assert mx["args"][4:] == ("E4M3", None, True)


def test_dequant_fp8_tensor_builds_float8_storage(fake_te):
    fake = fake_te(H200)
    data, scale_inv = torch.zeros(3, dtype=torch.uint8), torch.tensor([2.0])
    _call(
        te_ops.backend(),
        "dequant.fp8_tensor",
        data=data,
        scale_inv=scale_inv,
        format="float8_e4m3fn",
        out_dtype="float16",
    )
    (ctor,) = fake.named("Float8TensorStorage")
    assert ctor["data"] is data and ctor["fp8_scale_inv"] is scale_inv and ctor["fp8_dtype"] == "E4M3"


@pytest.mark.parametrize("direction", ["interleave", "deinterleave"])
def test_glu_contracts_call_te_s_helpers_and_grouped_goes_member_by_member(fake_te, direction):
    fake_te(H200)
    te = te_ops.backend()
    w = torch.arange(3 * 8 * 2).reshape(3, 8, 2)
    out = _call(te, "glu.interleave_grouped", w=w, direction=direction, block_size=2)["out"]
    w0 = torch.arange(8)
    inter = torch.tensor([0, 1, 4, 5, 2, 3, 6, 7])
    single = _call(te, f"glu.{direction}", w=w0, block_size=2)["out"]
    expected = inter if direction == "interleave" else torch.argsort(inter)
    assert torch.equal(single, expected)
    for g in range(3):
        assert torch.equal(out[g], w[g][expected])
    empty = torch.zeros(0, 8, 2)
    assert _call(te, "glu.interleave_grouped", w=empty, direction=direction, block_size=2)["out"].shape == (0, 8, 2)


# ---- the layout helpers against the reference ----------------------------------------------------------


@pytest.mark.parametrize("shape", [(128, 4), (256, 8), (128, 12)])
def test_swizzle_helpers_match_reference_layout(shape):
    compact = np.random.default_rng(0).integers(0, 256, size=shape, dtype=np.uint8)
    swizzled = te_ops.swizzle_scales(torch.from_numpy(compact)).numpy()
    assert np.array_equal(swizzled, scale_swizzle(compact)["swizzled"])
    back = te_ops.unswizzle_scales(torch.from_numpy(swizzled)).numpy()
    assert np.array_equal(back, scale_unswizzle(swizzled)["scale"]) and np.array_equal(back, compact)
