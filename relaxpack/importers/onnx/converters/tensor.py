"""Data movement: Reshape, Expand, Flatten, Transpose, Concat, Split,
Gather, GatherElements, Squeeze, Unsqueeze, DepthToSpace, SpaceToDepth.
(Tile is in algorithm.py, with the IR op tile; Slice in slice.py.)

Shape-like operands (Reshape's and Expand's targets, Slice's bounds, Split's
sizes, the axes of Squeeze/Unsqueeze) are read at import time when known,
so an ONNX target computed from ``Shape`` becomes a symbolic
``R.shape([...])``. When the data itself holds symbolic contents (a
computed shape), Gather, Slice, Concat, Split, Squeeze, Unsqueeze and
Reshape compute the new contents at import time and emit nothing. An
operand computed from tensor values is read at run time by a packed kernel
(``dyn.reshape``, ...; see ``_dynamic.packed_call``): the output's rank
comes from the operand's static length, and the dims the operand cannot
change are kept::

    Reshape(x, s: int64 (3,))   ->  lv = R.call_packed("dyn.reshape", x, s, kernel_attrs=(("allowzero", False),))
                                    y = R.match_cast(lv, R.Tensor((reshape_d1, reshape_d2, reshape_d3), "float32"))
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ....ir.dims import Dim
from ....ir.expr import Tuple, TupleGetItem
from ....ir.struct_info import TensorStructInfo
from ....ops.definitions.common import exact_div
from ....ops.registry import make_call
from ..lift import lift_dims, shadow_of
from ..registry import register_converter
from ..value import Value
from ._shape_common import (
    INT_KINDS, broadcast_dims, const_ints, contents_value, emit, fmt_dims, int_contents,
    is_symbolic, norm_axes, norm_axis, of_rank, runtime_length, shape_error, shape_expr, shaped, unsupported,
)
from ._dynamic import packed_call
from . import _unknown_rank as unknown_rank

# ---------------------------------------------------------------- Reshape


@register_converter("", "Reshape", since_opset=1)
def reshape_v1(ctx, data, *, shape=None, consumed_inputs=None):
    if shape is None:
        raise shape_error(ctx, "needs the attribute shape")
    return _reshape(ctx, data, ctx.const(np.array(shape, np.int64)))


@register_converter("", "Reshape", since_opset=5)
def reshape_v5(ctx, data, shape):
    return _reshape(ctx, data, shape)


@register_converter("", "Reshape", since_opset=14)
def reshape_v14(ctx, data, shape, *, allowzero=0):
    return _reshape(ctx, data, shape, allowzero)


def _reshape(ctx, data: Value, target: Value, allowzero: int = 0):
    if target.ndim != 1:
        raise shape_error(ctx, f"the target shape must be 1-D, got rank {target.ndim}")
    if target.int_values() is None:
        rank = runtime_length(ctx, target, "the target shape", unknown_ok=True)
        # a 1-D target can only flatten: its value does not change the shape
        if rank is None:
            shape = None
        else:
            shape = (math.prod(data.shape, start=1),) if rank == 1 and data.shape is not None else (None,) * rank
        return packed_call(ctx, "dyn.reshape", [data, target], [(shape, data.dtype)], "reshape",
                           allowzero=bool(allowzero))
    dims = list(target.int_values())
    zeros = [i for i, d in enumerate(dims) if isinstance(d, int) and d == 0]
    if data.ndim < 0 and (-1 in dims or zeros and not allowzero):
        # an input of unknown rank (an If-merged value, an input typed without a shape):
        # the -1 and the copied dims are known at run time only
        known = [None if isinstance(d, int) and (d == -1 or d == 0 and not allowzero) else d for d in dims]
        return packed_call(ctx, "dyn.reshape", [data, ctx.sym_value(dims)], [(known, data.dtype)], "reshape",
                           allowzero=bool(allowzero))
    if zeros and not allowzero:
        data = shaped(ctx, data)
        shape = data.shape
        for i in zeros:
            if i >= len(shape):
                raise shape_error(ctx, f"target {fmt_dims(dims)} copies dim {i} (a 0), but the input "
                                       f"has rank {len(shape)}")
            dims[i] = shape[i]
    elif zeros and -1 in dims:
        raise shape_error(ctx, f"target {fmt_dims(dims)} has both 0 (allowzero=1) and -1")
    if -1 in dims:
        data = shaped(ctx, data)   # so the -1 can be inferred
    if is_symbolic(data) and all(isinstance(d, int) for d in dims):
        flat, _ = int_contents(data)
        known = math.prod(d for d in dims if d != -1)
        out = [len(flat) // known if d == -1 and known else d for d in dims]
        if math.prod(out) != len(flat):
            raise shape_error(ctx, f"cannot reshape {len(flat)} elements into {fmt_dims(dims)}")
        return contents_value(ctx, flat, out, data.dtype)
    call = make_call("reshape", ctx.expr(data), shape_expr(dims))
    if -1 in dims and ctx.bb.infer_call(call).shape is None:
        return _reshape_to_fresh_dim(ctx, data, dims)
    return call


def _reshape_to_fresh_dim(ctx, data: Value, dims: list) -> Value:
    """A -1 that no dim expression gives (the size over a non-monomial such
    as ``n + 2``: division is by constants only): ``dyn.reshape`` infers it
    at run time and a fresh dim binds it; the other dims stay as given and
    are checked. (The 0s were already replaced by the input's dims.)"""
    target = ctx.sym_value(dims)
    known = [None if isinstance(d, int) and d == -1 else d for d in dims]
    return packed_call(ctx, "dyn.reshape", [data, target], [(known, data.dtype)], "reshape", allowzero=True)


# ---------------------------------------------------------------- Expand


@register_converter("", "Expand", since_opset=8)
def expand(ctx, data, shape):
    if data.ndim < 0:
        return unknown_rank.expand(ctx, data, shape)
    data = shaped(ctx, data)
    target = shape.int_values()
    if target is None:
        contents = shadow_of(ctx, shape, "shape")
        if contents is None or not _decided(ctx, data.shape, contents):
            return _dynamic_expand(ctx, data, shape)
        target = lift_dims(ctx, shape, "shape")
    out = broadcast_dims(ctx, data.shape, target)
    if out is None:
        return _dynamic_expand(ctx, data, shape)
    if out == tuple(data.shape):
        return data
    return make_call("broadcast_to", ctx.expr(data), shape_expr(out))


def _decided(ctx, shape, target) -> bool:
    """Whether Expand of ``shape`` to data-dependent ``target`` contents has an
    output shape the import can state without assuming anything of the
    values: each symbolic target dim meets a 1 or a provably equal dim (a
    static dim against one would assume the value is 1 or equal; the run
    decides that, as for any shape known only then)."""
    left = (1,) * (len(target) - len(shape)) + tuple(shape)
    if len(left) != len(target):
        return False
    analyzer = ctx.bb.analyzer
    return all(isinstance(t, int) or d == 1 or analyzer.prove_equal(d, t) for d, t in zip(left, target))


def _dynamic_expand(ctx, data: Value, shape: Value):
    """Expand to a shape known at run time: the output's rank is known from
    the shape's length, and so is each dim the input holds as an int other
    than 1 (the target must be 1 or equal there)."""
    length = runtime_length(ctx, shape, "the target shape", unknown_ok=True)
    if length is None:
        return packed_call(ctx, "dyn.expand", [data, shape], [(None, data.dtype)], "expand")
    rank = max(length, data.ndim)
    kept = (None,) * (rank - data.ndim) + tuple(d if isinstance(d, int) and d != 1 else None
                                                for d in data.shape)
    return packed_call(ctx, "dyn.expand", [data, shape], [(kept, data.dtype)], "expand")


# ---------------------------------------------------------------- Flatten, Transpose


@register_converter("", "Flatten", since_opset=1)
def flatten(ctx, data, *, axis=1):
    if data.ndim < 0:       # 2-D whatever the rank; the run shapes it (dyn.apply)
        return make_call("flatten", ctx.expr(data), axis=axis)
    data = shaped(ctx, data)
    if not -data.ndim <= axis <= data.ndim:
        raise shape_error(ctx, f"axis {axis} is out of range [{-data.ndim}, {data.ndim}]")
    return make_call("flatten", ctx.expr(data), axis=axis + data.ndim if axis < 0 else axis)


@register_converter("", "Transpose", since_opset=1)
def transpose(ctx, data, *, perm=None):
    if perm is not None and data.ndim < 0:      # the perm says the rank (the run checks it)
        data = of_rank(ctx, data, len(perm))
    if perm is not None and data.ndim >= 0:
        if len(perm) != data.ndim:
            raise shape_error(ctx, f"perm {tuple(perm)} does not permute the {data.ndim} axes")
        if norm_axes(ctx, perm, data.ndim, "perm") == tuple(range(data.ndim)):
            return data
    elif perm is None and data.ndim in (0, 1):
        return data
    if data.ndim >= 0:
        data = shaped(ctx, data)
    return make_call("permute_dims", ctx.expr(data), axes=None if perm is None else tuple(perm))


# ---------------------------------------------------------------- Concat, Split


@register_converter("", "Concat", since_opset=1)
def concat_v1(ctx, *inputs, axis=1):
    return _concat(ctx, inputs, axis)


@register_converter("", "Concat", since_opset=4)
def concat_v4(ctx, *inputs, axis=None):
    if axis is None:
        raise shape_error(ctx, "needs the attribute axis")
    return _concat(ctx, inputs, axis)


def _concat(ctx, inputs, axis: int):
    values = [v for v in inputs if v is not None]
    if not values:
        raise shape_error(ctx, "needs at least one input")
    if any(is_symbolic(v) for v in values) and all(v.ndim == 1 for v in values) and axis in (0, -1) \
            and len({v.dtype for v in values}) == 1 and all(int_contents(v) for v in values):
        flat = [d for v in values for d in int_contents(v)[0]]
        return contents_value(ctx, flat, (len(flat),), values[0].dtype)
    if len(values) == 1:
        return values[0]
    ranks = {v.ndim for v in values if v.ndim >= 0}
    if len(ranks) == 1:     # inputs of unknown rank take the others' (the run checks it)
        rank = ranks.pop()
        values = [of_rank(ctx, v, rank) for v in values]
    values = [shaped(ctx, v) if v.ndim >= 0 else v for v in values]
    return make_call("concat", Tuple([ctx.expr(v) for v in values]), axis=axis)


@register_converter("", "Split", since_opset=1)
def split_v1(ctx, data, sizes=None, /, *, axis=0, split=None):
    # opset 1 takes the sizes as its second input or as the attribute split
    return _split(ctx, data, split if sizes is None else sizes, axis)


@register_converter("", "Split", since_opset=2)
def split_v2(ctx, data, *, axis=0, split=None):
    return _split(ctx, data, split, axis)


@register_converter("", "Split", since_opset=13)
def split_v13(ctx, data, split=None, *, axis=0):
    return _split(ctx, data, split, axis)


@register_converter("", "Split", since_opset=18)
def split_v18(ctx, data, split=None, *, axis=0, num_outputs=None):
    if split is not None and num_outputs is not None:
        raise shape_error(ctx, "takes either the input split or the attribute num_outputs, not both")
    if split is None and num_outputs is None:
        raise shape_error(ctx, "needs the input split or the attribute num_outputs")
    if num_outputs is not None and num_outputs != len(ctx.node.output):
        raise shape_error(ctx, f"num_outputs={num_outputs} but the node has {len(ctx.node.output)} outputs")
    return _split(ctx, data, split, axis)


def _split(ctx, data: Value, sizes: Value | Sequence[int] | None, axis: int):
    """Split into the node's outputs: ``sizes`` (an attribute's ints, or an
    input whose contents may be known only at run time) or equal pieces."""
    count = len(ctx.node.output)
    if data.ndim < 0:
        return unknown_rank.split(ctx, data, sizes, axis, count)
    data = shaped(ctx, data)
    ax = norm_axis(ctx, axis, data.ndim)
    if isinstance(sizes, Value):
        if const_ints(sizes) is None:
            return _dynamic_split(ctx, data, sizes, ax, count)
        sizes = const_ints(sizes)
    if sizes is not None:
        sizes = tuple(int(s) for s in sizes)
        if len(sizes) != count or any(s < 0 for s in sizes):
            raise shape_error(ctx, f"split {sizes} must give {count} non-negative sizes")
        dim = data.shape[ax]
        if isinstance(dim, int) and sum(sizes) != dim:
            raise shape_error(ctx, f"split {sizes} sums to {sum(sizes)}, not the dim {dim} of axis {ax}")
        if not isinstance(dim, int):
            data = _assume_dim(ctx, data, ax, sum(sizes))
    if count == 1:
        return data
    if data.const is not None:      # paddle2onnx splits a static Shape into its dims: the pieces stay known
        const = np.asarray(data.const)
        points = np.cumsum(sizes[:-1]) if sizes is not None else _equal_points(const.shape[ax], count)
        return tuple(ctx.const(piece) for piece in np.split(const, points, axis=ax))
    if is_symbolic(data) and sizes is None and int_contents(data):
        sizes = _equal_pieces(len(int_contents(data)[0]), count)
    if is_symbolic(data) and sizes is not None:
        flat, _ = int_contents(data)
        starts = np.cumsum((0,) + sizes)
        return tuple(contents_value(ctx, flat[a:b], (b - a,), data.dtype) for a, b in zip(starts, starts[1:]))
    spec = count if sizes is None else tuple(int(p) for p in np.cumsum(sizes[:-1]))
    pieces = ctx.emit(make_call("split", ctx.expr(data), indices_or_sections=spec, axis=ax), "split")
    return tuple(TupleGetItem(pieces.expr, i) for i in range(count))


def _assume_dim(ctx, data: Value, axis: int, size: int) -> Value:
    """``data`` with its symbolic dim ``axis`` assumed to be ``size``: a
    ``match_cast`` the run checks (ir/gradual.py). Split's sizes must sum to
    the dim; without it the pieces past a split point are of unknown size
    (EfficientFormer's attention splits q, k, v off a reshaped dim)."""
    shape = data.shape[:axis] + (size,) + data.shape[axis + 1:]
    sinfo = TensorStructInfo(shape, data.dtype, vdevice=data.sinfo.vdevice)
    return Value(sinfo, expr=ctx.bb.match_cast(ctx.expr(data), sinfo, "split_in"))


def _equal_points(dim: int, count: int) -> list[int]:
    """Where ONNX's split of ``dim`` into ``count`` equal pieces cuts."""
    return [int(p) for p in np.cumsum(_equal_pieces(dim, count)[:-1])]


def _equal_pieces(dim: int, count: int) -> tuple[int, ...]:
    """ONNX's split into ``count`` pieces: ``ceil(dim / count)`` each, the last one smaller."""
    chunk = -(-dim // count)
    sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(count)]
    return tuple(sizes)


def _dynamic_split(ctx, data: Value, sizes: Value, ax: int, count: int):
    """Sizes known at run time: each piece keeps every dim but the split one,
    which is its size when the sizes are computed from shapes (``s - 2``;
    the run checks them against the values), else a fresh dim."""
    if runtime_length(ctx, sizes, "split") != count:
        raise shape_error(ctx, f"split has {runtime_length(ctx, sizes, 'split')} sizes for {count} outputs")
    known = sizes.int_values() or (None,) * count
    outputs = [(tuple(size if i == ax else d for i, d in enumerate(data.shape)), data.dtype) for size in known]
    values = packed_call(ctx, "dyn.split", [data, sizes], outputs, "split", axis=ax, count=count)
    return tuple(values) if count > 1 else values


# ---------------------------------------------------------------- Gather, GatherElements


@register_converter("", "Gather", since_opset=1)
def gather(ctx, data, indices, *, axis=0):
    if data.ndim < 0:
        return unknown_rank.gather(ctx, data, indices, axis)
    ax = norm_axis(ctx, axis, data.ndim)
    known = int_contents(indices)
    if is_symbolic(data) and data.ndim == 1 and known and all(isinstance(i, int) for i in known[0]):
        flat, _ = int_contents(data)
        picked = [flat[_in_range(ctx, i, len(flat), ax)] for i in known[0]]
        return contents_value(ctx, picked, known[1], data.dtype)
    data = shaped(ctx, data)
    return make_call("take", ctx.expr(data), _indices(ctx, indices, data.shape[ax], ax), axis=ax)


@register_converter("", "GatherElements", since_opset=11)
def gather_elements(ctx, data, indices, *, axis=0):
    if data.ndim < 0 and indices.ndim >= 0:     # the indices' rank is the data's (the run checks it)
        data = of_rank(ctx, data, indices.ndim, "data")
    if data.ndim < 0:
        return unknown_rank.gather_elements(ctx, data, indices, axis)
    data = shaped(ctx, data)
    if indices.ndim >= 0 and indices.ndim != data.ndim:
        raise shape_error(ctx, f"data of rank {data.ndim} and indices of rank {indices.ndim} differ")
    ax = norm_axis(ctx, axis, data.ndim)
    return make_call("gather_elements", ctx.expr(data), _indices(ctx, indices, data.shape[ax], ax), axis=ax)


def _in_range(ctx, index: int, dim: int, axis: int) -> int:
    if not -dim <= index < dim:
        raise shape_error(ctx, f"index {index} is out of range for axis {axis} of size {dim}")
    return index + dim if index < 0 else index


def _indices(ctx, indices: Value, dim: Dim, axis: int):
    """``indices`` as the kernel takes them: known ones checked against
    ``[-dim, dim)`` and counted from the end at import; run-time ones passed
    as they are, since the kernels (``take``, ``gather_elements``) count
    negative indices from the end and refuse any outside ``[-dim, dim)``
    (normalizing here first would turn ``-dim - 1`` into a valid ``-1``)."""
    if not (indices.dtype or "").startswith(INT_KINDS):
        raise shape_error(ctx, f"indices must be integers, got {indices.dtype}")
    if indices.const is not None and isinstance(dim, int) and not indices.dtype.startswith("uint"):
        array = indices.const
        bad = array[(array < -dim) | (array >= dim)]
        if bad.size:
            _in_range(ctx, int(bad.flat[0]), dim, axis)
        fixed = np.where(array < 0, array + dim, array).astype(array.dtype)
        return ctx.expr(ctx.const(fixed))
    return ctx.expr(indices)


# ---------------------------------------------------------------- Squeeze, Unsqueeze


@register_converter("", "Squeeze", since_opset=1)
def squeeze_v1(ctx, data, *, axes=None):
    if data.ndim < 0 and axes is not None:
        return _unknown_rank(ctx, "dyn.squeeze", data, ctx.const(np.array(axes, np.int64)), "squeeze")
    return _squeeze(ctx, data, axes)


@register_converter("", "Squeeze", since_opset=13)
def squeeze_v13(ctx, data, axes=None):
    if data.ndim < 0 and axes is not None:
        return _unknown_rank(ctx, "dyn.squeeze", data, axes, "squeeze")
    if axes is not None and const_ints(axes) is None:
        data = shaped(ctx, data)
        rank = data.ndim - runtime_length(ctx, axes, "axes", rank=(0, 1))
        if rank < 0:
            raise shape_error(ctx, f"cannot squeeze {data.ndim - rank} axes of a rank-{data.ndim} input")
        return packed_call(ctx, "dyn.squeeze", [data, axes], [(_ones_or_unknown(data, rank), data.dtype)],
                           "squeeze")
    return _squeeze(ctx, data, const_ints(axes))


def _squeeze(ctx, data: Value, axes):
    data = shaped(ctx, data)
    if axes is None:
        analyzer = ctx.bb.analyzer
        undecided = [d for d in data.shape if not isinstance(d, int) and not analyzer.prove_equal(d, 1)
                     and not (analyzer.prove_gt(d, 1) or analyzer.prove_lt(d, 1))]
        axes = tuple(i for i, d in enumerate(data.shape) if d == 1 or analyzer.prove_equal(d, 1))
        if undecided:
            return _squeeze_checked(ctx, data, axes)
    else:
        axes = norm_axes(ctx, axes, data.ndim)
    if not axes:
        return data
    if is_symbolic(data):
        flat, shape = int_contents(data)
        if any(shape[a] != 1 for a in axes):
            raise shape_error(ctx, f"cannot squeeze axes {axes} of shape {fmt_dims(shape)}")
        return contents_value(ctx, flat, [d for i, d in enumerate(shape) if i not in axes], data.dtype)
    return make_call("squeeze", ctx.expr(data), axis=tuple(sorted(axes)))


def _squeeze_checked(ctx, data: Value, axes: tuple[int, ...]):
    """Squeeze without axes where some symbolic dims may or may not be 1: the
    output's rank would depend on data, so the import keeps those dims (the
    only way a model that then uses the output's rank can be valid, e.g.
    AffineGrid's body with its batch N) and the run checks it:
    ``dyn.squeeze_ones`` drops the dims that are 1 and fails, naming the
    node, if that is not exactly ``axes``."""
    kept = [d for i, d in enumerate(data.shape) if i not in axes]
    return packed_call(ctx, "dyn.squeeze_ones", [data], [(kept, data.dtype)], "squeeze",
                       rank=len(kept), what=ctx.node_label())


@register_converter("", "Unsqueeze", since_opset=1)
def unsqueeze_v1(ctx, data, *, axes):
    if data.ndim < 0:
        return _unknown_rank(ctx, "dyn.unsqueeze", data, ctx.const(np.array(axes, np.int64)), "unsqueeze")
    return _unsqueeze(ctx, data, axes)


@register_converter("", "Unsqueeze", since_opset=13)
def unsqueeze_v13(ctx, data, axes):
    if data.ndim < 0:
        return _unknown_rank(ctx, "dyn.unsqueeze", data, axes, "unsqueeze")
    if const_ints(axes) is None:
        data = shaped(ctx, data)
        rank = data.ndim + runtime_length(ctx, axes, "axes", rank=(0, 1))
        return packed_call(ctx, "dyn.unsqueeze", [data, axes], [(_ones_or_unknown(data, rank), data.dtype)],
                           "unsqueeze")
    return _unsqueeze(ctx, data, const_ints(axes))


def _unknown_rank(ctx, kernel: str, data: Value, axes: Value, hint: str) -> Value:
    """Squeeze or Unsqueeze of a value of unknown rank (an If whose branches give
    different ranks, an untyped input): done at run time, the result's rank unknown too."""
    return packed_call(ctx, kernel, [data, axes], [(None, data.dtype)], hint)


def _ones_or_unknown(data: Value, rank: int) -> tuple[int | None, ...]:
    """The output shape of Squeeze/Unsqueeze with axes known at run time: all
    1s when every dim of the data is 1 (wherever the axes are), else unknown."""
    return (1,) * rank if all(d == 1 for d in data.shape) else (None,) * rank


def _unsqueeze(ctx, data: Value, axes):
    data = shaped(ctx, data)
    rank = data.ndim + len(axes)
    axes = tuple(sorted(norm_axes(ctx, axes, rank)))
    if not axes:
        return data
    if is_symbolic(data) and rank <= 1:
        flat, _ = int_contents(data)
        return contents_value(ctx, flat, (1,) * rank, data.dtype)
    return make_call("expand_dims", ctx.expr(data), axis=axes)


# ---------------------------------------------------------------- DepthToSpace, SpaceToDepth


@register_converter("", "DepthToSpace", since_opset=1)
def depth_to_space_v1(ctx, data, *, blocksize):
    return _depth_to_space(ctx, data, blocksize, "DCR")


@register_converter("", "DepthToSpace", since_opset=11)
def depth_to_space_v11(ctx, data, *, blocksize, mode="DCR"):
    return _depth_to_space(ctx, data, blocksize, mode)


def _depth_to_space(ctx, data: Value, b: int, mode: str):
    n, c, h, w = _image_shape(ctx, data, b)
    c_out = _divide(ctx, c, b * b, "channels")
    if mode == "DCR":
        spread, perm = (n, b, b, c_out, h, w), (0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        spread, perm = (n, c_out, b, b, h, w), (0, 1, 4, 2, 5, 3)
    else:
        raise unsupported(ctx, f"mode {mode!r} (expected 'DCR' or 'CRD')")
    x = emit(ctx, make_call("reshape", ctx.expr(data), shape_expr(spread)), "d2s")
    x = emit(ctx, make_call("permute_dims", x, axes=perm), "d2s")
    return make_call("reshape", x, shape_expr((n, c_out, h * b, w * b)))


@register_converter("", "SpaceToDepth", since_opset=1)
def space_to_depth(ctx, data, *, blocksize):
    return _space_to_depth(ctx, data, blocksize, "DCR")


@register_converter("", "SpaceToDepth", since_opset=28)
def space_to_depth_v28(ctx, data, *, blocksize, mode="DCR"):
    """Opset 28 adds ``mode``: CRD orders the output channels as (C, b, b)."""
    return _space_to_depth(ctx, data, blocksize, mode)


def _space_to_depth(ctx, data: Value, b: int, mode: str):
    if mode not in ("DCR", "CRD"):
        raise unsupported(ctx, f"mode {mode!r} (expected 'DCR' or 'CRD')")
    n, c, h, w = _image_shape(ctx, data, b)
    h_out, w_out = _divide(ctx, h, b, "height"), _divide(ctx, w, b, "width")
    perm = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    x = emit(ctx, make_call("reshape", ctx.expr(data), shape_expr((n, c, h_out, b, w_out, b))), "s2d")
    x = emit(ctx, make_call("permute_dims", x, axes=perm), "s2d")
    return make_call("reshape", x, shape_expr((n, c * b * b, h_out, w_out)))


def _image_shape(ctx, data: Value, blocksize: int) -> tuple[Dim, ...]:
    if not isinstance(blocksize, int) or blocksize < 1:
        raise shape_error(ctx, f"blocksize must be a positive int, got {blocksize!r}")
    shape = of_rank(ctx, data, 4).shape if data.ndim < 0 else shaped(ctx, data).shape
    if len(shape) != 4:
        raise shape_error(ctx, f"needs a 4-D (N, C, H, W) input, got rank {len(shape)}")
    return shape


def _divide(ctx, dim: Dim, k: int, what: str) -> Dim:
    quotient = exact_div(dim, k, ctx.bb.analyzer)
    if quotient is not None:
        return quotient
    if isinstance(dim, int):
        raise shape_error(ctx, f"{what} {dim} is not divisible by {k}")
    return dim // k   # the reshape checks the element count at run time
