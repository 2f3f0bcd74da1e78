"""Shapes and values as data: Shape, Size, ConstantOfShape, Constant,
Identity, Cast, CastLike. (Range is in algorithm.py, with the IR op range.)
ConstantOfShape of a shape computed from tensor values fills at run time
(the packed kernel ``dyn.full``).

``Shape`` does not emit an op: its result is a value whose contents are the
input's (possibly symbolic) dims, and the converters downstream compute on
those contents at import time::

    Shape(x: (batch, seq, 768))  ->  sym (batch, seq, 768)
    Gather(.., 0) -> Unsqueeze   ->  sym (batch,)
    Concat(.., [seq], [12, 64])  ->  sym (batch, seq, 12, 64)
    Reshape(x, ..)               ->  R.reshape(x, R.shape([batch, seq, 12, 64]))
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from ....ir.struct_info import TensorStructInfo
from ....ops.registry import make_call
from ..context import FOLD_LIMIT
from ..registry import register_converter
from ..tensors import onnx_dtype_name, string_array
from ..lift import lift_dims
from ..value import Value
from ._shape_common import (
    INT_KINDS, contents_value, emit, fmt_dims, int_contents, is_symbolic, known_shape, runtime_length,
    shape_error, shape_expr, unsupported,
)
from ._dynamic import packed_call

# ---------------------------------------------------------------- Shape, Size


@register_converter("", "Shape", since_opset=1)
def shape_v1(ctx, data):
    if data.ndim < 0:
        return _runtime_shape(ctx, data)
    return ctx.sym_value(known_shape(ctx, data))


@register_converter("", "Shape", since_opset=15)
def shape_v15(ctx, data, *, start=0, end=None):
    if data.ndim < 0:
        return _runtime_shape(ctx, data, start, end)
    dims = known_shape(ctx, data)
    rank = len(dims)

    def clamp(i):
        return min(max(i + rank if i < 0 else i, 0), rank)
    return ctx.sym_value(dims[clamp(start):rank if end is None else clamp(end)])


def _runtime_shape(ctx, data, start: int = 0, end: int | None = None):
    """The Shape of a value whose rank is unknown here (a loop-carried or
    If-merged value of changing rank): taken at run time, a 1-D int64
    tensor; what uses it takes its run-time paths. Its length is a fresh
    dim, except for one dim picked by ``start = k >= 0, end = k + 1``
    (``x.size(k)``, as the exporters write it, then a Squeeze): that has
    length 1 (checked at run time: a value of rank ``k`` or less gives 0
    there), so that ``Squeeze(Shape(x, 0, 1))`` is a scalar as the model means."""
    attrs = {"start": start} if end is None else {"start": start, "end": end}
    length = 1 if end is not None and 0 <= start and end == start + 1 else None
    return packed_call(ctx, "dyn.shape", [data], [((length,), "int64")], "shape", **attrs)


@register_converter("", "Size", since_opset=1)
def size(ctx, data):
    if data.ndim < 0:
        return packed_call(ctx, "dyn.size", [data], [((), "int64")], "size")
    dims = known_shape(ctx, data)
    return ctx.sym_value((math.prod(dims, start=1),), scalar=True)


# ---------------------------------------------------------------- ConstantOfShape


@register_converter("", "ConstantOfShape", since_opset=9)
def constant_of_shape(ctx, shape, *, value=None):
    fill = np.zeros((), np.float32) if value is None else np.asarray(value)
    if fill.size != 1:
        raise shape_error(ctx, f"attribute value must hold one element, got shape {fill.shape}")
    fill = fill.reshape(())
    if fill.dtype.kind in "OSU":
        raise unsupported(ctx, "string tensors are not supported")
    if shape.ndim != 1:
        raise shape_error(ctx, f"the shape input must be 1-D, got rank {shape.ndim}")
    dims = shape.int_values() or lift_dims(ctx, shape, "shape")
    if dims is None:    # known at run time only: the output's rank is the shape's length
        rank = runtime_length(ctx, shape, "the shape input", unknown_ok=True)
        fill = ctx.const(fill)
        out = None if rank is None else (None,) * rank
        return packed_call(ctx, "dyn.full", [shape, fill], [(out, fill.dtype)], "constant_of_shape")
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise shape_error(ctx, f"negative dim in shape {fmt_dims(dims)}")
    if all(isinstance(d, int) for d in dims) and math.prod(dims) <= FOLD_LIMIT:
        return ctx.const(np.full(dims, fill, dtype=fill.dtype))
    return make_call("broadcast_to", ctx.expr(ctx.const(fill)), shape_expr(dims))


# ---------------------------------------------------------------- Constant, Identity


@register_converter("", "Constant", since_opset=1)
def constant_v1(ctx, *, value):
    return _constant(ctx, value)


@register_converter("", "Constant", since_opset=12)
def constant_v12(ctx, *, value=None, value_float=None, value_floats=None, value_int=None,
                 value_ints=None, value_string=None, value_strings=None, sparse_value=None):
    given = {k: v for k, v in (("value", value), ("value_float", value_float),
                               ("value_floats", value_floats), ("value_int", value_int),
                               ("value_ints", value_ints), ("value_string", value_string),
                               ("value_strings", value_strings), ("sparse_value", sparse_value))
             if v is not None}
    if len(given) != 1:
        raise shape_error(ctx, f"needs exactly one value attribute, got {sorted(given) or 'none'}")
    (name, v), = given.items()
    if name == "sparse_value":
        raise unsupported(ctx, "sparse_value (a sparse tensor constant) is not supported")
    if name in ("value_string", "value_strings"):
        return ctx.const(string_array(v, ctx.node_label()))
    if name in ("value_float", "value_floats"):
        return ctx.const(np.array(v, dtype=np.float32))
    if name in ("value_int", "value_ints"):
        return ctx.const(np.array(v, dtype=np.int64))
    return _constant(ctx, v)


def _constant(ctx, array) -> Value:
    array = np.asarray(array)
    if array.dtype.kind in "OSU":
        array = string_array(array, ctx.node_label())
    return ctx.const(array)


@register_converter("", "Identity", since_opset=1)
def identity(ctx, x):
    return x


# ---------------------------------------------------------------- Cast, CastLike


def _target_dtype(ctx, to) -> str:
    if isinstance(to, str):  # opset 1 spells the type as a string
        try:
            to = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise unsupported(ctx, f"unknown Cast target type {to!r}") from None
    return onnx_dtype_name(int(to), f"{ctx.node_label()}'s target")


#: the largest finite value of each 8-bit float (ONNX's saturation bounds)
_FLOAT8_MAX = {"float8_e4m3fn": 448.0, "float8_e4m3fnuz": 240.0, "float8_e5m2": 57344.0,
               "float8_e5m2fnuz": 57344.0}


def _cast(ctx, x: Value, dtype: str, saturate: int = 1, round_mode: str = "up"):
    """``astype``; to and from strings too (numbers formatted and parsed as
    ONNX says, see ``runtime/kernels/string_cast.py``); to float8_e8m0fnu
    with ONNX's ``round_mode``."""
    if x.dtype == dtype:
        return x
    if dtype == "float8_e8m0fnu":
        if round_mode not in ("up", "down", "nearest"):
            raise unsupported(ctx, f"round_mode must be up, down or nearest, got {round_mode!r}")
        data = ctx.expr(x)
        if x.dtype != "float32":
            data = emit(ctx, make_call("astype", data, dtype="float32"), "cast")
        return make_call("to_float8e8m0", data, round_mode=round_mode, saturate=bool(saturate))
    if is_symbolic(x) and dtype.startswith(INT_KINDS):
        dims, shape = int_contents(x)
        return contents_value(ctx, dims, shape, dtype)
    if is_symbolic(x) and dtype in ("float32", "float64"):
        # a shape cast to float (YOLO's anchor grids: Range(0, Cast(w), 1)): Range reads the
        # dims; the tensor is made (ctx.expr) only if another op reads it
        return Value(TensorStructInfo(x.shape, dtype), float_of=x.sym)
    data = ctx.expr(x)
    if dtype in _FLOAT8_MAX and saturate:
        data = _saturate(ctx, x, data, dtype)
    return make_call("astype", data, dtype=dtype)


