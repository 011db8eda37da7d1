"""Dequantizers, one module per recipe; each public function is the contract ``dequant.<name>``."""

from fast.dequant.affine import affine
from fast.dequant.fp8 import fp8_block, fp8_tensor
from fast.dequant.mx import mx
from fast.dequant.nvfp4 import nvfp4
from fast.dequant.qdq import qdq

__all__: list[str] = ["affine", "fp8_block", "fp8_tensor", "mx", "nvfp4", "qdq"]
