"""Quantizers, one module per recipe; each public function is the contract ``quant.<name>``."""

from fast.quant.affine import affine
from fast.quant.fp8 import fp8_delayed, fp8_tensor
from fast.quant.fp8_block import fp8_block
from fast.quant.mx import mx
from fast.quant.nvfp4 import nvfp4
from fast.quant.qdq import qdq

__all__: list[str] = ["affine", "fp8_block", "fp8_delayed", "fp8_tensor", "mx", "nvfp4", "qdq"]
