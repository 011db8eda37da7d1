"""Dequantizers, one module per recipe; each public function is the contract ``dequant.<name>``."""

__all__: list[str] = []
