"""A transpose of a broadcast constant is a broadcast of the transposed constant.

DeBERTa (v2, v3) repeats its relative-position keys and queries, constants once folded, over the
batch (``Tile`` or ``Expand``: ``broadcast_to(c, (batch, heads, 2k, d))``), merges batch and heads
(``reshape``) and multiplies each query by their transpose (``permute_dims(.., (0, 2, 1))``):
FoldPermuteMatmul reads that transpose as a strided view, a product with a transposed right
operand that OpenBLAS packs on every call (0.33 ms against 0.12 for the same product of a
contiguous one, 12 heads of 16 x 64 by 64 x 512). Transposing the constant instead, once, leaves
the product nothing to permute:

- ``transpose_of_broadcast_constant``: ``permute_dims(broadcast_to(c, s), p)`` ->
  ``broadcast_to(c', s[p])``, ``c'`` the constant (given ``s``'s rank) permuted by ``p``;
- ``transpose_of_reshaped_broadcast_constant``: ``permute_dims(reshape(broadcast_to(c, s), r), p)``
  with ``p`` swapping the last two axes only and the reshape keeping them (it merges or splits
  the leading axes) -> ``reshape(broadcast_to(c', s'), r')``, the last two axes of ``c``, ``s`` and
  ``r`` swapped: the reshape maps each leading index to the same flat position either way.

Both move values only (exact). The broadcast (and the reshape) must be used once, so that no
second copy of the broadcast is made.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Constant, ShapeExpr
from ..ops.registry import make_call
from .core.rules import Match


def _axes(m: Match, rank: int) -> tuple[int, ...]:
    axes = m["perm"].attrs["axes"]
    return tuple(reversed(range(rank))) if axes is None else tuple(int(a) % rank for a in axes)


def _shape(m: Match, name: str) -> tuple | None:
    sinfo = m.sinfo(name)
    return None if getattr(sinfo, "shape", None) is None else tuple(sinfo.shape)


def _expanded(m: Match, rank: int) -> np.ndarray:
    """The constant with leading axes of one to the broadcast's rank."""
    data = m.data("c")
    return data.reshape((1,) * (rank - data.ndim) + data.shape)


def check_broadcast(m: Match) -> str | None:
    shape = _shape(m, "b")
    if shape is None:
        return "the broadcast's shape is not known"
    if m.data("c").ndim > len(shape):
        return "the constant has more dims than the broadcast"
    return None


def rewrite_broadcast(m: Match):
    """permute_dims(broadcast_to(c, s), p) -> broadcast_to(permute_dims(c, p), s[p])."""
    shape = _shape(m, "b")
    axes = _axes(m, len(shape))
    data = np.ascontiguousarray(_expanded(m, len(shape)).transpose(axes))
    return make_call("broadcast_to", Constant(data), ShapeExpr(tuple(shape[a] for a in axes)))


def _swapped(shape: tuple) -> tuple:
    return shape[:-2] + (shape[-1], shape[-2])


def check_reshaped(m: Match) -> str | None:
    found = check_broadcast(m)
    if found is not None:
        return found
    shape, reshaped = _shape(m, "b"), _shape(m, "mid")
    if reshaped is None or len(shape) < 2 or len(reshaped) < 2:
        return "the reshape's shape is not known, or a shape has fewer than two dims"
    if _axes(m, len(reshaped)) != _swapped(tuple(range(len(reshaped)))):
        return "the transpose does not swap the last two axes only"
    if not all(a == b or m.analyzer.prove_equal(a, b) for a, b in zip(shape[-2:], reshaped[-2:])):
        return "the reshape does not keep the last two axes"
    return None


def rewrite_reshaped(m: Match):
    """permute_dims(reshape(broadcast_to(c, s), r), swap) -> reshape(broadcast_to(c', s'), r')."""
    shape, reshaped = _shape(m, "b"), _shape(m, "mid")
    data = np.ascontiguousarray(np.swapaxes(_expanded(m, len(shape)), -1, -2))
    broadcast = make_call("broadcast_to", Constant(data), ShapeExpr(_swapped(shape)))
    return make_call("reshape", broadcast, ShapeExpr(_swapped(reshaped)))
