"""Session-wide set-up: Triton's interpreter on machines without a GPU, decided before Triton is imported.

``triton.jit`` reads ``TRITON_INTERPRET`` when it decorates, and that includes the ``@jit`` functions of
Triton's own standard library (``tl.max``, ``tl.sum``, ...): a kernel interpreted in a process that
imported Triton without the variable cannot call them.  So on a machine without CUDA the whole test
session runs with ``TRITON_INTERPRET=1`` (the torch paths are unaffected; ``QCONFORM_FAST_PATH`` picks
the path), and on a GPU machine with the compiler.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
