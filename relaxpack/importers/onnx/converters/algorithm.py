"""Algorithms: Einsum, TopK, CumSum, NonZero, OneHot, Trilu, Range, Tile.

Operands that fix the output's shape (TopK's K, OneHot's depth, Tile's
repeats, Range's bounds) are used at import time when known, so
``Range(0, seq, 1)`` on a ``Shape`` gives a tensor of shape ``(seq,)``;
when they are computed from data, the op calls a packed kernel
(``dyn.topk``, ...) whose result is ``match_cast`` to fresh dims for the
dims they decide. CumSum's axis and Trilu's k may also be known only at run
time (a second operand of the op). NonZero's output size always depends on
the data: it calls the packed kernel and ``match_cast``\\ s the result to
``(ndim, nnz)`` with a fresh dim ``nnz``::

    Range(0, Gather(Shape(x), 1), 1)  ->  R.range(R.prim_value(0), R.prim_value(seq), R.prim_value(1))
    NonZero(x: (n, 4))                ->  lv = R.call_packed("nonzero", x)
                                          nz = R.match_cast(lv, R.Tensor((2, nonzero_d1), "int64"))
"""

from __future__ import annotations

import numpy as np

from ....ir.dims import dim_max, dim_min
from ....ir.expr import ExternFunc, PrimValue, ShapeExpr, Tuple, TupleGetItem
from ....ir.struct_info import TensorStructInfo
from ....ops.registry import make_call
from ....runtime.kernels import KERNELS
from ..registry import register_converter
from ..value import Value
from ._dynamic import packed_call
from ._shape_common import (
    INT_KINDS, const_ints, fmt_dims, fresh_dims, norm_axis, of_rank, rank_unknown, runtime_length, shape_error,
    shaped, static_ints, unsupported,
)

# ---------------------------------------------------------------- Einsum


@register_converter("", "Einsum", since_opset=12)
def einsum(ctx, *operands, equation):
    if not operands or any(x is None for x in operands):
        raise shape_error(ctx, "needs at least one operand and no omitted ones")
    return make_call("einsum", Tuple([ctx.expr(x) for x in operands]), equation="".join(equation.split()))


# ---------------------------------------------------------------- TopK


@register_converter("", "TopK", since_opset=1)
def topk_v1(ctx, x, *, k, axis=-1):
    return _topk(ctx, x, k, axis)


@register_converter("", "TopK", since_opset=10)
def topk_v10(ctx, x, k, *, axis=-1):
    if _sets_a_dim_at_run_time(ctx, k, "K"):
        return _runtime_topk(ctx, x, k, axis)
    return _topk(ctx, x, _one_int(ctx, k, "K"), axis)


@register_converter("", "TopK", since_opset=11)
def topk_v11(ctx, x, k, *, axis=-1, largest=1, sorted=1):  # noqa: A002 (ONNX's attribute name)
    if _sets_a_dim_at_run_time(ctx, k, "K"):
        return _runtime_topk(ctx, x, k, axis, bool(largest), bool(sorted))
    return _topk(ctx, x, _one_int(ctx, k, "K"), axis, bool(largest), bool(sorted))


def _topk(ctx, x: Value, k: int, axis: int, largest: bool = True, sorted_: bool = True):
    _required(ctx, X=x)
    if k < 0:
        raise shape_error(ctx, f"K must be non-negative, got {k}")
    out = ctx.emit(make_call("topk", ctx.expr(x), k=int(k), axis=int(axis), largest=largest,
                             sorted=sorted_), "topk")
    return TupleGetItem(out.expr, 0), TupleGetItem(out.expr, 1)


def _runtime_topk(ctx, x: Value, k: Value, axis: int, largest: bool = True, sorted_: bool = True):
    """K known at run time: the outputs keep every dim but the axis's."""
    _required(ctx, X=x)
    if not (k.dtype or "").startswith(INT_KINDS):
        raise shape_error(ctx, f"K must be an integer tensor, got {k.dtype}")
    x = shaped(ctx, x)
    ax = norm_axis(ctx, axis, x.ndim)
    shape = tuple(None if i == ax else d for i, d in enumerate(x.shape))
    return tuple(packed_call(ctx, "dyn.topk", [x, k], [(shape, x.dtype), (shape, "int64")], "topk",
                             axis=ax, largest=largest, sorted=sorted_))


