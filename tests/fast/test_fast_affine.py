"""``fast.quant.affine`` / ``fast.dequant.affine`` on CPU against the NumPy reference, with bfloat16 and
float16 input tensors as well as float32, every mapping and zero-point domain, both scalar
divisions, and the same argument errors.  ``fast/quant`` and ``fast/dequant`` never import
``reference`` (the layout test of ``tests/fast/test_fast_imports.py`` covers ``fast/*.py`` only)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fast.dequant import affine as fast_dequantize
from fast.quant import affine as fast_quantize
from reference.dequant import affine as reference_dequantize
from reference.quant import affine as reference_quantize

ROOT = Path(__file__).resolve().parents[2]
MAPPING_DOMAINS = [
    (m, d)
    for m in ("symmetric", "symmetric_no_clipping_err", "asymmetric")
    for d in ("int", "none", "float")
    if d != "float" or m == "asymmetric"
]
TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def test_affine_modules_never_import_reference() -> None:
    for path in (ROOT / "fast" / "quant" / "affine.py", ROOT / "fast" / "dequant" / "affine.py"):
        tree = ast.parse(path.read_text())
        names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not {n for n in names if n.split(".")[0] in ("reference", "conformance")}, path
    assert "fast.quant.affine" in sys.modules


def f32_bits(values: torch.Tensor | np.ndarray) -> np.ndarray:
    array = values.numpy() if isinstance(values, torch.Tensor) else values
    return np.asarray(array, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize(("mapping", "domain"), MAPPING_DOMAINS)
@pytest.mark.parametrize("arithmetic", list(TORCH))
def test_quantize_matches_the_reference(mapping: str, domain: str, arithmetic: str) -> None:
    rng = np.random.default_rng(len(mapping) * 7 + len(domain) + len(arithmetic))
    for trial in range(12):
        dtype = ("int8", "int4", "uint4")[trial % 3]
        division = ("divide", "reciprocal")[trial % 2]
        eps: Any = ("smallest_normal", "epsilon", 1e-6)[trial % 3]
        if arithmetic == "float16" and eps == 1e-6 and domain != "float":
            eps = "epsilon"
        block = (int(rng.integers(1, 3)), int(rng.integers(1, 12)))
        shape = (block[0] * int(rng.integers(1, 3)), block[1] * int(rng.integers(1, 4)))
        x = (rng.standard_normal(shape) * np.exp(rng.uniform(-15, 4, (shape[0], 1)))).astype(np.float32)
        x[:, : block[1]] *= trial % 4 == 0
        kwargs: dict[str, Any] = dict(
            mapping=mapping, zero_point_domain=domain, dtype=dtype, block_rows=block[0], block_cols=block[1],
            eps=eps, arithmetic=arithmetic, scalar_division=division,
        )  # fmt: skip
        expected = reference_quantize(x, **kwargs)
        # the input tensor in the arithmetic dtype (a bfloat16 weight), or in float32
        source = torch.from_numpy(x).to(TORCH[arithmetic]) if trial % 2 else torch.from_numpy(x)
        got = fast_quantize(source, **kwargs)
        assert sorted(got) == sorted(expected)
        for name, value in expected.items():
            theirs = got[name].numpy()
            if value.dtype == np.float32:
                np.testing.assert_array_equal(f32_bits(theirs), f32_bits(value), err_msg=f"{name} {kwargs}")
            else:
                np.testing.assert_array_equal(theirs, value, err_msg=f"{name} {kwargs}")


@pytest.mark.parametrize("domain", ["int", "none", "float"])
@pytest.mark.parametrize("out_dtype", list(TORCH))
def test_dequantize_matches_the_reference(domain: str, out_dtype: str) -> None:
    rng = np.random.default_rng(3)
    for dtype in ("int8", "int4", "uint4"):
        codes = 256 if dtype == "int8" else 16
        q = rng.integers(0, codes, (4, 12)).astype(np.uint8)
        scale = (rng.standard_normal((2, 3)) * np.exp2(rng.uniform(-20, 20, (2, 3)))).astype(np.float32)
        scale[0, 0] = np.nan
        zero_point = rng.integers(0, codes, (2, 3)).astype(np.uint8) if domain == "int" else None
        zero = rng.standard_normal((2, 3)).astype(np.float32) if domain == "float" else None
        kwargs: dict[str, Any] = dict(
            dtype=dtype, zero_point_domain=domain, block_rows=2, block_cols=4, out_dtype=out_dtype
        )
        expected = reference_dequantize(q, scale, zero_point, zero, **kwargs)["x"]
        got = fast_dequantize(
            torch.from_numpy(q),
            torch.from_numpy(scale),
            None if zero_point is None else torch.from_numpy(zero_point),
            None if zero is None else torch.from_numpy(zero),
            **kwargs,
        )["x"].numpy()
        same = (f32_bits(got) == f32_bits(expected)) | (np.isnan(got) & np.isnan(expected))
        assert same.all(), f"{dtype} {domain} {out_dtype}"


def test_quantize_errors_match_the_reference() -> None:
    x = torch.ones((1, 4))
    cases: list[tuple[dict[str, Any], str]] = [
        ({"mapping": "symmetric", "zero_point_domain": "float"}, "needs mapping='asymmetric'"),
        ({"block_cols": 3}, r"block_cols=3 .* divides x.shape\[1\]=4"),
        ({"x": torch.tensor([[1.0, float("nan"), 0.0, 1.0]])}, r"x\[0, 1\]=nan"),
        ({"x": torch.zeros((1, 4)), "arithmetic": "float16", "eps": 1e-6}, "1.0 / scale overflows float16"),
        ({"x": torch.ones(4)}, r"x.shape=\(4,\)"),
    ]
    for change, pattern in cases:
        kwargs: dict[str, Any] = dict(
            x=x, mapping="asymmetric", zero_point_domain="int", dtype="int8", block_rows=1, block_cols=2
        )
        kwargs.update(change)
        with pytest.raises(ValueError, match=pattern):
            fast_quantize(**kwargs)
    with pytest.raises(TypeError, match="float64"):
        fast_quantize(x.double(), mapping="asymmetric", zero_point_domain="int", dtype="int8", block_rows=1,
                      block_cols=2)  # fmt: skip


def test_dequantize_errors_match_the_reference() -> None:
    q, scale = torch.zeros((2, 4), dtype=torch.uint8), torch.ones((2, 2))
    bad = q.clone()
    bad[1, 2] = 16
    with pytest.raises(ValueError, match=r"q\[1, 2\]=16, but int4 codes are 0..15"):
        fast_dequantize(bad, scale, dtype="int4", zero_point_domain="none", block_rows=1, block_cols=2)
    with pytest.raises(ValueError, match=r"zero_point_domain='int' needs zero_point="):
        fast_dequantize(q, scale, dtype="int8", zero_point_domain="int", block_rows=1, block_cols=2)
    with pytest.raises(TypeError, match=r"q.dtype=int8, but q must be uint8"):
        fast_dequantize(q.to(torch.int8), scale, dtype="int8", zero_point_domain="none", block_rows=1, block_cols=2)
