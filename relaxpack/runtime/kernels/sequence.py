"""Sequence and optional kernels (packed: they return new values).

A sequence is a tuple of arrays and is never mutated: every kernel here
returns a new tuple (so a sequence held by a register stays what it was).
An optional is ``None`` or its value (see ``relaxpack/runtime/containers.py``).

>>> get_kernel("sequence.insert").fn((a,), b).__len__()     # doctest: +SKIP
2
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ._registry import register_packed


def _position(seq: tuple, pos, insert: bool, op: str) -> int:
    """``pos`` (negative: from the end) as an index; ONNX's accepted range, or a ShapeError."""
    array = np.asarray(pos)
    if array.size != 1 or array.dtype.kind not in "iu":
        raise ShapeError(f"{op}: the position must be one integer, got {array.dtype} of shape {array.shape}")
    p, n = int(array.reshape(())), len(seq)
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise ShapeError(f"{op}: position {p} is outside [{-n}, {hi}] for a sequence of {n}")
    return p + n if p < 0 else p


@register_packed("sequence.construct")
def construct(*items):
    return tuple(items)


@register_packed("sequence.empty")
def empty():
    return ()


@register_packed("sequence.at")
def at(seq, pos):
    return seq[_position(seq, pos, False, "SequenceAt")]


@register_packed("sequence.insert")
def insert(seq, value, pos=None):
    p = len(seq) if pos is None else _position(seq, pos, True, "SequenceInsert")
    return seq[:p] + (value,) + seq[p:]


@register_packed("sequence.erase")
def erase(seq, pos=None):
    if not seq:
        raise ShapeError("SequenceErase: the sequence is empty")
    p = len(seq) - 1 if pos is None else _position(seq, pos, False, "SequenceErase")
    return seq[:p] + seq[p + 1:]


@register_packed("sequence.length")
def length(seq):
    return np.array(len(seq), np.int64)


@register_packed("sequence.split")
def split(x, split=None, *, axis: int, keepdims: int):
    """ONNX SplitToSequence: pieces of one (squeezed unless ``keepdims``), of ``split``
    each (a scalar: the last piece may be shorter) or of the sizes ``split`` lists."""
    x = np.asarray(x)
    axis = axis + x.ndim if axis < 0 else axis
    n = x.shape[axis]
    if split is None:
        pieces = [np.take(x, [i], axis=axis) for i in range(n)]
        return tuple(p.squeeze(axis) if not keepdims else p for p in pieces)
    sizes = np.asarray(split).astype(np.int64)
    if sizes.ndim == 0:
        step = int(sizes)
        if step <= 0:
            raise ShapeError(f"SplitToSequence: split must be positive, got {step}")
        sizes = np.array([step] * (n // step) + ([n % step] if n % step else []), np.int64)
    if sizes.ndim != 1 or (sizes < 0).any() or int(sizes.sum()) != n:
        raise ShapeError(f"SplitToSequence: split {sizes.tolist()} does not add up to dim {axis} ({n})")
    bounds = np.cumsum(sizes)[:-1]
    return tuple(np.array(p) for p in np.split(x, bounds, axis=axis))


@register_packed("sequence.concat")
def concat(seq, *, axis: int, new_axis: int):
    if not seq:
        raise ShapeError("ConcatFromSequence: the sequence is empty")
    if new_axis:
        return np.stack(seq, axis=axis)
    return np.concatenate(seq, axis=axis)


@register_packed("optional.wrap")
def wrap(value):
    return value


@register_packed("optional.none")
def none():
    return None


@register_packed("optional.has_element")
def has_element(value):
    return np.array(value is not None)


@register_packed("optional.get")
def get(value):
    if value is None:
        raise ShapeError("OptionalGetElement: the optional is empty")
    return value
