"""Sequences and optionals: packed runtime calls over ``R.Sequence`` / ``R.Optional`` values.

A sequence is ``R.Sequence(R.Tensor(None, dtype, ndim))`` in the IR (element
shapes may differ, so only rank and dtype are kept) and a tuple of arrays at
run time; each op is a ``call_packed`` of a ``sequence.*`` kernel
(runtime/kernels/sequence.py) that returns a new tuple. An element taken
out (SequenceAt) is ``match_cast`` to fresh dims, so shapes stay symbolic
downstream::

    seq = R.call_packed("sequence.construct", x, y, sinfo_args=R.Sequence(R.Tensor("float32", ndim=2)))
    lv = R.call_packed("sequence.at", seq, pos, sinfo_args=R.Tensor("float32", ndim=2))
    z = R.match_cast(lv, R.Tensor((at_d1, at_d2), "float32"))

An optional is ``R.Optional(...)``: ``None`` or the value at run time.
SequenceMap runs its body over the elements with ``R.loop`` (as Scan does).
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import ExternFunc
from ....ir.struct_info import (
    OptionalStructInfo, SequenceStructInfo, StructInfo, TensorStructInfo, unify_struct_info,
)
from ....ops.registry import make_call
from ..registry import register_converter
from ..tensors import onnx_dtype_name
from ..value import Value
from ._body import forget_dims
from ._dynamic import packed_call
from ._shape_common import shape_error, unsupported


def _packed(ctx, kernel: str, args, sinfo: StructInfo, hint: str, **attrs):
    call = make_call("call_packed", ExternFunc(kernel), *(ctx.expr(a) if isinstance(a, Value) else a
                                                          for a in args),
                     sinfo_args=(sinfo,), kernel_attrs=tuple(sorted(attrs.items())) or None)
    return ctx.bb.emit(call, hint)


def _sequence(ctx, value: Value, what: str = "input") -> SequenceStructInfo:
    if value is None or not isinstance(value.sinfo, SequenceStructInfo):
        raise shape_error(ctx, f"{what} must be a sequence, got {None if value is None else value.sinfo}")
    return value.sinfo


def _tensor(ctx, value: Value, what: str = "input") -> TensorStructInfo:
    if value is None or not isinstance(value.sinfo, TensorStructInfo):
        raise shape_error(ctx, f"{what} must be a tensor, got {None if value is None else value.sinfo}")
    return value.sinfo


def _elem_after_insert(ctx, seq: Value, item: TensorStructInfo) -> StructInfo:
    elem = forget_dims(item)
    if seq.length == 0:
        return elem
    old = _sequence(ctx, seq).elem
    if isinstance(old, TensorStructInfo) and old.dtype not in (None, elem.dtype):
        raise shape_error(ctx, f"cannot insert a {elem.dtype} tensor into a sequence of {old.dtype}")
    return unify_struct_info(old, elem, ctx.bb.analyzer)


def _element(ctx, part, elem: StructInfo, hint: str) -> Value:
    """A tensor taken out of a sequence or optional, match_cast to fresh dims when its rank is known."""
    if isinstance(elem, TensorStructInfo) and elem.ndim >= 0 and elem.dtype is not None:
        from ._shape_common import fresh_dims
        cast = TensorStructInfo(fresh_dims(ctx, elem.ndim, hint), elem.dtype)
        return Value(cast, expr=ctx.bb.match_cast(part, cast, hint))
    return Value(part.struct_info, expr=part)


# ---------------------------------------------------------------- sequences
@register_converter("", "SequenceEmpty", since_opset=11)
def sequence_empty(ctx, *, dtype=1):
    elem = TensorStructInfo(None, onnx_dtype_name(dtype, ctx.node_label()), -1)
    sinfo = SequenceStructInfo(elem)
    return Value(sinfo, expr=_packed(ctx, "sequence.empty", (), sinfo, "seq"), length=0)


@register_converter("", "SequenceConstruct", since_opset=11)
def sequence_construct(ctx, *inputs):
    if not inputs:
        raise shape_error(ctx, "needs at least one input")
    sinfos = [forget_dims(_tensor(ctx, v)) for v in inputs]
    if len({s.dtype for s in sinfos}) != 1:
        raise shape_error(ctx, f"inputs have different dtypes {sorted({str(s.dtype) for s in sinfos})}")
    elem = sinfos[0]
    for s in sinfos[1:]:
        elem = unify_struct_info(elem, s, ctx.bb.analyzer)
    sinfo = SequenceStructInfo(elem)
    return Value(sinfo, expr=_packed(ctx, "sequence.construct", inputs, sinfo, "seq"), length=len(inputs))


@register_converter("", "SequenceInsert", since_opset=11)
def sequence_insert(ctx, seq, tensor, position=None):
    _sequence(ctx, seq)
    sinfo = SequenceStructInfo(_elem_after_insert(ctx, seq, _tensor(ctx, tensor, "tensor")))
    args = (seq, tensor) if position is None else (seq, tensor, position)
    length = seq.length + 1 if seq.length is not None else None
    return Value(sinfo, expr=_packed(ctx, "sequence.insert", args, sinfo, "seq"), length=length)


@register_converter("", "SequenceErase", since_opset=11)
def sequence_erase(ctx, seq, position=None):
    sinfo = _sequence(ctx, seq)
    args = (seq,) if position is None else (seq, position)
    length = seq.length - 1 if seq.length else None
    return Value(sinfo, expr=_packed(ctx, "sequence.erase", args, sinfo, "seq"), length=length)


@register_converter("", "SequenceAt", since_opset=11)
def sequence_at(ctx, seq, position):
    elem = _sequence(ctx, seq).elem
    return _element(ctx, _packed(ctx, "sequence.at", (seq, position), elem, "at"), elem, "at")


@register_converter("", "SequenceLength", since_opset=11)
def sequence_length(ctx, seq):
    _sequence(ctx, seq)
    if seq.length is not None:
        return ctx.const(np.array(seq.length, np.int64))
    return packed_call(ctx, "sequence.length", [seq], [((), "int64")], "length")


@register_converter("", "SplitToSequence", since_opset=11)
def split_to_sequence(ctx, x, split=None, *, axis=0, keepdims=1):
    sinfo = _tensor(ctx, x)
    ndim = sinfo.ndim
    if ndim >= 0 and not -ndim <= axis < ndim:
        raise shape_error(ctx, f"axis {axis} is out of range for rank {ndim}")
    if split is None and not keepdims and ndim >= 0:
        ndim -= 1
    seq = SequenceStructInfo(TensorStructInfo(None, sinfo.dtype, ndim))
    args = (x,) if split is None else (x, split)
    length = int(split.const.size) if split is not None and split.const is not None and split.const.ndim == 1 \
        else None
    return Value(seq, expr=_packed(ctx, "sequence.split", args, seq, "seq", axis=axis, keepdims=keepdims),
                 length=length)


@register_converter("", "ConcatFromSequence", since_opset=11)
def concat_from_sequence(ctx, seq, *, axis, new_axis=0):
    elem = _sequence(ctx, seq).elem
    if not isinstance(elem, TensorStructInfo) or elem.ndim < 0 or elem.dtype is None:
        raise unsupported(ctx, f"a sequence of {elem}: the elements' rank and dtype must be known")
    ndim = elem.ndim + (1 if new_axis else 0)
    if not -ndim <= axis < ndim:
        raise shape_error(ctx, f"axis {axis} is out of range for rank {ndim}")
    return packed_call(ctx, "sequence.concat", [seq], [((None,) * ndim, elem.dtype)], "concat",
                       axis=axis, new_axis=new_axis)


# ---------------------------------------------------------------- optionals
@register_converter("", "Optional", since_opset=15)
def optional(ctx, value=None, *, type=None):
    if value is not None:
        sinfo = OptionalStructInfo(forget_dims(value.sinfo))
        return Value(sinfo, expr=_packed(ctx, "optional.wrap", (value,), sinfo, "opt"))
    if type is None:
        raise shape_error(ctx, "an Optional without an input needs the type attribute")
    sinfo = OptionalStructInfo(_type_sinfo(ctx, type))
    return Value(sinfo, expr=_packed(ctx, "optional.none", (), sinfo, "opt"))


def _type_sinfo(ctx, type_proto) -> StructInfo:
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        t = type_proto.tensor_type
        ndim = len(t.shape.dim) if t.HasField("shape") else -1
        return TensorStructInfo(None, onnx_dtype_name(t.elem_type, ctx.node_label()), ndim)
    if which == "sequence_type":
        return SequenceStructInfo(_type_sinfo(ctx, type_proto.sequence_type.elem_type))
    raise unsupported(ctx, f"an optional of {which}")


@register_converter("", "OptionalHasElement", since_opset=15)
def optional_has_element(ctx, value=None):
    if value is None:  # an omitted input is an empty optional (opset 18)
        return ctx.const(np.array(False))
    if not isinstance(value.sinfo, OptionalStructInfo):
        return ctx.const(np.array(True))
    return packed_call(ctx, "optional.has_element", [value], [((), "bool")], "has_element")


@register_converter("", "OptionalGetElement", since_opset=15)
def optional_get_element(ctx, value):
    if not isinstance(value.sinfo, OptionalStructInfo):
        return value  # a tensor or sequence is returned as it is (opset 18)
    elem = value.sinfo.elem
    return _element(ctx, _packed(ctx, "optional.get", (value,), elem, "elem"), elem, "elem")
