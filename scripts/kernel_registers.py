"""Registers and stack of one Triton kernel compiled for a GPU target, on a machine without a GPU.

``triton.compile`` of the kernel (``fast._triton.jit``'s GPU binding of its device functions) for the
target, with every pointer and every integer argument marked 16-divisible as the launcher specialises
them (``--odd`` names the integers that are not), then ``cuobjdump -res-usage`` of the cubin.  Use the
Triton of the device (3.6 for the lent H100: ``PYTHONPATH=<a Triton 3.6 install>:$PWD``) for counts that
match it.  Experiments, not production code.

Arguments: ``name=type`` for the runtime arguments (pointers ``*bf16``, ``*i32``, ...; default ``*u8`` for
``*_ptr``, ``i32`` otherwise) and ``NAME=value`` for constexprs (ints, ``True``/``False``, quoted strings).

    python scripts/kernel_registers.py fast.group.kernels:grouped_nvfp4_kernel x_ptr='*bf16' words_ptr='*i32' \\
        amax_bits_ptr='*i32' table_ptr='*i64' INPUT=1 ROWWISE=True COLUMNWISE=True TILE_2D=False BM=128 BK=64 \\
        V=4 EVEN=True SANITIZE=False MEMBERS=16 --odd n_members --num-warps 4
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import subprocess
import tempfile

os.environ.pop("TRITON_INTERPRET", None)

import triton
from triton.backends.compiler import GPUTarget

from fast._triton import jit


def resources(
    kernel_name: str,
    settings: dict[str, str],
    odd: set[str],
    options: dict[str, object],
    capability: int,
) -> str:
    """The ``REG:... STACK:...`` line of the compiled kernel."""
    module, name = kernel_name.split(":")
    kernel = jit(getattr(importlib.import_module(module), name))
    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    for index, arg in enumerate(kernel.arg_names):
        if index in kernel.constexprs:
            constexprs[arg] = ast.literal_eval(settings[arg])
            signature[arg] = "constexpr"
        else:
            signature[arg] = settings.get(arg, "*u8" if arg.endswith("_ptr") else "i32")
    attrs = {
        (index,): [["tt.divisibility", 16]]
        for index, (arg, kind) in enumerate(signature.items())
        if kind != "constexpr" and arg not in odd
    }
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options)
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([cuobjdump, "-res-usage", cubin.name], capture_output=True, text=True, check=True)
    return next(line.strip() for line in usage.stdout.splitlines() if "REG:" in line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", help="module:function, e.g. fast.group.kernels:grouped_nvfp4_kernel")
    parser.add_argument("settings", nargs="*", help="name=type (runtime arguments) or NAME=value (constexprs)")
    parser.add_argument("--odd", action="append", default=[], help="an integer argument not divisible by 16")
    parser.add_argument("--num-warps", type=int, default=4)
    parser.add_argument("--maxnreg", type=int, help="register cap (the launch option)")
    parser.add_argument("--capability", type=int, default=90, help="compute capability (90: H100/H200)")
    parser.add_argument("--fp-fusion", action="store_true", help="allow FMA contraction (off in fast/'s exact kernels)")
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.settings)
    options: dict[str, object] = {"num_warps": args.num_warps, "enable_fp_fusion": args.fp_fusion}
    if args.maxnreg:
        options["maxnreg"] = args.maxnreg
    usage = resources(args.kernel, settings, set(args.odd), options, args.capability)
    print(f"triton {triton.__version__}, sm_{args.capability}: {usage}")


if __name__ == "__main__":
    main()
