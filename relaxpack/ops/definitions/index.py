"""Indexing: strided_slice, take (numpy/ONNX Gather), gather_elements.

>>> make_call("strided_slice", x, axes=(1,), begin=(0,), end=(-1,))      # doctest: +SKIP
>>> make_call("take", embedding, ids, axis=0)                            # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import Dim, DimAnalyzer, dim_max, dim_min
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ...runtime.semantics import onnx_slice
from ..registry import REQUIRED, register_op
from .common import (
    INT, attr_error, check_dtype_kind, fmt_sinfo, int_attr, int_tuple_attr, normalize_axes,
    normalize_axis, result_vdevice, shape_arg, shape_error, tensor_arg, with_shape,
)

#: begin/end at or beyond +-HUGE mean "past the end" (ONNX's INT_MAX idiom);
#: real dims are assumed smaller.
HUGE = 2 ** 31 - 1


def slice_length(dim: Dim, begin: int, end: int, step: int, analyzer: DimAnalyzer) -> Dim | None:
    """The length of ``range(dim)[begin:end:step]``, clamped like numpy and
    ONNX Slice. When the clamping depends on the value of a symbolic ``dim``
    the length is an exact expression with ``min``/``max`` (the runtime
    evaluates it), so the output shape is always known.

    >>> slice_length(sym("n"), 1, HUGE, 1, DimAnalyzer())    # doctest: +SKIP
    DimExpr('n - 1')
    """
    if isinstance(dim, int):
        return len(range(*onnx_slice(begin, end, step, dim).indices(dim)))
    if step == 1 and -HUGE < begin < 0 and end >= HUGE:
        # x[-k:] keeps the last min(n, k) cells: said so, not as a nest of clamps
        return -begin if analyzer.prove_ge(dim, -begin) else dim_min(dim, -begin)
    if step > 0:
        start = _position(dim, begin, 0, dim, analyzer)
        stop = _position(dim, end, 0, dim, analyzer)
        span = stop - start
    else:
        start = _position(dim, begin, 0, dim - 1, analyzer)   # ONNX: a start before -dim takes element 0
        stop = _position(dim, end, -1, dim - 1, analyzer)
        span = start - stop
    if analyzer.prove_le(span, 0):
        return 0
    if not analyzer.prove_nonneg(span):
        span = dim_max(span, 0)
    return analyzer.simplify((span + abs(step) - 1) // abs(step))


def _position(dim: Dim, index: int, lo: Dim, hi: Dim, analyzer: DimAnalyzer) -> Dim:
    """``index`` (negative: from the end) clamped to ``[lo, hi]``."""
    if index >= HUGE:
        return hi
    if index <= -HUGE:
        return lo if analyzer.prove_le(lo, hi) else dim_min(lo, hi)
    pos = index if index >= 0 else dim + index
    if analyzer.prove_ge(pos, lo) and analyzer.prove_le(pos, hi):
        return pos
    if analyzer.prove_le(pos, lo):   # min(lo, hi): a negative step's [0, dim - 1] is [0, -1] for dim 0
        return lo if analyzer.prove_le(lo, hi) else dim_min(lo, hi)
    if analyzer.prove_ge(pos, hi):
        return hi
    return dim_min(dim_max(pos, lo), hi)


def _infer_strided_slice(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    axes = int_tuple_attr(call, "axes", allow_int=True)
    begin = int_tuple_attr(call, "begin", allow_int=True)
    end = int_tuple_attr(call, "end", allow_int=True)
    strides = int_tuple_attr(call, "strides", allow_none=True, allow_int=True) or (1,) * len(axes)
    if not len(axes) == len(begin) == len(end) == len(strides):
        raise attr_error(call, f"axes {axes}, begin {begin}, end {end} and strides {strides} must have "
                               f"the same length")
    if 0 in strides:
        raise attr_error(call, f"strides must be nonzero, got {strides}")
    if data.ndim < 0:
        return data
    axes = normalize_axes(call, axes, data.ndim, fmt_sinfo(data))
    if data.shape is None:
        return data
    shape = list(data.shape)
    for axis, b, e, s in zip(axes, begin, end, strides):
        length = slice_length(shape[axis], b, e, s, analyzer)
        if length is None:
            return with_shape(data, None, ndim=data.ndim)
        shape[axis] = length
    return with_shape(data, tuple(shape))


register_op("strided_slice", infer=_infer_strided_slice,
            attrs={"axes": REQUIRED, "begin": REQUIRED, "end": REQUIRED, "strides": None}, num_args=1,
            doc="Slice begin:end:stride along axes, clamped like numpy / ONNX Slice.")


def _infer_dynamic_strided_slice(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    begin, end = shape_arg(call, 1, "begin"), shape_arg(call, 2, "end")
    axes = int_tuple_attr(call, "axes", allow_int=True)
    strides = int_tuple_attr(call, "strides", allow_none=True, allow_int=True) or (1,) * len(axes)
    if begin.values is None or end.values is None:
        raise attr_error(call, "begin and end must be shape values with known dims")
    if not len(axes) == len(begin.values) == len(end.values) == len(strides):
        raise attr_error(call, f"axes {axes}, begin, end and strides {strides} must have the same length")
    if any(s <= 0 for s in strides):
        raise attr_error(call, f"strides must be positive, got {strides}")
    if data.ndim < 0 or data.shape is None:
        return with_shape(data, None, ndim=data.ndim)
    axes = normalize_axes(call, axes, data.ndim, fmt_sinfo(data))
    shape = list(data.shape)
    for axis, b, e, s in zip(axes, begin.values, end.values, strides):
        for bound in (b, e):
            if not analyzer.prove_nonneg(bound):
                raise shape_error(call, f"bound {bound} of axis {axis} may be negative; "
                                        f"dynamic bounds must be non-negative")
        dim = shape[axis]
        start, stop = dim_min(b, dim), dim_min(e, dim)
        shape[axis] = analyzer.simplify((dim_max(stop - start, 0) + s - 1) // s)
    return with_shape(data, tuple(shape))


register_op("dynamic_strided_slice", infer=_infer_dynamic_strided_slice, attrs={"axes": REQUIRED, "strides": None},
            num_args=3, doc="Slice begin:end:stride along axes with bounds from shape values "
                            "(symbolic dims, non-negative), clamped to each dim.")


def _infer_take(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, indices = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "indices")
    check_dtype_kind(call, indices, INT, "indices")
    vdevice = result_vdevice(call, (data, indices))
    axis = int_attr(call, "axis")
    if data.ndim == 0:
        raise shape_error(call, "cannot take from a scalar")
    if data.ndim < 0 or indices.ndim < 0:
        return TensorStructInfo(None, data.dtype, -1, vdevice)
    axis = normalize_axis(call, axis, data.ndim, fmt_sinfo(data))
    if data.shape is None or indices.shape is None:
        return TensorStructInfo(None, data.dtype, data.ndim - 1 + indices.ndim, vdevice)
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1:]
    return TensorStructInfo(shape, data.dtype, vdevice=vdevice)


register_op("take", infer=_infer_take, attrs={"axis": 0, "in_bounds": False}, num_args=2,
            doc="numpy take / ONNX Gather: data.shape[:axis] + indices.shape + data.shape[axis+1:]; "
                "in_bounds: every index is known to be in [0, n) (a table look-up by a clipped value).")


def _infer_gather_elements(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, indices = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "indices")
    check_dtype_kind(call, indices, INT, "indices")
    vdevice = result_vdevice(call, (data, indices))
    axis = int_attr(call, "axis")
    if data.ndim >= 0 and indices.ndim >= 0 and data.ndim != indices.ndim:
        raise shape_error(call, f"data {fmt_sinfo(data)} and indices {fmt_sinfo(indices)} must have "
                                f"the same rank")
    ndim = max(data.ndim, indices.ndim)
    if ndim >= 0:
        normalize_axis(call, axis, ndim, fmt_sinfo(data))
    return TensorStructInfo(indices.shape, data.dtype, ndim if indices.shape is None else -1, vdevice)


register_op("gather_elements", infer=_infer_gather_elements, attrs={"axis": 0}, num_args=2,
            doc="ONNX GatherElements: out[i][j] = data[indices[i][j]][j] (axis 0); shape of indices.")


# ---------------------------------------------------------------- reverse_sequence


def _infer_reverse_sequence(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, lengths = tensor_arg(call, 0), tensor_arg(call, 1, "sequence_lens")
    check_dtype_kind(call, lengths, INT, "sequence_lens")
    batch_axis, time_axis = int_attr(call, "batch_axis"), int_attr(call, "time_axis")
    if {batch_axis, time_axis} != {0, 1}:
        raise attr_error(call, f"batch_axis and time_axis must be 0 and 1 in some order, got "
                               f"{batch_axis} and {time_axis}")
    if 0 <= data.ndim < 2:
        raise shape_error(call, f"needs a tensor of rank >= 2, got {fmt_sinfo(data)}")
    if lengths.ndim not in (-1, 1):
        raise shape_error(call, f"sequence_lens must be 1-D, got {fmt_sinfo(lengths)}")
    return data


register_op("reverse_sequence", infer=_infer_reverse_sequence, attrs={"batch_axis": 1, "time_axis": 0},
            num_args=2,
            doc="ONNX ReverseSequence: for each batch entry b, reverse the first sequence_lens[b] steps "
                "along time_axis and keep the rest.")
