"""Sequence and optional ops: ``R.Sequence`` / ``R.Optional`` values.

Like ``nonzero``, these have results the compiler cannot allocate (a tuple of
arrays, an optional, a tensor of data-dependent shape): the importer calls
their packed kernels (runtime/kernels/sequence.py) with ``call_packed`` and
the struct info inferred here, and ``match_cast``s a tensor taken out of a
sequence to fresh dims. Element struct infos keep only rank and dtype (the
elements of one sequence may differ in shape).

>>> make_call("sequence.at", seq, pos)     # R.Tensor("float32", ndim=2) for a sequence of 2-d float32
"""

from __future__ import annotations

from functools import partial

from ...errors import ShapeError
from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import (
    ObjectStructInfo, OptionalStructInfo, SequenceStructInfo, StructInfo, TensorStructInfo, unify_struct_info,
)
from ..registry import register_op
from .common import op_label


def _seq(call: Call, i: int) -> SequenceStructInfo:
    sinfo = call.args[i].struct_info
    if not isinstance(sinfo, SequenceStructInfo):
        raise ShapeError(f"{op_label(call)}: argument {i} must be a sequence, got {sinfo}")
    return sinfo


def _elem(sinfo) -> StructInfo:
    if isinstance(sinfo, TensorStructInfo):
        return TensorStructInfo(None, sinfo.dtype, sinfo.ndim, sinfo.vdevice)
    return sinfo


def _infer_construct(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    elems = [_elem(a.struct_info) for a in call.args]
    if not elems:
        return SequenceStructInfo(ObjectStructInfo())
    out = elems[0]
    for e in elems[1:]:
        out = unify_struct_info(out, e, analyzer)
    return SequenceStructInfo(out)


def _infer_insert(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    seq = _seq(call, 0)
    return SequenceStructInfo(unify_struct_info(seq.elem, _elem(call.args[1].struct_info), analyzer))


def _infer_split(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    x = call.args[0].struct_info
    if not isinstance(x, TensorStructInfo):
        raise ShapeError(f"{op_label(call)}: the input must be a tensor, got {x}")
    drop = len(call.args) == 1 and not call.attrs["keepdims"] and x.ndim >= 0
    return SequenceStructInfo(TensorStructInfo(None, x.dtype, x.ndim - 1 if drop else x.ndim))


def _infer_concat(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    elem = _seq(call, 0).elem
    if not isinstance(elem, TensorStructInfo):
        raise ShapeError(f"{op_label(call)}: a sequence of {elem} cannot be concatenated")
    ndim = elem.ndim + (1 if call.attrs["new_axis"] else 0) if elem.ndim >= 0 else -1
    return TensorStructInfo(None, elem.dtype, ndim)


def _infer_optional_get(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    sinfo = call.args[0].struct_info
    if not isinstance(sinfo, OptionalStructInfo):
        raise ShapeError(f"{op_label(call)}: the argument must be an optional, got {sinfo}")
    return sinfo.elem


#: a container op: its kernel returns a new sequence or optional (packed, as data-dependent ops)
_container_op = partial(register_op, data_dependent=True)

_container_op("sequence.construct", infer=_infer_construct, num_args=(0, None), pure=False,
            doc="A sequence of the arguments (SequenceConstruct).")
_container_op("sequence.empty", infer=lambda call, a: SequenceStructInfo(ObjectStructInfo()), num_args=0,
            pure=False, doc="An empty sequence (SequenceEmpty; the importer gives the element dtype).")
_container_op("sequence.at", infer=lambda call, a: _seq(call, 0).elem, num_args=2, pure=False,
            doc="The element at a position, negative from the end (SequenceAt).")
_container_op("sequence.insert", infer=_infer_insert, num_args=(2, 3), pure=False,
            doc="A new sequence with a tensor inserted at a position, default the end (SequenceInsert).")
_container_op("sequence.erase", infer=lambda call, a: _seq(call, 0), num_args=(1, 2), pure=False,
            doc="A new sequence without the element at a position, default the last (SequenceErase).")
_container_op("sequence.length", infer=lambda call, a: (_seq(call, 0), TensorStructInfo((), "int64"))[1],
            num_args=1, pure=False, doc="The number of elements, an int64 scalar (SequenceLength).")
_container_op("sequence.split", infer=_infer_split, attrs={"axis": 0, "keepdims": 1}, num_args=(1, 2), pure=False,
            doc="The pieces of a tensor along an axis (SplitToSequence).")
_container_op("sequence.concat", infer=_infer_concat, attrs={"axis": 0, "new_axis": 0}, num_args=1, pure=False,
            doc="The elements concatenated (or stacked, new_axis=1) along an axis (ConcatFromSequence).")
_container_op("optional.wrap", infer=lambda call, a: OptionalStructInfo(_elem(call.args[0].struct_info)),
            num_args=1, pure=False, doc="An optional holding the argument (Optional).")
_container_op("optional.none", infer=lambda call, a: OptionalStructInfo(ObjectStructInfo()), num_args=0,
            pure=False, doc="An empty optional (Optional without input; the importer gives the type).")
_container_op("optional.has_element", infer=lambda call, a: TensorStructInfo((), "bool"), num_args=1, pure=False,
            doc="Whether an optional holds a value, a bool scalar (OptionalHasElement).")
_container_op("optional.get", infer=_infer_optional_get, num_args=1, pure=False,
            doc="The value of a non-empty optional (OptionalGetElement).")
