"""Quantizers, one module per recipe; each public function is the contract ``quant.<name>``."""

__all__: list[str] = []
