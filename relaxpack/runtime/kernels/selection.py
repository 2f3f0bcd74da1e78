"""Selection kernels whose output size depends on the data (packed: they
return new arrays): unique, compress.

>>> y, first, inverse, counts = unique(np.array([2, 1, 1, 3, 4, 3]), sorted=False)
>>> y, first, inverse, counts
(array([2, 1, 3, 4]), array([0, 1, 3, 4]), array([0, 1, 1, 2, 3, 2]), array([1, 2, 2, 1]))
>>> compress(np.arange(6).reshape(2, 3), np.array([False, True, True]), axis=1)
array([[1, 2],
       [4, 5]])
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ._math import is_low_float, normalize_axis
from ._registry import register_packed


def _first_occurrence_order(first, inverse, counts):
    """numpy's sorted unique results reordered by first occurrence."""
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return first[order], rank[inverse], counts[order]


@register_packed("unique")
def unique(x, *, axis, sorted):  # noqa: A002 (ONNX's attribute name)
    """ONNX Unique: the unique elements of the flattened ``x`` (``axis``
    None) or its unique slices along ``axis``, ascending (``sorted``) or in
    order of first occurrence; with, as int64, the index of each one's first
    occurrence, the index into the result of every element (or slice) of
    ``x``, and each one's count. Low floats compare as float32 (exactly)."""
    x = np.asarray(x)
    work = x.astype(np.float32) if is_low_float(x.dtype) else x
    if axis is None:
        ax, work = 0, work.reshape(-1)
        picked_from = x.reshape(-1)
    else:
        if x.ndim == 0:
            raise ShapeError("unique: an axis needs a tensor of rank >= 1, got a scalar")
        ax, picked_from = normalize_axis(axis, x.ndim), x
    if work.shape[ax] == 0:
        empty = np.empty(0, np.int64)
        return np.take(picked_from, empty, axis=ax), empty, empty, empty
    _, first, inverse, counts = np.unique(work, return_index=True, return_inverse=True, return_counts=True,
                                          axis=None if axis is None else ax)
    inverse = inverse.reshape(-1)   # numpy 2 shapes it like x when flattening
    if not sorted:
        first, inverse, counts = _first_occurrence_order(first, inverse, counts)
    y = np.take(picked_from, first, axis=ax)
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


@register_packed("compress")
def compress(x, condition, *, axis):
    """numpy / ONNX Compress: the slices of ``x`` along ``axis`` (of the
    flattened ``x`` when None) where ``condition`` is true. A condition
    shorter than the axis leaves out the slices past its end."""
    x, condition = np.asarray(x), np.asarray(condition)
    if condition.ndim != 1:
        raise ShapeError(f"compress: condition must be 1-D, got shape {condition.shape}")
    ax = None if axis is None else normalize_axis(axis, x.ndim)
    length = x.size if ax is None else x.shape[ax]
    keep = np.flatnonzero(condition.astype(bool))
    if keep.size and keep[-1] >= length:
        raise ShapeError(f"compress: condition selects index {keep[-1]} of an axis of length {length}")
    return np.take(x.reshape(-1) if ax is None else x, keep, axis=0 if ax is None else ax)
