"""Output shapes of destination-passing kernels, from their operands at run time.

``dyn.apply`` (see dynamic_apply.py) calls an op's own kernel into an output
it allocates at run time, for a call the build could not shape: an operand
of unknown rank (an If whose branches give different ranks, an input typed
without a shape). For an op whose output is its operands' broadcast shape
(elementwise ops, softmax, cumsum, ...) that shape is the broadcast; the
ops here compute theirs from the operands' shapes and the op's attributes,
as its struct-info inference does at build time, but on ints, with the
axes normalized for the rank this call meets. A rule raises a ShapeError
naming the op when the operands do not fit (concat of different ranks, a
matmul's inner dims, an axis out of range).

>>> OUTPUT_SHAPES["concat"]([(np.ones((2, 3)), np.ones((1, 3)))], {"axis": -2})
(3, 3)
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ...errors import ShapeError
from ..semantics import onnx_slice
from ._math import axis_tuple, normalize_axis
from .dynamic_reduce import reduced_shape
from .manipulate import split_points

Shape = tuple[int, ...]
#: (the call's operands, its attributes) -> the output's shape, or a tuple of shapes for a tuple output
ShapeRule = Callable[[list, dict], "Shape | tuple[Shape, ...]"]

#: kernel name -> its output shape rule
OUTPUT_SHAPES: dict[str, ShapeRule] = {}


def output_shape(*names: str) -> Callable[[ShapeRule], ShapeRule]:
    """Register the decorated rule for the kernels ``names``."""
    def wrap(rule: ShapeRule) -> ShapeRule:
        for name in names:
            OUTPUT_SHAPES[name] = rule
        return rule
    return wrap


def _axis(op: str, axis: int, ndim: int) -> int:
    try:
        return normalize_axis(axis, ndim)
    except ShapeError as err:
        raise ShapeError(f"{op}: {err}") from None


def _axes(op: str, axes, ndim: int) -> tuple[int, ...]:
    try:
        normalized = axis_tuple(axes, ndim)
    except ShapeError as err:
        raise ShapeError(f"{op}: {err}") from None
    if len(set(normalized)) != len(normalized):
        raise ShapeError(f"{op}: axes {tuple(axes)} name an axis twice (rank {ndim})")
    return normalized


def broadcast(op: str, shapes: list[Shape]) -> Shape:
    """numpy's (ONNX multidirectional) broadcast of ``shapes``."""
    if shapes and all(s == shapes[0] for s in shapes) and type(shapes[0]) is tuple:
        return shapes[0]            # (one operand, or equal shapes: np.broadcast_shapes costs ~2 us)
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"{op}: operands of shapes {shown} do not broadcast") from None


# ---------------------------------------------------------------- concat, split, permute_dims


@output_shape("concat")
def _concat(args, attrs) -> Shape:
    shapes = [np.shape(t) for t in args[0]]

    def shown() -> str:
        return ", ".join(str(s) for s in shapes)
    ndim = len(shapes[0]) if shapes else -1
    if ndim < 0 or any(len(s) != ndim for s in shapes):
        raise ShapeError(f"concat: cannot concatenate tensors of different ranks: {shown()}")
    if ndim == 0:
        raise ShapeError(f"concat: cannot concatenate scalars: {shown()}")
    axis = _axis("concat", attrs["axis"], ndim)
    first = shapes[0]
    before, after, total = first[:axis], first[axis + 1:], 0
    for s in shapes:
        if s[:axis] != before or s[axis + 1:] != after:
            raise ShapeError(f"concat: cannot concatenate {shown()} along axis {axis}")
        total += s[axis]
    return before + (total,) + after


@output_shape("split")
def _split(args, attrs) -> tuple[Shape, ...]:
    shape = np.shape(args[0])
    if not shape:
        raise ShapeError("split: cannot split a scalar")
    axis = _axis("split", attrs["axis"], len(shape))
    points = split_points(shape[axis], attrs["indices_or_sections"])
    return tuple(shape[:axis] + (b - a,) + shape[axis + 1:] for a, b in zip(points, points[1:]))


