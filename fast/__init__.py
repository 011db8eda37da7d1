"""qconform's own implementations of the contracts: ``fast.<family>.<operation>``.

Each function takes torch tensors and the contract's keyword parameters and returns a dict of
named output tensors on the input's device: Triton kernels on CUDA where a contract has one
(``fast.cast``), torch ops elsewhere.  ``fast`` never imports ``reference`` (a bug both shared
would be invisible), imports without Triton, and queries no device at import time.
"""
