"""Helpers shared by the shape, tensor and control-flow converters.

The central idea: a small int tensor whose contents are known at import time
(a constant, or the symbolic dims of a ``Shape``) is computed on here, so
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` ends in an exact
``R.shape([batch, seq, 12, 64])`` instead of a shape known only at run time.
:func:`int_contents` reads such contents, :func:`contents_value` makes a
value of them.

>>> dims, shape = int_contents(ctx.sym_value((batch, seq)))    # doctest: +SKIP
>>> contents_value(ctx, dims[1:], (1,), "int64")               # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ....ir.dims import Dim, format_dim, free_vars, sym
from ....ir.gradual import representative_order
from ....ir.rank_origin import rank_origin
from ....ir.expr import Expr, ShapeExpr
from ....ir.struct_info import TensorStructInfo
from ....ops.definitions.index import HUGE
from ....ops.registry import make_call
from ....runtime.dtypes import numpy_dtype
from ..lift import dim_name_base
from ..value import Value

INT64_MAX = 2 ** 63 - 1
INT_KINDS = ("int", "uint")


# ---------------------------------------------------------------- errors


def unsupported(ctx, message: str) -> UnsupportedOpError:
    """An UnsupportedOpError naming the node and the opset."""
    return UnsupportedOpError(f"{ctx.node_label()} (opset {ctx.opset}): {message}")


def rank_unknown(ctx, value: Value, what: str = "the input") -> str:
    """"needs the rank of <what>, unknown here: <why>", naming the ONNX node or
    input that left the value without a rank (ir/rank_origin.py)."""
    why = rank_origin(value.expr, ctx.bb.lookup_binding) if value.expr is not None else "it has no rank"
    return f"needs the rank of {what}, unknown here: {why}"


def shape_error(ctx, message: str) -> ShapeError:
    """A ShapeError naming the node (the model itself is inconsistent)."""
    return ShapeError(f"{ctx.node_label()}: {message}")


def fmt_dims(dims: Sequence[Dim]) -> str:
    return "(" + ", ".join(format_dim(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


# ---------------------------------------------------------------- shapes and axes


def shaped(ctx, value: Value, what: str = "input") -> Value:
    """``value`` with a known shape. When only its rank is known, it is
    ``match_cast`` to fresh symbolic dims (checked and bound at run time),
    and ``value`` is updated in place, so shape arithmetic on it stays
    symbolic and later uses share the dims. An unknown rank is an
    UnsupportedOpError."""
    if value.shape is not None:
        return value
    if value.ndim < 0:
        raise unsupported(ctx, rank_unknown(ctx, value, what))
    node = ctx.node
    dims = fresh_dims(ctx, value.ndim, node.input[0] if node is not None and node.input else what)
    sinfo = TensorStructInfo(dims, value.dtype, vdevice=value.sinfo.vdevice)
    value.expr = ctx.bb.match_cast(ctx.expr(value), sinfo, "cast")
    value.sinfo = sinfo
    return value


def of_rank(ctx, value: Value, rank: int, what: str = "input") -> Value:
    """``value`` with a known shape when the op fixes its rank (Transpose's
    perm, Concat's other inputs): a value of unknown rank is ``match_cast``
    to ``rank`` fresh dims, which the run checks and binds (see :func:`shaped`)."""
    if value.ndim < 0:
        value.sinfo = TensorStructInfo(None, value.dtype, ndim=rank, vdevice=value.sinfo.vdevice)
    elif value.ndim != rank:
        raise shape_error(ctx, f"{what} has rank {value.ndim}, the op needs rank {rank}")
    return shaped(ctx, value, what)


def known_shape(ctx, value: Value, what: str = "input") -> tuple[Dim, ...]:
    """The shape of ``value`` (see :func:`shaped`)."""
    return shaped(ctx, value, what).shape


def fresh_dims(ctx, count: int, hint: str) -> tuple[Dim, ...]:
    """``count`` symbolic dims whose names no dim of the function uses yet."""
    taken = set(ctx.bb.defined_dim_vars())
    base = dim_name_base(hint, "d")
    out = []
    for _ in range(count):
        name = ctx.bb.fresh_name(f"{base}_d")
        while name in taken:
            name = ctx.bb.fresh_name(f"{base}_d")
        taken.add(name)
        out.append(sym(name))
    return tuple(out)


def norm_axis(ctx, axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` in ``[0, ndim)``; a ShapeError naming the node if out of range."""
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise shape_error(ctx, f"{what} {axis} is out of range for rank {ndim}")
    return int(axis) + ndim if axis < 0 else int(axis)


def norm_axes(ctx, axes: Sequence[int], ndim: int, what: str = "axes") -> tuple[int, ...]:
    out = tuple(norm_axis(ctx, a, ndim, what) for a in axes)
    if len(set(out)) != len(out):
        raise shape_error(ctx, f"{what} {tuple(axes)} repeat an axis")
    return out


def shape_expr(dims: Sequence[Dim]) -> ShapeExpr:
    return ShapeExpr(tuple(dims))


# ---------------------------------------------------------------- known contents


def int_contents(value: Value | None) -> tuple[tuple[Dim, ...], tuple[int, ...]] | None:
    """``(flat contents, shape)`` of an int tensor whose contents are known."""
    if value is None:
        return None
    dims = value.int_values()
    shape = value.shape
    if dims is None or shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return dims, tuple(shape)


def is_symbolic(value: Value | None) -> bool:
    """Whether ``value`` holds symbolic contents (a computed shape), the case
    the converters compute on at import time; constants fold through the
    runtime's kernels instead (one implementation of each op)."""
    return value is not None and value.sym is not None and value.shape is not None


def const_ints(value: Value | None) -> tuple[int, ...] | None:
    """The contents of an int operand when they are constant ints; None when
    the operand is omitted or its contents are only known at run time
    (data-dependent, or symbolic dims), where a converter takes its run-time
    path (a packed kernel, see ``_dynamic.packed_call``)."""
    dims = None if value is None else value.int_values()
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    return dims


def runtime_length(ctx, value: Value, what: str, rank: tuple[int, ...] = (1,),
                   unknown_ok: bool = False) -> int | None:
    """The number of elements of an int operand whose contents are known only
    at run time; it sets the output's rank (e.g. the length of Reshape's
    target), so it must be static, unless ``unknown_ok``: then None when it
    is not (the shape of a value of unknown rank), and the output's rank is
    unknown too. ``rank`` lists the ranks allowed."""
    if value.dtype is None or not value.dtype.startswith(INT_KINDS):
        raise shape_error(ctx, f"{what} must be an integer tensor, got {value.dtype}")
    if value.ndim not in rank:
        raise shape_error(ctx, f"{what} must have rank {' or '.join(map(str, rank))}, got {value.ndim}")
    shape = value.shape
    if shape is None or not all(isinstance(d, int) for d in shape):
        if unknown_ok:
            return None
        raise unsupported(ctx, f"the length of {what} is not static; it sets the output's rank")
    return math.prod(shape)


def static_ints(ctx, value: Value | None, what: str) -> tuple[int, ...] | None:
    """The contents of an optional input that must be constant ints."""
    if value is None:
        return None
    dims = value.int_values()
    if dims is None:
        raise unsupported(ctx, f"{what} must be known at import time (a constant or computed from "
                               f"shapes); a data-dependent {what} is not supported")
    if not all(isinstance(d, int) for d in dims):
        raise unsupported(ctx, f"{what} {fmt_dims(dims)} must be constant here, not symbolic")
    return dims


def known_ints(ctx, value: Value, what: str) -> tuple[Dim, ...]:
    """The contents (ints or symbolic dims) of an input that must be known."""
    dims = value.int_values()
    if dims is None:
        raise unsupported(ctx, f"{what} is data-dependent (not a constant and not computed from "
                               f"shapes); relaxpack needs it at import time")
    return dims


def contents_value(ctx, dims: Sequence[Dim], shape: Sequence[int], dtype: str) -> Value:
    """A value of ``dtype`` and static ``shape`` whose contents are ``dims``:
    a constant when they are all ints, else a symbolic value (materialized
    as a tensor only if a real op consumes it)."""
    dims, shape = tuple(dims), tuple(int(s) for s in shape)
    if all(isinstance(d, int) for d in dims):
        return ctx.const(np.array(dims, dtype=numpy_dtype(dtype)).reshape(shape))
    if dtype == "int64" and len(shape) <= 1:
        return ctx.sym_value(dims, scalar=not shape)
    expr = ctx.expr(ctx.sym_value(dims))
    if dtype != "int64":
        expr = ctx.emit(make_call("astype", expr, dtype=dtype), "shape").expr
    if shape != (len(dims),):
        expr = ctx.emit(make_call("reshape", expr, shape_expr(shape)), "shape").expr
    return Value(expr.struct_info, expr=expr, sym=dims if len(shape) <= 1 else None)


def dim_tensor(ctx, dim: Dim, dtype: str) -> Expr:
    """A 0-d tensor of ``dtype`` holding ``dim`` (e.g. to normalize indices)."""
    return ctx.expr(contents_value(ctx, (dim,), (), dtype))


def slice_index(ctx, index: Dim, dim: Dim) -> int | None:
    """An ONNX Slice start/end as a ``strided_slice`` bound (ints, with
    ``HUGE`` for "past the end"); a symbolic index only where its clamping
    is decided: ``>= dim`` (past the end) or ``dim - k`` with ``k`` constant
    and ``0 < k <= dim`` (the Python index ``-k``). None otherwise.

    ``dim - 1`` needs no range: for ``dim == 0`` ONNX and Python both clamp
    it to an empty slice. (For a larger ``k`` and ``dim < k`` ONNX adds
    ``dim`` a second time, and Python does not.)"""
    if isinstance(index, int):
        return max(-HUGE, min(HUGE, index))
    analyzer = ctx.bb.analyzer
    if analyzer.prove_ge(index, dim):
        return HUGE
    offset = index - dim
    if isinstance(offset, int) and offset < 0 and (offset == -1 or analyzer.prove_ge(index, 0)):
        return offset
    return None


def broadcast_dims(ctx, shape: Sequence[Dim], target: Sequence[Dim]) -> tuple[Dim, ...] | None:
    """ONNX (multidirectional) broadcasting of ``shape`` with ``target``.

    A pair of dims is decided when they are (provably) equal or one is 1;
    a static dim other than 1 against a symbolic one is that static dim (the
    symbolic one must then be 1 or equal in a valid model); two symbolic
    dims over a common input dim (``min(seq, 512)`` and ``seq``) are assumed
    equal, the better-placed one kept (the op then records the assumption,
    ir/gradual.py), unless one is at most 1 (``min(seq // 4, 1)``, a last
    cell): that one broadcasts rather than equals, so, as for two unrelated
    symbolic dims, None: only the run can tell which is 1. Static dims that
    differ, neither 1, are a ShapeError.
    """
    analyzer = ctx.bb.analyzer
    rank = max(len(shape), len(target))
    a_all = (1,) * (rank - len(shape)) + tuple(shape)
    b_all = (1,) * (rank - len(target)) + tuple(target)
    out = []
    for a, b in zip(a_all, b_all):
        if a == b or b == 1 or analyzer.prove_equal(a, b):
            out.append(a)
        elif a == 1:
            out.append(b)
        elif isinstance(a, int) and isinstance(b, int):
            raise shape_error(ctx, f"cannot broadcast {fmt_dims(shape)} with {fmt_dims(target)}: "
                                   f"dims {a} and {b} differ and neither is 1")
        elif isinstance(a, int) and a != 0:
            out.append(a)
        elif analyzer.prove_le(a, 1) or analyzer.prove_le(b, 1):
            return None     # 0 or 1 (a last cell, x[..., -1:]): a broadcast the run decides, never an equality
        elif not isinstance(a, int) and not isinstance(b, int) and free_vars(a) & free_vars(b):
            out.append(representative_order(a, b, ctx.bb.entry_dims())[0][0])
        else:
            return None
    return tuple(out)


def emit(ctx, call, name: str = "lv") -> Expr:
    """Emit ``call`` (folded when it is small and constant) and return its expression."""
    return ctx.expr(ctx.emit(call, name))