@output_shape("permute_dims")
def _permute_dims(args, attrs) -> Shape:
    shape = np.shape(args[0])
    axes = attrs["axes"]
    if axes is None:
        return shape[::-1]
    if len(axes) != len(shape):
        raise ShapeError(f"permute_dims: axes {tuple(axes)} do not permute the {len(shape)} dims of {shape}")
    return tuple(shape[a] for a in _axes("permute_dims", axes, len(shape)))


@output_shape("flatten")
def _flatten(args, attrs) -> Shape:
    shape = np.shape(args[0])
    axis = attrs["axis"]
    if not -len(shape) <= axis <= len(shape):
        raise ShapeError(f"flatten: axis {axis} is out of range for a tensor of rank {len(shape)}")
    axis = axis + len(shape) if axis < 0 else axis
    return math.prod(shape[:axis]), math.prod(shape[axis:])


@output_shape("tile")
def _tile(args, attrs) -> Shape:
    shape, repeats = np.shape(args[0]), tuple(attrs["repeats"])
    if len(repeats) != len(shape):
        raise ShapeError(f"tile: {len(repeats)} repeats for a tensor of rank {len(shape)}")
    return tuple(d * int(r) for d, r in zip(shape, repeats))


@output_shape("squeeze")
def _squeeze(args, attrs) -> Shape:
    shape = np.shape(args[0])
    axes = attrs["axis"]
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = _axes("squeeze", axes, len(shape))
    if any(shape[a] != 1 for a in axes):
        raise ShapeError(f"squeeze: cannot squeeze axes {tuple(attrs['axis'])} of shape {shape}: not all 1")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


@output_shape("expand_dims")
def _expand_dims(args, attrs) -> Shape:
    shape, axes = np.shape(args[0]), attrs["axis"]
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    ndim = len(shape) + len(axes)
    inserted = _axes("expand_dims", axes, ndim)
    rest = iter(shape)
    return tuple(1 if i in inserted else next(rest) for i in range(ndim))


@output_shape("nn.batch_norm", "nn.instance_norm", "nn.lrn", "nn.layer_norm", "nn.rms_norm", "nn.squeeze_excite",
              "reverse_sequence", "rotate_half", "scatter_nd", "scatter_elements")
def _like_data(args, attrs) -> Shape:
    """Normalizations, SE blocks, ReverseSequence, rotate_half and the scatters: the data's shape
    (their other operands are per channel, or what is written into it)."""
    return np.shape(args[0])


# ---------------------------------------------------------------- reductions


@output_shape("sum", "mean", "prod", "max", "min")
def _reduce(args, attrs) -> Shape:
    shape = np.shape(args[0])
    axes = attrs["axis"]
    axes = None if axes is None else _axes("reduce", axes, len(shape))
    return reduced_shape(shape, axes, bool(attrs["keepdims"]))


@output_shape("argmax", "argmin")
def _arg_reduce(args, attrs) -> Shape:
    shape = np.shape(args[0])
    axis = attrs["axis"]
    axes = None if axis is None else (_axis("argmax", axis, len(shape)),)
    return reduced_shape(shape, axes, bool(attrs["keepdims"]))


@output_shape("nn.global_avg_pool", "nn.global_max_pool")
def _global_pool(args, attrs) -> Shape:
    shape = np.shape(args[0])
    if len(shape) < 3:
        raise ShapeError(f"global pool: needs (N, C, spatial...), got shape {shape}")
    if attrs["data_layout"] == "NHWC":
        return (shape[0],) + (1,) * (len(shape) - 2) + (shape[-1],)
    return shape[:2] + (1,) * (len(shape) - 2)


# ---------------------------------------------------------------- indexing


@output_shape("take")
def _take(args, attrs) -> Shape:
    shape, indices = np.shape(args[0]), np.shape(args[1])
    if not shape:
        raise ShapeError("take: cannot take from a scalar")
    axis = _axis("take", attrs["axis"], len(shape))
    return shape[:axis] + indices + shape[axis + 1:]


@output_shape("gather_elements")
def _gather_elements(args, attrs) -> Shape:
    shape, indices = np.shape(args[0]), np.shape(args[1])
    if len(shape) != len(indices):
        raise ShapeError(f"gather_elements: data of shape {shape} and indices of shape {indices} differ in rank")
    _axis("gather_elements", attrs["axis"], len(shape))
    return indices


