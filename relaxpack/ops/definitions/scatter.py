"""N-d gathers and scatters: gather_nd, scatter_nd, scatter_elements.

Indices may be negative (counting from the end of their axis, as ONNX
allows); the kernels check the range at run time.

>>> make_call("gather_nd", data, indices, batch_dims=1)                  # doctest: +SKIP
>>> make_call("scatter_nd", data, indices, updates, reduction="add")    # doctest: +SKIP
>>> make_call("scatter_elements", data, indices, updates, axis=1)       # doctest: +SKIP
"""

from __future__ import annotations

from typing import Sequence

from ...ir.dims import Dim, DimAnalyzer, format_dim
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import register_op
from .common import (
    INT, attr_error, check_dims_equal, check_dtype_kind, fmt_shape, fmt_sinfo, int_attr, normalize_axis,
    provably_different, result_vdevice, same_dtype, shape_error, tensor_arg, with_shape,
)

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _indices(call: Call, index: int = 1) -> TensorStructInfo:
    indices = tensor_arg(call, index, "indices")
    check_dtype_kind(call, indices, INT, "indices")
    return indices


def _reduction(call: Call) -> str:
    value = call.attrs["reduction"]
    if value not in REDUCTIONS:
        raise attr_error(call, f"attribute reduction must be one of {', '.join(REDUCTIONS)}; got {value!r}")
    return value


def _differs(analyzer: DimAnalyzer, a: Dim, b: Dim) -> bool:
    """Provably different: two different ints, or symbolic dims that cannot be equal."""
    if isinstance(a, int) and isinstance(b, int):
        return a != b
    return provably_different(analyzer, a, b)


def _check_shape(call: Call, got: Sequence[Dim], want: Sequence[Dim], analyzer: DimAnalyzer,
                 what: str, why: str) -> None:
    if len(got) != len(want) or any(_differs(analyzer, a, b) for a, b in zip(got, want)):
        raise shape_error(call, f"{what} has shape {fmt_shape(got)}, expected {fmt_shape(want)} ({why})")


def _index_depth(call: Call, indices: TensorStructInfo, data: TensorStructInfo, batch_dims: int) -> int | None:
    """``k = indices.shape[-1]``, the number of leading data axes an index
    addresses (after the batch dims), when static; checked against the rank."""
    if indices.ndim == 0:
        raise shape_error(call, "indices must have rank >= 1 (the last axis holds the index tuples)")
    if indices.shape is None or indices.ndim < 0:
        return None
    k = indices.shape[-1]
    if not isinstance(k, int):
        return None
    if data.ndim >= 0 and not 1 <= k <= data.ndim - batch_dims:
        raise shape_error(call, f"indices of shape {fmt_sinfo(indices)} index {k} axes, but data of shape "
                                f"{fmt_sinfo(data)} has {data.ndim - batch_dims} after {batch_dims} batch dims")
    return k


# ---------------------------------------------------------------- gather_nd


