"""Exhaustive sweeps: every float32 input of an elementwise cast, 2^32 of them.

``qconform run --profile exhaustive`` sweeps each row of every elementwise contract whose
leading input accepts float32.  The input space is cut into chunks of 2^22 patterns; a
pool of processes (one per CPU core) computes the reference chunk by chunk while the
backend's worker computes the same chunk; both write their output bits into shared
memory, so no chunk travels through a pipe.  Inputs other than the leading one (random
bits for stochastic rounding) are a fixed hash of the pattern index, so the sweep is
reproducible.  The row reports the number of mismatching inputs and, for a failure, a
replayable case made of the first mismatching patterns.

Speed: the backend's worker and the comparison run one chunk after the other, so their
per-chunk cost sets a row's time.  Measured on one core (a shared 2-core VM) per 2^24 patterns of a
stochastic ``cast.fp8`` row (inputs, carriers, tensors, shared-memory copies, comparison, without
the backend's own work), with the former hash: 290-360 ms with one 2^24-pattern chunk, 97 ms with
four of 2^22, whose 16 MiB arrays glibc's allocator reuses instead of mapping (and faulting in)
fresh pages for every temporary; 2^21 gave 115 ms.  The companion hash is two table look-ups per
pattern, a broadcast XOR over a chunk (0.5 ms per 2^22 patterns), instead of five passes of integer
mixing.  On the H100 host (16 cores) the stochastic rows went from 69-89 s to 48-56 s.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from conformance.carriers import bits_to_carrier, carrier_to_bits, get_dtype
from conformance.case import Case, TensorBits
from conformance.compare import compare_outputs
from conformance.registry import Spec, load_specs

__all__ = ["CHUNK", "eligible", "spec_for", "sweep", "sweep_inputs", "write_outputs"]

CHUNK = 1 << 22
"""Patterns per chunk (module docstring: the per-chunk cost against the chunk size)."""
TOTAL = 1 << 32


def eligible(spec: Spec) -> bool:
    """Elementwise contracts whose leading input accepts float32 and whose outputs have its shape (casts)."""
    name, first = next(iter(spec.inputs.items()))
    same_shape = all(out["shape"] == f"{name}.shape" for out in spec.outputs.values())
    return spec.elementwise and same_shape and "float32" in first["dtypes"]


def _mix32(z: np.ndarray) -> np.ndarray:
    """splitmix32-style mixing of uint32 words, in place (returns ``z``)."""
    z *= np.uint32(0x9E3779B9)
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        z ^= z >> np.uint32(shift)
        z *= np.uint32(factor)
    z ^= z >> np.uint32(16)
    return z


_HALF = 1 << 16


@functools.cache
def _hash_tables() -> tuple[np.ndarray, np.ndarray]:
    """The hash's two 2^16-word tables: the mixed words of 0 .. 2^16-1 (low) and 2^16 .. 2^17-1 (high)."""
    words = _mix32(np.arange(2 * _HALF, dtype=np.uint32))
    return words[:_HALF], words[_HALF:]


def _top_bits(z: np.ndarray, bits: int) -> np.ndarray:
    if bits < 32:
        z >>= np.uint32(32 - bits)
    return z


def _hash_bits(index: np.ndarray, bits: int) -> np.ndarray:
    """A fixed pseudo-random pattern of ``bits`` bits per pattern index ``i`` (uint32 array).

    The word is ``low[i % 2^16] ^ high[i // 2^16]`` (:func:`_hash_tables`), and its top ``bits``
    bits are kept.  :func:`_hash_range` computes the same for a run of consecutive indices.
    """
    low, high = _hash_tables()
    index = index.astype(np.uint32)
    return _top_bits(low[index & np.uint32(_HALF - 1)] ^ high[index >> np.uint32(16)], bits)


