"""Quantizers, one module per recipe; each public function is the contract ``quant.<name>``."""

from fast.quant.affine import affine
from fast.quant.mx import mx
from fast.quant.nvfp4 import nvfp4

__all__: list[str] = ["affine", "mx", "nvfp4"]
