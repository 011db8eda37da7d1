"""Dequantizers, one module per recipe; each public function is the contract ``dequant.<name>``."""

from reference.dequant.affine import affine
from reference.dequant.fp8 import fp8_block, fp8_tensor
from reference.dequant.mx import mx
from reference.dequant.nvfp4 import nvfp4
from reference.dequant.qdq import qdq

__all__: list[str] = ["affine", "fp8_block", "fp8_tensor", "mx", "nvfp4", "qdq"]