def _hash_range(start: int, count: int, bits: int) -> np.ndarray:
    """:func:`_hash_bits` of the indices ``start .. start+count`` (``count >= 1``), as a broadcast XOR."""
    low, high = _hash_tables()
    first, last = start // _HALF, (start + count - 1) // _HALF + 1
    words = (high[first:last, None] ^ low[None, :]).reshape(-1)
    return _top_bits(words[start - first * _HALF :][:count], bits)


def sweep_inputs(spec: Spec, params: Mapping[str, Any], start: int, count: int) -> dict[str, TensorBits]:
    """The inputs of one chunk: float32 patterns ``start .. start+count`` and their companions."""
    index = np.arange(count, dtype=np.uint32)
    index += np.uint32(start)  # start + count <= 2^32, so this never wraps
    active = spec.active_inputs(params)
    names = list(active)
    inputs = {names[0]: TensorBits("float32", index)}
    for name in names[1:]:
        dtype = active[name]["dtypes"][-1]
        d = get_dtype(dtype)
        inputs[name] = TensorBits(dtype, _hash_range(start, count, d.bits).astype(d.bit_dtype, copy=False))
    return inputs


def _output_layout(spec: Spec, dtypes: Mapping[str, str], count: int) -> dict[str, tuple[int, np.dtype]]:
    """Byte offset and bit dtype of each output inside one chunk's shared block."""
    layout, offset = {}, 0
    for name in spec.outputs:
        bit_dtype = get_dtype(spec.output_dtype(name, dtypes)).bit_dtype
        layout[name] = (offset, bit_dtype)
        offset += count * bit_dtype.itemsize
    return layout


def block_size(spec: Spec, dtypes: Mapping[str, str], count: int) -> int:
    return sum(count * get_dtype(spec.output_dtype(n, dtypes)).bit_dtype.itemsize for n in spec.outputs)


def write_outputs(shm_name: str, spec: Spec, dtypes: Mapping[str, str], outputs: Mapping[str, np.ndarray]) -> None:
    """Copy output bit patterns into a chunk's shared block."""
    block = shared_memory.SharedMemory(name=shm_name)
    try:
        count = len(next(iter(outputs.values())).reshape(-1))
        for name, (offset, bit_dtype) in _output_layout(spec, dtypes, count).items():
            bits = carrier_to_bits(np.asarray(outputs[name]), spec.output_dtype(name, dtypes)).reshape(-1)
            np.ndarray((count,), dtype=bit_dtype, buffer=block.buf, offset=offset)[:] = bits
    finally:
        block.close()


@functools.cache
def spec_for(contract: str) -> Spec:
    """One spec, loaded once per process (sweeps ask for it once per chunk)."""
    (spec,) = load_specs(contract)
    return spec


def _reference_chunk(contract: str, params: dict[str, Any], start: int, count: int, shm_name: str) -> None:
    """Process-pool task: the reference's outputs for one chunk, into shared memory."""
    spec = spec_for(contract)
    inputs = sweep_inputs(spec, params, start, count)
    carriers = {name: t.carrier() for name, t in inputs.items()}
    outputs = spec.reference_function()(**carriers, **params)
    write_outputs(shm_name, spec, {n: t.dtype for n, t in inputs.items()}, outputs)


def _read(
    block: shared_memory.SharedMemory, spec: Spec, dtypes: Mapping[str, str], count: int
) -> dict[str, np.ndarray]:
    return {
        name: np.ndarray((count,), dtype=bit_dtype, buffer=block.buf, offset=offset).copy()
        for name, (offset, bit_dtype) in _output_layout(spec, dtypes, count).items()
    }