def _sets_a_dim_at_run_time(ctx, value: Value | None, what: str) -> bool:
    """Whether a one-value operand that sets an output dim (TopK's K,
    OneHot's depth) is known only at run time, so the converter calls a
    packed kernel; it must then hold one value, which its static shape must
    allow."""
    _required(ctx, **{what: value})
    if not _at_run_time(value):
        return False
    if value.shape is not None and any(isinstance(d, int) and d != 1 for d in value.shape):
        raise shape_error(ctx, f"{what} must hold one value, got shape {fmt_dims(value.shape)}")
    return True


def _required(ctx, **inputs: Value | None) -> None:
    """A ShapeError naming the first required input the node omits."""
    for name, value in inputs.items():
        if value is None:
            raise shape_error(ctx, f"needs the input {name}")


def _one_int(ctx, value: Value | None, what: str) -> int:
    """The single int of an input that must be a constant (a scalar or a
    one-element tensor); an UnsupportedOpError if it is not known."""
    _required(ctx, **{what: value})
    if value.const is None and value.sym is None:
        raise unsupported(ctx, f"{what} must be a constant; a data-dependent {what} is not supported")
    if value.const is not None and value.const.dtype.kind not in "iu":
        raise shape_error(ctx, f"{what} must be an integer tensor, got {value.const.dtype}")
    ints = static_ints(ctx, value, what)
    if len(ints) != 1:
        raise shape_error(ctx, f"{what} must hold one value, got {fmt_dims(ints)}")
    return int(ints[0])


# ---------------------------------------------------------------- CumSum


def _at_run_time(value: Value | None) -> bool:
    """An input whose contents are known only at run time (data, or a
    symbolic value computed from shapes): CumSum's axis and Trilu's k then
    become the op's second argument, since the output shape does not depend
    on them."""
    if value is None or value.const is not None:
        return False
    return value.sym is None or not all(isinstance(v, int) for v in value.sym)


@register_converter("", "CumSum", since_opset=11)
def cumsum(ctx, x, axis, *, exclusive=0, reverse=0):
    _required(ctx, x=x, axis=axis)
    if _at_run_time(axis):
        return make_call("cumsum", ctx.expr(x), ctx.expr(axis), axis=None, exclusive=bool(exclusive),
                         reverse=bool(reverse))
    ax = _one_int(ctx, axis, "axis")
    if x.ndim >= 0:
        ax = norm_axis(ctx, ax, x.ndim)
    return make_call("cumsum", ctx.expr(x), axis=ax, exclusive=bool(exclusive), reverse=bool(reverse))


# ---------------------------------------------------------------- NonZero


@register_converter("", "NonZero", since_opset=9)
def nonzero(ctx, x):
    _required(ctx, X=x)
    if x.const is not None:     # fold with the kernel the VM would run
        return ctx.const(KERNELS["nonzero"].fn(x.const))
    call = make_call("call_packed", ExternFunc("nonzero"), ctx.expr(x),
                     sinfo_args=(TensorStructInfo(None, "int64", ndim=2),))
    found = ctx.bb.emit(call, "nonzero")
    # (rank, count): the rank is a fresh dim too when the import does not know it
    rank, nnz = (x.ndim, *fresh_dims(ctx, 1, "nonzero")) if x.ndim >= 0 else fresh_dims(ctx, 2, "nonzero")
    sinfo = TensorStructInfo((rank, nnz), "int64", vdevice=found.struct_info.vdevice)
    return Value(sinfo, expr=ctx.bb.match_cast(found, sinfo, "nonzero"))


# ---------------------------------------------------------------- OneHot


@register_converter("", "OneHot", since_opset=9)
def one_hot(ctx, indices, depth, values, *, axis=-1):
    _required(ctx, indices=indices, depth=depth, values=values)
    if _sets_a_dim_at_run_time(ctx, depth, "depth"):
        indices = shaped(ctx, indices)
        ax = norm_axis(ctx, axis, indices.ndim + 1)
        shape = indices.shape[:ax] + (None,) + indices.shape[ax:]
        return packed_call(ctx, "dyn.one_hot", [indices, depth, values], [(shape, values.dtype)], "one_hot",
                           axis=ax)
    if depth.const is not None and depth.const.dtype.kind == "f":
        if depth.const.size != 1 or not np.isfinite(depth.const).all():
            raise shape_error(ctx, f"depth must hold one finite value, got {depth.const!r}")
        n = int(depth.const.reshape(()))      # ONNX casts a float depth to int64
    else:
        n = _one_int(ctx, depth, "depth")
    if n < 0:
        raise shape_error(ctx, f"depth must be non-negative, got {n}")
    return make_call("one_hot", ctx.expr(indices), ctx.expr(values), depth=n, axis=int(axis))


