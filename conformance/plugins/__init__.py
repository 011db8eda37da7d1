"""Contract-aware backends: adapters of third-party libraries and planted-bug backends.

Each module here knows contracts by name and maps them onto one library's API (PyTorch, torchao,
TransformerEngine, ONNX, ml_dtypes) or onto deliberately wrong variants of the reference
(``planted``, for the engine's own meta tests).  The engine core never imports this package; a
plugin is loaded by its ``qconform.backends`` entry point (``pyproject.toml``) or as ``module:attr``,
so a library's absence, or a plugin's bug, cannot reach the engine.  Module names carry a suffix
(``torch_ops``, not ``torch``) so that none reads like the library it wraps.
"""