@output_shape("gather_nd")
def _gather_nd(args, attrs) -> Shape:
    shape, indices = np.shape(args[0]), np.shape(args[1])
    batch = int(attrs["batch_dims"])
    if not indices or batch + indices[-1] > len(shape):
        raise ShapeError(f"gather_nd: indices of shape {indices} do not index data of shape {shape} "
                         f"(batch_dims {batch})")
    return indices[:-1] + shape[batch + indices[-1]:]


@output_shape("topk")
def _topk(args, attrs) -> tuple[Shape, Shape]:
    shape = np.shape(args[0])
    if not shape:
        raise ShapeError("topk: needs a tensor of rank >= 1, got a scalar")
    axis = _axis("topk", attrs["axis"], len(shape))
    values = shape[:axis] + (int(attrs["k"]),) + shape[axis + 1:]
    return values, values


@output_shape("strided_slice")
def _strided_slice(args, attrs) -> Shape:
    shape = list(np.shape(args[0]))
    axes, begin, end = attrs["axes"], attrs["begin"], attrs["end"]
    strides = attrs["strides"] or (1,) * len(axes)
    for axis, b, e, s in zip(_axes("strided_slice", axes, len(shape)), begin, end, strides):
        shape[axis] = len(range(*onnx_slice(b, e, s, shape[axis]).indices(shape[axis])))
    return tuple(shape)


@output_shape("one_hot")
def _one_hot(args, attrs) -> Shape:
    indices = np.shape(args[0])
    axis = _axis("one_hot", attrs["axis"], len(indices) + 1)
    return indices[:axis] + (int(attrs["depth"]),) + indices[axis:]


# ---------------------------------------------------------------- products


@output_shape("det")
def _det(args, attrs) -> Shape:
    shape = np.shape(args[0])
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ShapeError(f"det: needs square matrices (..., M, M), got shape {shape}")
    return shape[:-2]


@output_shape("matmul")
def _matmul(args, attrs) -> Shape:
    """numpy's matmul: 1-D operands gain a dim that the result drops again."""
    a, b = np.shape(args[0]), np.shape(args[1])
    if not a or not b:
        raise ShapeError(f"matmul: operands of shapes {a} and {b}: scalars do not multiply as matrices")
    left = (1,) + a if len(a) == 1 else a
    right = b + (1,) if len(b) == 1 else b
    if left[-1] != right[-2]:
        raise ShapeError(f"matmul: inner dims of shapes {a} and {b} differ ({left[-1]} and {right[-2]})")
    rows = (left[-2],) if len(a) > 1 else ()
    columns = (right[-1],) if len(b) > 1 else ()
    return broadcast("matmul", [left[:-2], right[:-2]]) + rows + columns


@output_shape("einsum")
def _einsum(args, attrs) -> Shape:
    """Each label's dim (1s broadcast), the ellipsis dims broadcast; without
    ``->`` the output is the ellipsis, then the labels used once, sorted."""
    operands, equation = args[0], attrs["equation"].replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        raise ShapeError(f"einsum: equation {equation!r} has {len(terms)} operands, got {len(operands)}")
    dims: dict[str, int] = {}
    ellipses = []
    for term, operand in zip(terms, operands):
        shape = np.shape(operand)
        head, dots, tail = term.partition("...")
        middle = len(shape) - len(head) - len(tail)
        if middle < 0 or (middle and not dots):
            raise ShapeError(f"einsum: term {term!r} of {equation!r} does not fit an operand of shape {shape}")
        if dots:
            ellipses.append(shape[len(head):len(head) + middle])
        for label, d in zip(head + tail, shape[:len(head)] + shape[len(head) + middle:]):
            if dims.get(label, 1) not in (1, d) and d != 1:
                raise ShapeError(f"einsum: label {label!r} of {equation!r} has dims {dims[label]} and {d}")
            dims[label] = d if dims.get(label, 1) == 1 else dims[label]
    if not arrow:
        labels = inputs.replace("...", "").replace(",", "")
        output = "..." * bool(ellipses) + "".join(sorted(x for x in set(labels) if labels.count(x) == 1))
    head, dots, tail = output.partition("...")
    batch = broadcast("einsum", ellipses) if dots else ()
    return tuple(dims[x] for x in head) + batch + tuple(dims[x] for x in tail)