# ---------------------------------------------------------------- Trilu


@register_converter("", "Trilu", since_opset=14)
def trilu(ctx, x, k=None, *, upper=1):
    _required(ctx, input=x)
    if _at_run_time(k):
        return make_call("trilu", ctx.expr(x), ctx.expr(k), upper=bool(upper), k=None)
    diagonal = 0 if k is None else _one_int(ctx, k, "k")
    return make_call("trilu", ctx.expr(x), upper=bool(upper), k=diagonal)


# ---------------------------------------------------------------- Range


@register_converter("", "Range", since_opset=11)
def range_v11(ctx, start, limit, delta):
    return _range(ctx, start, limit, delta)


@register_converter("", "Range", since_opset=27)
def range_v27(ctx, start, limit, delta, *, stash_type=1):
    # float16/bfloat16 ranges compute in float64 and round once: at least as
    # precise as either stash type (float32 or float64)
    if stash_type not in (1, 11):
        raise unsupported(ctx, f"stash_type {stash_type} (only 1 = float and 11 = double exist)")
    return _range(ctx, start, limit, delta)


def _range(ctx, start: Value, limit: Value, delta: Value):
    _required(ctx, start=start, limit=limit, delta=delta)
    names = ("start", "limit", "delta")
    values = (start, limit, delta)
    for name, v in zip(names, values):
        if v.shape is not None and any(not isinstance(d, int) or d != 1 for d in v.shape):
            raise shape_error(ctx, f"{name} must be a scalar, got shape {fmt_dims(v.shape)}")
    dtypes = {v.dtype for v in values}
    if len(dtypes) != 1 or None in dtypes:
        raise shape_error(ctx, f"start, limit and delta must have one dtype, got "
                               f"{', '.join(str(v.dtype) for v in values)}")
    dtype = start.dtype
    if dtype.startswith(INT_KINDS):
        bounds = [v.int_values() for v in values]
        # a symbolic delta would make the length a division by a variable
        if any(b is None for b in bounds) or not isinstance(bounds[2][0], int):
            return packed_call(ctx, "dyn.range", values, [((None,), dtype)], "range")
        (first,), (stop,), (step,) = bounds
        args = [PrimValue(first), PrimValue(stop), PrimValue(step)]
    else:
        if any(v.const is None for v in values):
            of_dim = _range_of_cast_dim(ctx, start, limit, delta, dtype)
            if of_dim is not None:
                return of_dim
            return packed_call(ctx, "dyn.range", values, [((None,), dtype)], "range")
        args = [PrimValue(float(np.asarray(v.const, np.float64).reshape(())), "float64") for v in values]
    if args[2].value == 0:
        raise shape_error(ctx, "delta must not be 0")
    return make_call("range", *args, dtype=dtype)


#: float dtypes whose Range over a shape cast to them is an int range: integers of at most this
#: magnitude are exact there, and so are the float64 length ``ceil((limit - start) / delta)`` of
#: their differences (a quotient of integers below 2**53 is never rounded onto an integer)
EXACT_INTS = {"float32": 1 << 24, "float64": 1 << 51}


def _range_of_cast_dim(ctx, start: Value, limit: Value, delta: Value, dtype: str) -> Value | None:
    """``Range(start, Cast<float>(n), delta)`` with integral constant ``start`` and ``delta``
    and a shape ``n`` (YOLO's anchor grids: ``arange(0.0, float(w), 1.0)``) as the int range
    ``range(start, n, delta)`` in ``dtype``, of static length over ``n``; None when it is not
    one. Every value and the limit are integers of at most :data:`EXACT_INTS` in magnitude, so
    the int range rounded once is the float one (ONNX's ``start + i * delta``, onnxruntime's
    running sum) and its length is the float formula's. That bound is checked once per input
    shape: the range runs to ``n`` clamped to it, ``match_cast`` to the length at ``n``."""
    bound = EXACT_INTS.get(dtype)
    if bound is None or limit.float_of is None or len(limit.float_of) != 1 or start.const is None \
            or delta.const is None:
        return None
    first, step = (float(np.asarray(v.const, np.float64).reshape(())) for v in (start, delta))
    if not (first.is_integer() and step.is_integer() and step != 0 and abs(first) <= bound and abs(step) <= bound):
        return None
    first, step, n = int(first), int(step), limit.float_of[0]
    clamped = dim_min(dim_max(n, -bound), bound)
    ranged = ctx.emit(make_call("range", PrimValue(first), PrimValue(clamped), PrimValue(step), dtype=dtype), "range")
    exact = ctx.bb.normalize(make_call("range", PrimValue(first), PrimValue(n), PrimValue(step), dtype=dtype))
    return Value(exact.struct_info, expr=ctx.bb.match_cast(ctx.expr(ranged), exact.struct_info, "range"))


