"""Quantizers, one module per recipe; each public function is the contract ``quant.<name>``."""

from reference.quant.affine import affine
from reference.quant.fp8 import fp8_delayed, fp8_tensor
from reference.quant.fp8_blockwise import fp8_block
from reference.quant.mx import mx
from reference.quant.nvfp4 import nvfp4
from reference.quant.qdq import qdq

__all__: list[str] = ["affine", "fp8_block", "fp8_delayed", "fp8_tensor", "mx", "nvfp4", "qdq"]