def _infer_gather_nd(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, indices = tensor_arg(call, 0), _indices(call)
    vdevice = result_vdevice(call, (data, indices))
    b = int_attr(call, "batch_dims")
    if b < 0:
        raise attr_error(call, f"batch_dims must be >= 0, got {b}")
    if data.ndim == 0:
        raise shape_error(call, "cannot gather from a scalar")
    if indices.ndim == 0:
        raise shape_error(call, "indices must have rank >= 1 (the last axis holds the index tuples)")
    for sinfo, what in ((data, "data"), (indices, "indices")):
        if sinfo.ndim >= 0 and b >= sinfo.ndim:
            raise shape_error(call, f"batch_dims {b} must be less than the rank of {what} {fmt_sinfo(sinfo)}")
    k = _index_depth(call, indices, data, b)
    if data.ndim < 0 or indices.ndim < 0 or k is None:
        return TensorStructInfo(None, data.dtype, -1, vdevice)
    if data.shape is None or indices.shape is None:
        return TensorStructInfo(None, data.dtype, indices.ndim - 1 + data.ndim - b - k, vdevice)
    for axis in range(b):
        if _differs(analyzer, data.shape[axis], indices.shape[axis]):
            raise shape_error(call, f"batch dim {axis} differs: data {fmt_sinfo(data)}, indices "
                                    f"{fmt_sinfo(indices)} ({format_dim(data.shape[axis])} != "
                                    f"{format_dim(indices.shape[axis])})")
    return TensorStructInfo(indices.shape[:-1] + data.shape[b + k:], data.dtype, vdevice=vdevice)


register_op("gather_nd", infer=_infer_gather_nd, attrs={"batch_dims": 0}, num_args=2,
            doc="ONNX GatherND: slices data[b..., i_0, ..., i_k-1] for each index tuple in indices.")


# ---------------------------------------------------------------- scatter_nd


def _updates_and_result(call: Call, data: TensorStructInfo,
                        indices: TensorStructInfo) -> tuple[TensorStructInfo, TensorStructInfo]:
    """The updates' struct info (same dtype as data) and the result's (data's)."""
    updates = tensor_arg(call, 2, "updates")
    same_dtype(call, (data, updates), ("data", "updates"))
    _reduction(call)
    out = TensorStructInfo(data.shape, data.dtype, data.ndim if data.shape is None else -1,
                           result_vdevice(call, (data, indices, updates)))
    return updates, out


def _infer_scatter_nd(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, indices = tensor_arg(call, 0), _indices(call)
    updates, out = _updates_and_result(call, data, indices)
    if data.ndim == 0:
        raise shape_error(call, "cannot scatter into a scalar")
    k = _index_depth(call, indices, data, 0)
    if k is not None and data.shape is not None and updates.shape is not None:
        want = indices.shape[:-1] + data.shape[k:]
        _check_shape(call, updates.shape, want, analyzer, "updates",
                     f"indices {fmt_sinfo(indices)} into data {fmt_sinfo(data)}")
    return out


register_op("scatter_nd", infer=_infer_scatter_nd, attrs={"reduction": "none"}, num_args=3,
            doc="ONNX ScatterND: a copy of data with updates written (or reduced) at index tuples.")


# ---------------------------------------------------------------- scatter_elements


def _infer_scatter_elements(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, indices = tensor_arg(call, 0), _indices(call)
    updates, out = _updates_and_result(call, data, indices)
    axis = int_attr(call, "axis")
    ranks = {s.ndim for s in (data, indices, updates) if s.ndim >= 0}
    if len(ranks) > 1:
        raise shape_error(call, f"data {fmt_sinfo(data)}, indices {fmt_sinfo(indices)} and updates "
                                f"{fmt_sinfo(updates)} must have the same rank")
    if ranks:
        rank = ranks.pop()
        if rank == 0:
            raise shape_error(call, "cannot scatter into a scalar")
        normalize_axis(call, axis, rank, fmt_sinfo(data))
    if indices.shape is not None and updates.shape is not None:
        _check_shape(call, updates.shape, indices.shape, analyzer, "updates", "the shape of indices")
    return out


register_op("scatter_elements", infer=_infer_scatter_elements, attrs={"axis": 0, "reduction": "none"},
            num_args=3, doc="ONNX ScatterElements: out[..., indices[i, j], ...] = updates[i, j] along axis.")


# ---------------------------------------------------------------- tensor_scatter


def _infer_tensor_scatter(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    cache, update = tensor_arg(call, 0, "past_cache"), tensor_arg(call, 1, "update")
    dtype = same_dtype(call, (cache, update), ("past_cache", "update"))
    if len(call.args) == 3:
        check_dtype_kind(call, tensor_arg(call, 2, "write_indices"), INT, "write_indices")
    if call.attrs["mode"] not in ("linear", "circular"):
        raise attr_error(call, f"mode must be 'linear' or 'circular', got {call.attrs['mode']!r}")
    axis = int_attr(call, "axis")
    if cache.ndim >= 0 and update.ndim >= 0 and cache.ndim != update.ndim:
        raise shape_error(call, f"past_cache {fmt_sinfo(cache)} and update {fmt_sinfo(update)} must have "
                                f"the same rank")
    if cache.ndim >= 0:
        if cache.ndim < 2 or normalize_axis(call, axis, cache.ndim, fmt_sinfo(cache)) == 0:
            raise shape_error(call, f"the sequence axis {axis} must not be the batch axis 0 of "
                                    f"{fmt_sinfo(cache)}")
    if cache.shape is not None and update.shape is not None:
        ax = normalize_axis(call, axis, cache.ndim)
        for i, (c, u) in enumerate(zip(cache.shape, update.shape)):
            if i != ax:
                check_dims_equal(call, c, u, analyzer, f"past_cache {fmt_sinfo(cache)} and update "
                                                       f"{fmt_sinfo(update)} differ in dim {i}")
    return with_shape(cache, cache.shape, dtype, cache.ndim)


register_op("tensor_scatter", infer=_infer_tensor_scatter, attrs={"axis": -2, "mode": "linear"},
            num_args=(2, 3),
            doc="ONNX TensorScatter (KV-cache update): a copy of past_cache with update written along axis "
                "at write_indices[b] (0 when absent) for each batch entry b; mode='circular' wraps.")