# ---------------------------------------------------------------- Tile


@register_converter("", "Tile", since_opset=1)
def tile_v1(ctx, x, tiles, axis):
    _required(ctx, input=x)
    count = _one_int(ctx, tiles, "tiles")
    ax = _one_int(ctx, axis, "axis")
    if x.ndim < 0:
        raise unsupported(ctx, rank_unknown(ctx, x))
    repeats = [1] * x.ndim
    repeats[norm_axis(ctx, ax, x.ndim)] = count
    return _tile(ctx, x, repeats)


@register_converter("", "Tile", since_opset=6)
def tile_v6(ctx, x, repeats):
    _required(ctx, input=x, repeats=repeats)
    ints = const_ints(repeats)
    if x.ndim < 0 and runtime_length(ctx, repeats, "repeats", unknown_ok=True) is not None:
        x = of_rank(ctx, x, runtime_length(ctx, repeats, "repeats"))   # one repeat per axis (the run checks it)
    if ints is None:    # known at run time only
        x = shaped(ctx, x)
        if runtime_length(ctx, repeats, "repeats") != x.ndim:
            raise shape_error(ctx, f"{repeats.shape} repeats for a tensor of rank {x.ndim}")
        # repeats computed from shapes (the batch size) give exact dims, which the run checks
        known = repeats.int_values()
        shape = (None,) * x.ndim if known is None else tuple(d * r for d, r in zip(x.shape, known))
        if known is not None and all(_is_one(r) or _is_one(d) for d, r in zip(x.shape, known)):
            # repeating only unit axes (a batch of positions: Tile(x[None], (batch, 1))) is a broadcast
            return make_call("broadcast_to", ctx.expr(x), ShapeExpr(shape))
        if known is not None:
            return _tile_as_broadcast(ctx, x, known, shape)
        return packed_call(ctx, "dyn.tile", [x, repeats], [(shape, x.dtype)], "tile")
    return _tile(ctx, x, ints)


def _is_one(d) -> bool:
    return isinstance(d, int) and d == 1


def _tile_as_broadcast(ctx, x: Value, repeats, shape):
    """Tile by repeats known as dims (``x.repeat(batch, 1, 1)``: DeBERTa's relative position
    tables) as static ops: an axis of size ``d`` repeated ``r`` times is ``x`` with a unit axis
    before it, broadcast to ``(r, d)`` and merged back into ``r * d`` (numpy's tile writes
    ``x[j % d]`` at ``j``, which is that row-major order). A broadcast of a constant by shape
    dims is then a shape-only value the shape memo computes once per input shape, where the
    packed ``dyn.tile`` ran every call and its ``match_cast`` ended the memo."""
    split, wide = [], []
    for d, r in zip(x.shape, repeats):
        if _is_one(r) or _is_one(d):
            split.append(d)
            wide.append(d * r)
        else:
            split += [1, d]
            wide += [r, d]
    expr = ctx.expr(ctx.emit(make_call("reshape", ctx.expr(x), ShapeExpr(tuple(split))), "tile"))
    expr = ctx.expr(ctx.emit(make_call("broadcast_to", expr, ShapeExpr(tuple(wide))), "tile"))
    return make_call("reshape", expr, ShapeExpr(tuple(shape)))


def _tile(ctx, x: Value, repeats):
    _required(ctx, input=x)
    repeats = tuple(int(r) for r in repeats)
    if x.ndim >= 0 and len(repeats) != x.ndim:
        raise shape_error(ctx, f"{len(repeats)} repeats {repeats} for a tensor of rank {x.ndim}")
    if any(r < 0 for r in repeats):
        raise shape_error(ctx, f"repeats {repeats} must not be negative")
    if all(r == 1 for r in repeats):
        return x
    return make_call("tile", ctx.expr(x), repeats=repeats)
