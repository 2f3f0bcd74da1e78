"""A conv's GEMM in blocks of columns that OpenBLAS runs by its small-matrix kernel.

OpenBLAS (0.3.x, the SkylakeX kernels it picks on AVX-512 CPUs) multiplies
without packing its operands when ``M * N * K <= 100^3``
(``sgemm_small_kernel_permit``); above that it packs both and runs its
general kernel. A conv's GEMM has few rows (8-32 output channels) and many
columns (pixels), where the packing costs more than it saves: 8 x 144 x 2688
(a 3x3 conv of 16 -> 8 channels on a 64x40 plane) takes 70 us in one call
and 37 us as 4 calls of 672 columns; the 7x7/2 stem's 16 x 147 x 1578 48 ->
37 us; 16 x 288 x 688 43 -> 32 us (1 thread, thread CPU time). Each block
is a column slice of the operands and of the result (BLAS reads and writes
them with their row pitch, no copy), a multiple of :data:`BLOCK_MULTIPLE`
columns (its vector width; the last block takes the rest). A GEMM that is
small already, whose blocks would be narrower than :data:`MIN_BLOCK_COLUMNS`
(too deep or too many rows: the calls cost more) or that would take more
than :data:`MAX_BLOCKS` calls stays one call. Each output value is the same
dot product over ``K`` either way; only the kernel that sums it differs (the
last bits may), so a runner and the generic kernel it mirrors both take the
blocks. With OpenBLAS's Haswell kernels (no small-matrix kernel) the blocks
cost 2-8% more than one call on these shapes.
"""

from __future__ import annotations

import numpy as np

#: OpenBLAS's bar for its small-matrix kernel: M * N * K at most this
SMALL_GEMM_PRODUCTS = 100 ** 3
#: block widths are multiples of this many columns (an AVX-512 register of float32)
BLOCK_MULTIPLE = 16
#: no blocks narrower than this: per call ~0.5 us, and the kernel's rate falls (16 x 288: 64 columns
#: 37 us, 192 columns 32 us, one call 43 us)
MIN_BLOCK_COLUMNS = 64
#: nor more blocks than this: a wide operand in many narrow blocks loses the packed kernel's cache
#: blocking (96 x 96 x 8192 in 86 blocks: 866 -> 1069 us; 32 x 288 x 1488 in 16: even)
MAX_BLOCKS = 16


def column_blocks(rows: int, depth: int, columns: int) -> tuple[slice, ...] | None:
    """The column slices of a ``(rows, depth) @ (depth, columns)`` GEMM run a block at a time, or
    None when it runs as one call (small already, or blocks would be too narrow)."""
    if rows * depth * columns <= SMALL_GEMM_PRODUCTS or rows * depth <= 0:
        return None
    widest = SMALL_GEMM_PRODUCTS // (rows * depth) // BLOCK_MULTIPLE * BLOCK_MULTIPLE
    if widest < MIN_BLOCK_COLUMNS:
        return None
    count = -(-columns // widest)
    if count > MAX_BLOCKS:
        return None
    width = min(widest, -(-(-(-columns // count)) // BLOCK_MULTIPLE) * BLOCK_MULTIPLE)
    return tuple(slice(start, min(start + width, columns)) for start in range(0, columns, width))


def block_calls(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(a, b_block, out_block)`` for each ``np.matmul(a, b_block, out=out_block)`` that makes
    ``out = a @ b`` (``b`` and ``out``: any leading dims, columns last); one triple when the GEMM is
    not blocked."""
    blocks = column_blocks(a.shape[-2], a.shape[-1], b.shape[-1])
    if blocks is None:
        return [(a, b, out)]
    return [(a, b[..., s], out[..., s]) for s in blocks]


def blocked_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``out = a @ b`` (``np.matmul`` broadcasting), in :func:`column_blocks`."""
    for x, y, z in block_calls(a, b, out):
        np.matmul(x, y, out=z)