def sweep(
    spec: Spec,
    params: Mapping[str, Any],
    backend_chunk: Callable[[int, int, str], str | None],
    *,
    first: int = 0,
    total: int = TOTAL,
    chunk: int = CHUNK,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[int, Case | None, str]:
    """Compare ``backend_chunk`` with the reference on patterns ``first .. first+total``.

    ``backend_chunk(start, count, shm_name)`` fills the shared block (or returns an error
    message).  Returns (mismatch count, a replayable case of the first mismatches, message).
    """
    dtypes = {n: t.dtype for n, t in sweep_inputs(spec, params, 0, 1).items()}
    size = block_size(spec, dtypes, chunk)
    workers = workers or os.cpu_count() or 1
    mismatches, first_bad = 0, []  # type: int, list[int]
    started = time.perf_counter()
    blocks: list[shared_memory.SharedMemory] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        pending: deque[tuple[int, int, Future[None], shared_memory.SharedMemory]] = deque()
        end = first + total
        starts = iter(range(first, end, chunk))
        try:
            for s in itertools.islice(starts, 2 * workers):
                ref_block = shared_memory.SharedMemory(create=True, size=size)
                blocks.append(ref_block)
                pending.append(
                    (
                        s,
                        min(chunk, end - s),
                        pool.submit(
                            _reference_chunk, spec.contract, dict(params), s, min(chunk, end - s), ref_block.name
                        ),
                        ref_block,
                    )
                )
            got_block = shared_memory.SharedMemory(create=True, size=size)
            blocks.append(got_block)
            done = 0
            while pending:
                s, count, future, ref_block = pending.popleft()
                error = backend_chunk(s, count, got_block.name)
                if error is not None:
                    return mismatches, None, f"backend error on patterns 0x{s:08x}..: {error}"
                future.result()
                reference = _read(ref_block, spec, dtypes, count)
                got = {
                    n: bits_to_carrier(b, spec.output_dtype(n, dtypes))
                    for n, b in _read(got_block, spec, dtypes, count).items()
                }
                problems = compare_outputs(
                    spec.outputs, {n: spec.output_dtype(n, dtypes) for n in spec.outputs}, params, reference, got
                )
                if problems:
                    mismatches += max(p.count for p in problems)
                    if len(first_bad) < 8:
                        first_bad += [s + e["index"][0] for e in problems[0].elements][: 8 - len(first_bad)]
                nxt = next(starts, None)
                if nxt is not None:
                    pending.append(
                        (
                            nxt,
                            min(chunk, end - nxt),
                            pool.submit(
                                _reference_chunk,
                                spec.contract,
                                dict(params),
                                nxt,
                                min(chunk, end - nxt),
                                ref_block.name,
                            ),
                            ref_block,
                        )
                    )
                done += count
                if progress is not None:
                    rate = done / max(time.perf_counter() - started, 1e-9)
                    eta = (total - done) / rate
                    progress(
                        f"\r  {done / total:6.1%} of {total:,} patterns, {mismatches} mismatches, ETA {eta:5.0f} s"
                    )
        finally:
            for block in blocks:
                block.close()
                block.unlink()
    if progress is not None:
        progress("\n")
    if not first_bad:
        return 0, None, f"all {total:,} float32 patterns agree"
    index = np.array(first_bad, dtype=np.uint64)
    inputs = {n: TensorBits(t.dtype, t.bits) for n, t in _select(spec, params, index).items()}
    case = Case(spec.contract, dict(params), inputs, "exhaustive (first mismatches)", tuple(first_bad))
    return mismatches, case, f"{mismatches:,} of {total:,} float32 patterns differ"


def _select(spec: Spec, params: Mapping[str, Any], index: np.ndarray) -> dict[str, TensorBits]:
    """The sweep's inputs at arbitrary pattern indices (for the counterexample)."""
    full = sweep_inputs(spec, params, 0, 1)
    out = {}
    for name, t in full.items():
        d = get_dtype(t.dtype)
        bits = index.astype(np.uint32) if name == next(iter(full)) else _hash_bits(index, d.bits).astype(d.bit_dtype)
        out[name] = TensorBits(t.dtype, bits.astype(d.bit_dtype))
    return out


def stderr_progress(line: str) -> None:
    sys.stderr.write(line)
    sys.stderr.flush()
