"""The exhaustive sweep, on a slice of the float32 space small enough for CI."""

import numpy as np

from conformance import exhaustive
from conformance.registry import load_specs
from conformance.worker import InProcessBackend

(CAST,) = load_specs("cast.fp8")
PARAMS = CAST.with_defaults({"format": "float8_e4m3fn", "overflow": "nonsaturating"})
TOTAL, CHUNK = 1 << 20, 1 << 17


def _sweep(backend: str, first: int = 0):
    handle = InProcessBackend(backend)

    def chunk(start, count, shm):
        return handle.sweep_chunk(CAST.contract, PARAMS, start, count, shm)

    return exhaustive.sweep(CAST, PARAMS, chunk, first=first, total=TOTAL, chunk=CHUNK, workers=2)


def test_reference_agrees_with_itself_on_a_slice():
    count, case, message = _sweep("reference", first=0x7F700000)  # up to and past +Inf into the NaNs
    assert count == 0 and case is None, message


def test_sweep_finds_and_reports_planted_bug():
    # patterns from 0x43000000 (128.0) hold the e4m3fn midpoint 136, a tie that goes to even 128
    count, case, message = _sweep("conformance.plugins.planted:ties_away", first=0x43000000)
    assert count > 0 and case is not None, message
    assert message.endswith("float32 patterns differ")
    assert 0x43080000 in case.inputs["x"].bits.tolist()


def test_companion_inputs_are_a_fixed_hash():
    a = exhaustive._hash_bits(np.arange(10, dtype=np.uint32), 8)
    b = exhaustive._hash_bits(np.arange(10, dtype=np.uint32), 8)
    assert np.array_equal(a, b) and a.max() < 256 and len(set(a.tolist())) > 5


def test_companion_hash_of_a_range_equals_the_hash_of_its_indices():
    """A chunk's bits (broadcast over runs of 2^16 indices) are the replayable per-index hash."""
    for start, count in ((0, 1), (5, 70_000), (0x7FFF_FFF0, 1 << 17), ((1 << 32) - 100, 100)):
        index = np.arange(start, start + count, dtype=np.uint64)
        for bits in (8, 32):
            assert np.array_equal(exhaustive._hash_range(start, count, bits), exhaustive._hash_bits(index, bits))
