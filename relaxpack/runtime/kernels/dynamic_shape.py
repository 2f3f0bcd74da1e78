"""Packed kernels for ops whose shape-like operand is only known at run time.

Reshape's target, Expand's shape, Slice's bounds, Split's sizes, the axes of
Squeeze/Unsqueeze, Pad's pads, Tile's repeats, TopK's K, OneHot's depth and
Range's bounds decide the output's shape. When such an operand is computed
from tensor values, the importer calls one of these kernels (``call_packed``:
it returns new arrays) and ``match_cast``\\ s the result to fresh symbolic dims
(see ``importers/onnx/converters/_dynamic.py``).

Each kernel follows ONNX's semantics for the operand, rejects invalid values
with a :class:`~relaxpack.errors.ShapeError` naming the op and the values,
and never returns a view of an input (the memory planner does not know the
result aliases it). Where a destination-passing kernel exists, it computes
the output shape, allocates, and calls that kernel.

>>> reshape(np.zeros((2, 3)), np.array([0, -1, 1])).shape
(2, 3, 1)
>>> topk(np.array([3, 1, 2]), np.array([2]))
(array([3, 2]), array([0, 2]))
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ShapeError
from ..semantics import onnx_slice
from ._math import normalize_axis
from ._registry import bound_value, register_packed
from .algorithm import one_hot as _one_hot_into, range_length, range_ as _range_into, topk as _topk_into
from .image import pad as _pad_into


def _ints(op: str, what: str, array) -> tuple[int, ...]:
    """The contents of an int operand (0-d or 1-D) as Python ints."""
    if type(array) is np.ndarray and array.ndim == 1 and array.dtype.kind in "iu":
        return tuple(array.tolist())            # the common case, without the checks' calls
    a = np.asarray(array)
    if a.dtype.kind not in "iu":
        raise ShapeError(f"{op}: {what} must be integers, got {a.dtype}")
    if a.ndim > 1:
        raise ShapeError(f"{op}: {what} must be 1-D, got shape {a.shape}")
    return tuple(a.reshape(-1).tolist())       # Python ints (iterating makes a numpy scalar each)


def _one_int(op: str, what: str, array) -> int:
    values = _ints(op, what, array)
    if len(values) != 1:
        raise ShapeError(f"{op}: {what} must hold one value, got {values}")
    return values[0]


def _axes(op: str, axes, ndim: int) -> tuple[int, ...]:
    """``axes`` normalized to ``[0, ndim)``; out of range or repeated is an error."""
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeError(f"{op}: axis {a} is out of range for rank {ndim}")
        out.append(a + ndim if a < 0 else a)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: axes {tuple(axes)} repeat an axis")
    return tuple(out)


# ---------------------------------------------------------------- Reshape, Expand, ConstantOfShape


@register_packed("dyn.reshape")
def reshape(x, shape, *, allowzero):
    """ONNX Reshape: a 0 in ``shape`` copies the input's dim (unless
    ``allowzero``, where it is a 0), one -1 is inferred from the size."""
    target = list(_ints("reshape", "the target shape", shape))
    given = tuple(target)
    for i, d in enumerate(target):
        if d < -1:
            raise ShapeError(f"reshape: invalid dim {d} in the target shape {given}")
        if d == 0 and not allowzero:
            if i >= x.ndim:
                raise ShapeError(f"reshape: target {given} copies dim {i} (a 0), but the input has "
                                 f"rank {x.ndim}")
            target[i] = x.shape[i]
    if target.count(-1) > 1:
        raise ShapeError(f"reshape: target {given} has more than one -1")
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        if known == 0 or x.size % known:
            raise ShapeError(f"reshape: cannot infer the -1 of target {given} for input shape {x.shape}")
        target[target.index(-1)] = x.size // known
    if math.prod(target) != x.size:
        raise ShapeError(f"reshape: cannot reshape {x.shape} ({x.size} elements) into {given}")
    return x.reshape(target).copy()


def broadcast_shape(op: str, shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
    """ONNX (multidirectional) broadcasting of two static shapes."""
    rank = max(len(shape), len(target))
    a_all = (1,) * (rank - len(shape)) + tuple(shape)
    b_all = (1,) * (rank - len(target)) + tuple(target)
    out = []
    for a, b in zip(a_all, b_all):
        if a == b or b == 1:
            out.append(a)
        elif a == 1:
            out.append(b)
        else:
            raise ShapeError(f"{op}: cannot broadcast {shape} to {target}: dims {a} and {b} differ "
                             f"and neither is 1")
    return tuple(out)


@register_packed("dyn.expand")
def expand(x, shape):
    """ONNX Expand: ``x`` broadcast with ``shape`` (either side may be 1)."""
    target = _ints("expand", "the shape", shape)
    if any(d < 0 for d in target):
        raise ShapeError(f"expand: negative dim in the shape {target}")
    return np.broadcast_to(x, broadcast_shape("expand", x.shape, target)).copy()


@register_packed("dyn.broadcast_pair")
def broadcast_pair(a, b, *, dims):
    """``a`` and ``b`` broadcast (ONNX multidirectional rules) to their common
    shape, as copies: for an elementwise op whose operands' dims could not be
    related at import time. ``dims`` are the operands' dims as the import
    knew them (text per axis, e.g. ``(("n", "4"), ("m", "4"))``): incompatible
    shapes are a ShapeError naming the two dims that differ and their values."""
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ShapeError(_pair_mismatch(a.shape, b.shape, dims)) from None
    return np.array(np.broadcast_to(a, shape)), np.array(np.broadcast_to(b, shape))


def _pair_mismatch(lhs: tuple, rhs: tuple, dims) -> str:
    """Why shapes ``lhs`` and ``rhs`` do not broadcast: the first pair of dims
    from the right that differ with neither 1, by name when ``dims`` has them."""
    names = [tuple(map(str, lhs)), tuple(map(str, rhs))]
    if dims is not None and [len(d) for d in dims] == [len(lhs), len(rhs)]:
        names = [tuple(d) for d in dims]
    at = next(i for i in range(1, min(len(lhs), len(rhs)) + 1)
              if lhs[-i] != rhs[-i] and lhs[-i] != 1 and rhs[-i] != 1)
    x, y, a, b = lhs[-at], rhs[-at], names[0][-at], names[1][-at]
    values = f"{x} and {y}" if (a, b) == (str(x), str(y)) else f"{a} = {x} and {b} = {y}"
    shown = " and ".join(f"({', '.join(n)}{',' if len(n) == 1 else ''})" for n in names)
    return f"broadcast: cannot broadcast {shown}: {values} differ and neither is 1"


@register_packed("dyn.full")
def full(shape, fill):
    """ONNX ConstantOfShape: a tensor of ``shape`` filled with the 0-d ``fill``."""
    target = _ints("constant_of_shape", "the shape", shape)
    if any(d < 0 for d in target):
        raise ShapeError(f"constant_of_shape: negative dim in the shape {target}")
    return np.full(target, fill, dtype=fill.dtype)


# ---------------------------------------------------------------- Slice, Split


@register_packed("dyn.slice")
def slice_(x, starts, ends, *more, parts):
    """ONNX Slice; ``more`` holds the optional ``axes`` and ``steps`` that
    ``parts`` names, in that order."""
    given = dict(zip(parts, more))
    starts, ends = _ints("slice", "starts", starts), _ints("slice", "ends", ends)
    axes = _ints("slice", "axes", given["axes"]) if "axes" in given else tuple(range(len(starts)))
    steps = _ints("slice", "steps", given["steps"]) if "steps" in given else (1,) * len(starts)
    if not len(ends) == len(axes) == len(steps) == len(starts):
        raise ShapeError(f"slice: starts {starts}, ends {ends}, axes {axes} and steps {steps} must have "
                         f"one length")
    if 0 in steps:
        raise ShapeError(f"slice: steps {steps} must not be 0")
    index = [slice(None)] * x.ndim
    for axis, b, e, s in zip(_axes("slice", axes, x.ndim), starts, ends, steps):
        index[axis] = onnx_slice(b, e, s, x.shape[axis])
    return x[tuple(index)].copy()


def _specialize_slice(attrs: dict, constant: tuple):
    """Per instruction whose ``axes`` and ``steps`` are bound values (the importer's constants;
    the bounds computed at run time, as Mask R-CNN's mask paste crops each box): the axes
    normalized and the steps checked once per rank, so a call of 1-D integer bounds of the axes'
    length reads them and copies (3.6 -> ~1.5 us a crop). Anything else, errors included, takes
    :func:`slice_`."""
    parts = attrs.get("parts", ())

    def general(x, starts, ends, *more, workspace=None):
        return slice_(x, starts, ends, *more, **attrs)
    given = dict(zip(parts, (bound_value(constant, 3 + i) for i in range(len(parts)))))
    if set(attrs) != {"parts"} or len(constant) != 3 + len(parts) or any(v is None for v in given.values()):
        return general
    try:
        axes = _ints("slice", "axes", given["axes"]) if "axes" in given else None
        steps = _ints("slice", "steps", given["steps"]) if "steps" in given else None
    except ShapeError:
        return general
    plans: dict = {}        # (rank, bound count) -> (axes, steps), or None where slice_ raises

    def plan(rank: int, count: int):
        kept = plans.get((rank, count), False)
        if kept is False:
            picked = tuple(range(count)) if axes is None else axes
            each = (1,) * count if steps is None else steps
            try:
                kept = (_axes("slice", picked, rank), each) if len(picked) == len(each) == count \
                    and 0 not in each else None
            except ShapeError:
                kept = None
            plans[(rank, count)] = kept
        return kept

    def call(x, starts, ends, *more, workspace=None):
        if type(x) is np.ndarray and type(starts) is np.ndarray and type(ends) is np.ndarray \
                and starts.ndim == 1 == ends.ndim and starts.dtype.kind in "iu" and ends.dtype.kind in "iu" \
                and starts.size == ends.size:
            known = plan(x.ndim, starts.size)
            if known is not None:
                index = [slice(None)] * x.ndim
                shape = x.shape
                for axis, b, e, s in zip(known[0], starts.tolist(), ends.tolist(), known[1]):
                    index[axis] = onnx_slice(b, e, s, shape[axis])
                return x[tuple(index)].copy()
        return slice_(x, starts, ends, *more, **attrs)
    return call


slice_.specialize_attrs = _specialize_slice


@register_packed("dyn.split")
def split(x, sizes, *, axis, count):
    """ONNX Split with run-time ``sizes`` (one per output, ``count`` of them)."""
    sizes = _ints("split", "split", sizes)
    ax = normalize_axis(axis, x.ndim)
    if len(sizes) != count or any(s < 0 for s in sizes):
        raise ShapeError(f"split: split {sizes} must give {count} non-negative sizes")
    if sum(sizes) != x.shape[ax]:
        raise ShapeError(f"split: split {sizes} sums to {sum(sizes)}, not the dim {x.shape[ax]} of axis {ax}")
    points = np.cumsum((0,) + sizes)
    index = [slice(None)] * x.ndim
    pieces = []
    for start, stop in zip(points, points[1:]):
        index[ax] = slice(int(start), int(stop))
        pieces.append(x[tuple(index)].copy())
    return tuple(pieces)


# ---------------------------------------------------------------- Squeeze, Unsqueeze


@register_packed("dyn.squeeze")
def squeeze(x, axes):
    """ONNX Squeeze: drop the dims at ``axes``, each of which must be 1."""
    axes = _axes("squeeze", _ints("squeeze", "axes", axes), x.ndim)
    if any(x.shape[a] != 1 for a in axes):
        raise ShapeError(f"squeeze: cannot squeeze axes {axes} of shape {x.shape} (not all are 1)")
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes)).copy()


@register_packed("dyn.squeeze_ones")
def squeeze_ones(x, *, rank, what):
    """ONNX Squeeze without axes (drop every dim of 1), where the import fixed
    the output's ``rank`` assuming its undecided symbolic dims are not 1; a
    ShapeError naming the node (``what``) when one is."""
    shape = tuple(d for d in x.shape if d != 1)
    if len(shape) != rank:
        raise ShapeError(f"{what}: Squeeze without axes drops the dims of {x.shape} that are 1, which "
                         f"leaves rank {len(shape)}, but the model was imported for rank {rank} (a "
                         f"symbolic dim is 1 in this run; give Squeeze its axes)")
    return x.reshape(shape).copy()


@register_packed("dyn.unsqueeze")
def unsqueeze(x, axes):
    """ONNX Unsqueeze: insert 1-dims at ``axes`` (axes of the output)."""
    values = _ints("unsqueeze", "axes", axes)
    rank = x.ndim + len(values)
    inserted = set(_axes("unsqueeze", values, rank))
    dims = iter(x.shape)
    return x.reshape(tuple(1 if i in inserted else next(dims) for i in range(rank))).copy()


def _specialize_unsqueeze(attrs: dict, constant: tuple):
    """Per instruction with constant ``axes`` (silero's four unsqueezes of values of unknown
    rank): the output shape kept per input shape, so a call is a reshape and a copy (the general
    path parses and checks the axes every call, ~1.5 us; the positions kept per rank, 0.65 us)."""
    if attrs or len(constant) != 2 or not constant[1]:
        return lambda x, axes, workspace=None: unsqueeze(x, axes)
    kept: dict = {}                 # input shape -> output shape, for the axes kept under None

    def call(x, axes, workspace=None):
        shape = kept.get(x.shape) if kept.get(None) is axes else None
        if shape is None:
            values = _ints("unsqueeze", "axes", axes)
            rank = x.ndim + len(values)
            dims = list(x.shape)
            for i in sorted(_axes("unsqueeze", values, rank)):
                dims.insert(i, 1)
            shape = tuple(dims)
            if len(kept) > 64 or kept.get(None) is not axes:
                kept.clear()
                kept[None] = axes
            kept[x.shape] = shape
        return x.reshape(shape).copy()
    return call


unsqueeze.specialize_attrs = _specialize_unsqueeze


# ---------------------------------------------------------------- Pad, Tile


@register_packed("dyn.pad")
def pad(x, pads, *more, parts, pad_mode, pad_value):
    """ONNX Pad with run-time ``pads``; ``more`` holds the optional constant
    ``value`` (0-d) and ``axes`` that ``parts`` names, in that order."""
    given = dict(zip(parts, more))
    pads = _ints("pad", "pads", pads)
    axes = _axes("pad", _ints("pad", "axes", given["axes"]), x.ndim) if "axes" in given \
        else tuple(range(x.ndim))
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"pad: pads {pads} need {2 * len(axes)} values (begins, then ends) for axes {axes}")
    full = [0] * (2 * x.ndim)
    for i, axis in enumerate(axes):
        full[axis], full[x.ndim + axis] = pads[i], pads[len(axes) + i]
    shape = tuple(d + b + e for d, b, e in zip(x.shape, full, full[x.ndim:]))
    if any(d < 0 for d in shape):
        raise ShapeError(f"pad: pads {pads} crop more than the data's shape {x.shape}")
    out = np.empty(shape, x.dtype)
    value = (given["value"],) if "value" in given else ()
    _pad_into(x, *value, out=out, pads=tuple(full), pad_mode=pad_mode, pad_value=pad_value)
    return out


@register_packed("dyn.tile")
def tile(x, repeats):
    """ONNX Tile with run-time ``repeats`` (one non-negative count per axis)."""
    repeats = _ints("tile", "repeats", repeats)
    if len(repeats) != x.ndim or any(r < 0 for r in repeats):
        raise ShapeError(f"tile: repeats {repeats} must be {x.ndim} non-negative counts for shape {x.shape}")
    return np.tile(x, repeats) if x.ndim else x.copy()


# ---------------------------------------------------------------- TopK, OneHot, Range


@register_packed("dyn.topk")
def topk(x, k, *, axis, largest, sorted):  # noqa: A002 (ONNX's attribute name)
    """ONNX TopK with a run-time ``k``: (values, int64 indices)."""
    k = _one_int("topk", "K", k)
    if k < 0:
        raise ShapeError(f"topk: K must be non-negative, got {k}")
    ax = normalize_axis(axis, x.ndim)
    shape = x.shape[:ax] + (k,) + x.shape[ax + 1:]
    values, indices = np.empty(shape, x.dtype), np.empty(shape, np.int64)
    _topk_into(x, out=(values, indices), k=k, axis=ax, largest=largest, sorted=sorted)
    return values, indices


@register_packed("dyn.one_hot")
def one_hot(indices, depth, values, *, axis):
    """ONNX OneHot with a run-time ``depth`` (a float depth is truncated)."""
    d = np.asarray(depth)
    if d.size != 1 or (d.dtype.kind == "f" and not np.isfinite(d).all()):
        raise ShapeError(f"one_hot: depth must hold one finite value, got {d.reshape(-1)[:4]}")
    n = int(d.reshape(()))
    if n < 0:
        raise ShapeError(f"one_hot: depth must be non-negative, got {n}")
    ax = normalize_axis(axis, indices.ndim + 1)
    out = np.empty(indices.shape[:ax] + (n,) + indices.shape[ax:], values.dtype)
    _one_hot_into(indices, values, out=out, depth=n, axis=ax)
    return out


@register_packed("dyn.range")
def range_(start, limit, delta):
    """ONNX Range with run-time bounds (0-d tensors of one dtype)."""
    bounds = [np.asarray(v).reshape(()).item() for v in (start, limit, delta)]
    dtype = np.asarray(start).dtype
    if dtype.kind not in "iu":
        bounds = [float(b) for b in bounds]
    out = np.empty(range_length(*bounds), dtype)
    _range_into(*bounds, out=out, dtype=dtype.name)
    return out
