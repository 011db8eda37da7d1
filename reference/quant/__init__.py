"""Quantizers, one module per recipe; each public function is the contract ``quant.<name>``."""

from reference.quant.affine import affine
from reference.quant.mx import mx
from reference.quant.nvfp4 import nvfp4

__all__: list[str] = ["affine", "mx", "nvfp4"]