def _saturate(ctx, x: Value, data, dtype: str):
    """ONNX's saturating cast to an 8-bit float: values beyond the largest
    finite one, infinities too, become it (ONNX's reference does so for all
    four types); ``astype`` itself does not saturate, it rounds to nearest even."""
    if not (x.dtype or "").startswith(("float", "bfloat")):
        data = emit(ctx, make_call("astype", data, dtype="float32"), "cast")
    bound = _FLOAT8_MAX[dtype]
    return emit(ctx, make_call("clip", data, min=-bound, max=bound), "cast")


@register_converter("", "Cast", since_opset=1)
def cast_v1(ctx, x, *, to):
    return _cast(ctx, x, _target_dtype(ctx, to))


@register_converter("", "Cast", since_opset=6)
def cast_v6(ctx, x, *, to):
    return _cast(ctx, x, _target_dtype(ctx, to))


@register_converter("", "Cast", since_opset=19)
def cast_v19(ctx, x, *, to, saturate=1):
    return _cast(ctx, x, _target_dtype(ctx, to), saturate)


@register_converter("", "Cast", since_opset=24)
def cast_v24(ctx, x, *, to, saturate=1, round_mode="up"):
    return _cast(ctx, x, _target_dtype(ctx, to), saturate, round_mode)


@register_converter("", "CastLike", since_opset=15)
def cast_like_v15(ctx, x, target):
    return _cast(ctx, x, _like_dtype(ctx, target))


@register_converter("", "CastLike", since_opset=19)
def cast_like_v19(ctx, x, target, *, saturate=1):
    return _cast(ctx, x, _like_dtype(ctx, target), saturate)


def _like_dtype(ctx, target: Value) -> str:
    if target.dtype is None:
        raise unsupported(ctx, "the dtype of target_type is unknown")
    return target.dtype


@register_converter("", "CastLike", since_opset=25)
def cast_like_v25(ctx, x, target, *, saturate=1, round_mode="up"):
    return _cast(ctx, x, _like_dtype(ctx, target), saturate, round_mode)
