"""``reference.layout``: the cuBLAS 128x4 block-scaling-factor layout against three independent statements of it.

- TransformerEngine's index formula ``gemm_swizzled_scale_idx`` (``common/cast/mxfp8/swizzle.cuh``), evaluated
  element by element in plain Python;
- TransformerEngine's Python equivalent ``s.view(M/128, 4, 32, Kb/4, 4).permute(0, 3, 2, 1, 4)``, in torch;
- the cuBLAS documentation's picture: each 128x4 tile is 4 blocks of 32x4 laid side by side into 32x16.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reference.layout import scale_swizzle, scale_unswizzle, swizzled_index

SHAPES = [(1, 1), (3, 5), (128, 4), (127, 3), (129, 4), (130, 9), (256, 8), (300, 11)]


def te_index(i: int, j: int, num_tiles_x: int) -> int:
    """TransformerEngine ``gemm_swizzled_scale_idx(i, j, num_tiles_X)``, transcribed as a formula (te_contracts §3)."""
    return ((i // 128) * num_tiles_x + j // 4) * 512 + (i % 32) * 16 + ((i % 128) // 32) * 4 + j % 4


def random_scale(shape: tuple[int, int], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_the_te_index_formula(shape: tuple[int, int]) -> None:
    scale = random_scale(shape)
    out = scale_swizzle(scale)["swizzled"]
    rows, cols = shape
    assert out.shape == (-(-rows // 128) * 128, -(-cols // 4) * 4)
    flat = out.reshape(-1)
    expected = np.zeros_like(flat)
    for i in range(rows):
        for j in range(cols):
            expected[te_index(i, j, -(-cols // 4))] = scale[i, j]
    assert np.array_equal(flat, expected), "padding must be zero and every scale at TE's index"


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_the_te_torch_permute(shape: tuple[int, int]) -> None:
    scale = random_scale(shape, 1)
    rows, cols = -(-shape[0] // 128) * 128, -(-shape[1] // 4) * 4
    padded = torch.zeros((rows, cols), dtype=torch.uint8)
    padded[: shape[0], : shape[1]] = torch.from_numpy(scale)
    expected = padded.view(rows // 128, 4, 32, cols // 4, 4).permute(0, 3, 2, 1, 4).reshape(-1).numpy()
    assert np.array_equal(scale_swizzle(scale)["swizzled"].reshape(-1), expected)


def test_one_tile_is_four_32x4_blocks_side_by_side() -> None:
    """cuBLAS: rows 32g + t of a tile go to row t, columns 4g..4g+3 of a 32x16 block."""
    scale = random_scale((128, 4), 2)
    tile = scale_swizzle(scale)["swizzled"].reshape(32, 16)
    for g in range(4):
        assert np.array_equal(tile[:, 4 * g : 4 * g + 4], scale[32 * g : 32 * g + 32])


def test_tiles_are_row_major() -> None:
    scale = np.zeros((256, 8), dtype=np.uint8)
    scale[128:, 4:] = 7  # tile (1, 1): the last of four 512-byte tiles
    flat = scale_swizzle(scale)["swizzled"].reshape(-1)
    assert not flat[: 3 * 512].any() and (flat[3 * 512 :] == 7).all()


@pytest.mark.parametrize("shape", SHAPES)
def test_unswizzle_inverts_swizzle(shape: tuple[int, int]) -> None:
    scale = random_scale(shape, 3)
    back = scale_unswizzle(scale_swizzle(scale)["swizzled"])["scale"]
    assert np.array_equal(back[: shape[0], : shape[1]], scale)
    assert back[shape[0] :].sum() == 0 and back[:, shape[1] :].sum() == 0


def test_unswizzle_is_a_permutation_of_whole_tiles() -> None:
    buffer = np.arange(256 * 8, dtype=np.uint32).astype(np.uint8).reshape(256, 8)
    back = scale_unswizzle(buffer)["scale"]
    assert np.array_equal(scale_swizzle(back)["swizzled"], buffer)


def test_swizzled_index_is_the_te_formula() -> None:
    rows, cols = np.meshgrid(np.arange(300), np.arange(11), indexing="ij")
    got = swizzled_index(rows, cols, 11)
    expected = np.vectorize(lambda i, j: te_index(int(i), int(j), 3))(rows, cols)
    assert np.array_equal(got, expected)


def test_empty_matrices() -> None:
    assert scale_swizzle(np.zeros((0, 3), dtype=np.uint8))["swizzled"].shape == (0, 4)
    assert scale_swizzle(np.zeros((5, 0), dtype=np.uint8))["swizzled"].shape == (128, 0)
    assert scale_unswizzle(np.zeros((0, 4), dtype=np.uint8))["scale"].shape == (0, 4)


@pytest.mark.parametrize(
    ("function", "value", "error", "match"),
    [
        (scale_swizzle, np.zeros(4, dtype=np.uint8), ValueError, r"scale.shape=\(4,\).*2-D"),
        (scale_swizzle, np.zeros((2, 2), dtype=np.float32), TypeError, "scale.dtype=float32"),
        (scale_swizzle, [[1, 2]], TypeError, "numpy.ndarray"),
        (scale_unswizzle, np.zeros((100, 4), dtype=np.uint8), ValueError, "multiple of 128"),
        (scale_unswizzle, np.zeros((128, 6), dtype=np.uint8), ValueError, "multiple of 4"),
    ],
)
def test_bad_input(function: object, value: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        function(value)  # type: ignore[operator]
