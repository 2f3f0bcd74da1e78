"""A fused chain's binary ufunc step on a per-channel constant, read as a tile of the step's shape.

numpy broadcasts a per-channel constant (``(1, 1, 1, C)`` against a
channels-last ``(N, H, W, C)`` map, ``(1, C, 1, 1)`` against a channels-first
one) by looping over runs of ``C`` values (or over the rows of a plane with
a stride-0 operand): a quantized conv's per-channel requantization multiply
on 31x48x16 costs 7.5 us that way against 1.7 us on a same-shape operand
(numpy 2.4, 1 thread; 2-4x at every zoo map size). A step whose other
operand is a bound constant of more than one value therefore reads that
constant broadcast to the step's output shape and copied once per shape
(up to :data:`TILE_MAX_SIZE` values, a few shapes kept; a larger step a tile
of its trailing dims, :func:`row_tile_of`): the same values in the same dtype
at every element, so the same results bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..kept import keep

#: the largest step (values) whose constant operand is tiled: past it the tile is one more large
#: array through the cache (at 31x48x96 the full tile was no faster than a row tile)
TILE_MAX_SIZE = 1 << 16
#: the bound for a transformer's rows (a gemm's bias, an RMS norm's scale): a tile per instruction
#: that stays in cache beside the activations (64 KB of float32); a model's many projections with
#: tiles up to TILE_MAX_SIZE would be one more large array each through the cache
ROW_TILE_MAX_SIZE = 1 << 14
#: output shapes an instruction keeps tiles for (a model run at a few input shapes)
KEPT_SHAPES = 4


def tiled(ufunc, position: int, positional: bool, limit: int = TILE_MAX_SIZE):
    """``call(a, b, out)`` computing ``ufunc(a, b, out)`` where operand ``position`` (0 or 1) is a
    bound constant, read as its tile of ``out``'s shape where :func:`tile_of` makes one (``out`` of
    at most ``limit`` values; a larger ``out``: its row tile, :func:`row_tile_of`); ``out`` is
    passed positionally when ``positional`` (else as a keyword: numpy 2 warns about a positional
    ``out`` of maximum/minimum)."""
    kept: dict = {}
    constant = [None]

    def call(a, b, out):
        c = b if position else a
        if c is not constant[0]:
            kept.clear()
            constant[0] = c
        tile = kept.get(out.shape, kept)
        if tile is kept:
            tile = tile_of(c, out, limit) if out.size <= limit else row_tile_of(c, out)
            tile = keep(kept, out.shape, tile, KEPT_SHAPES)
        if tile is not None:
            a, b = (a, tile) if position else (tile, b)
        if positional:
            ufunc(a, b, out)
        else:
            ufunc(a, b, out=out)
    return call


def tile_of(c, out, limit: int = TILE_MAX_SIZE) -> np.ndarray | None:
    """``c`` broadcast to ``out``'s shape, contiguous and read-only, where that is a gain: ``c``
    an array of more than one value and of another shape than ``out``, which has at most
    ``limit`` values; None otherwise (and where ``c`` does not broadcast: the ufunc then says so)."""
    if not isinstance(c, np.ndarray) or not isinstance(out, np.ndarray) or c.size <= 1 \
            or c.shape == out.shape or out.size > limit:
        return None
    try:
        view = np.broadcast_to(c, out.shape)
    except ValueError:
        return None
    return _read_only(np.ascontiguousarray(view))


def row_tile_of(c, out) -> np.ndarray | None:
    """``c`` broadcast to the largest block of ``out``'s trailing dims of at most
    :data:`ROW_TILE_MAX_SIZE` values before which ``c`` has only dims of 1 (a per-channel
    ``(1, 1, 1, C)`` against a channels-last ``(N, H, W, C)``: a ``(W, C)`` tile), contiguous and
    read-only; None where there is none or it would be ``c`` itself. numpy then loops over runs of
    ``W * C`` values instead of runs of ``C`` (measured, 1 thread, numpy 2.4, a multiply:
    31x48x96 25.3 -> 12.8 us, batch 3 of 32x23x96 39 -> 29, 61x96x16 26 -> 9.5, batch 3 of
    64x45x16 39 -> 18); the same values at every element, so the same results."""
    if not isinstance(c, np.ndarray) or not isinstance(out, np.ndarray) or c.size <= 1 or c.ndim > out.ndim:
        return None
    shape = (1,) * (out.ndim - c.ndim) + c.shape
    first = next((i for i, d in enumerate(shape) if d != 1), len(shape))
    k, size = out.ndim, 1
    while k > 0 and size * out.shape[k - 1] <= ROW_TILE_MAX_SIZE:
        k -= 1
        size *= out.shape[k]
    if k > first or k == out.ndim or size == c.size:
        return None
    try:
        view = np.broadcast_to(c.reshape(shape[k:]), out.shape[k:])
    except ValueError:
        return None
    return _read_only(np.ascontiguousarray(view))


def _read_only(tile: np.ndarray) -> np.ndarray:
    tile.flags.writeable = False
    return tile
