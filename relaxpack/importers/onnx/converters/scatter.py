"""GatherND, ScatterND, ScatterElements and the deprecated Scatter;
TensorScatter (the KV-cache update) and ReverseSequence (a per-batch gather).

(GatherElements is converted with Gather in ``tensor.py``.) Indices pass
through unchanged: the kernels count negative indices from the end and check
the range at run time.
"""

from __future__ import annotations

from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._shape_common import of_rank, shape_error, shaped, unsupported

# ---------------------------------------------------------------- GatherND


@register_converter("", "GatherND", since_opset=11)
def gather_nd_v11(ctx, data, indices):
    return _gather_nd(ctx, data, indices, 0)


@register_converter("", "GatherND", since_opset=12)
def gather_nd_v12(ctx, data, indices, *, batch_dims=0):
    return _gather_nd(ctx, data, indices, batch_dims)


def _gather_nd(ctx, data: Value, indices: Value, batch_dims: int):
    if data.ndim >= 0:      # else the run shapes the result (dyn.apply)
        data = shaped(ctx, data, "data")
    indices = shaped(ctx, indices, "indices")
    _check_indices(ctx, indices)
    if not isinstance(indices.shape[-1], int):
        raise unsupported(ctx, f"the last dim of indices (the index depth) must be static, got "
                               f"{indices.shape[-1]}: it decides the output's rank")
    return make_call("gather_nd", ctx.expr(data), ctx.expr(indices), batch_dims=batch_dims)


def _check_indices(ctx, indices: Value) -> None:
    if not (indices.dtype or "").startswith(("int", "uint")):
        raise shape_error(ctx, f"indices must be integers, got {indices.dtype}")
    if indices.ndim < 1:
        raise shape_error(ctx, "indices must have rank >= 1")


# ---------------------------------------------------------------- ScatterND


@register_converter("", "ScatterND", since_opset=11)
def scatter_nd_v11(ctx, data, indices, updates):
    return _scatter_nd(ctx, data, indices, updates, "none")


@register_converter("", "ScatterND", since_opset=16)
def scatter_nd_v16(ctx, data, indices, updates, *, reduction="none"):
    """Reductions none, add, mul; and max and min, which the spec adds at opset 18 and onnxruntime
    takes at 16 and 17 too (tf2onnx writes them there for tensor_scatter_nd_max/min)."""
    return _scatter_nd(ctx, data, indices, updates, _reduction(ctx, reduction))


def _scatter_nd(ctx, data: Value, indices: Value, updates: Value, reduction: str):
    if data.ndim >= 0:      # else the result has the data's shape, whatever the run meets (dyn.apply)
        data = shaped(ctx, data, "data")
    _check_indices(ctx, indices)
    return make_call("scatter_nd", ctx.expr(data), ctx.expr(indices), ctx.expr(updates), reduction=reduction)


_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _reduction(ctx, reduction: str) -> str:
    if reduction not in _REDUCTIONS:
        raise unsupported(ctx, f"reduction {reduction!r} (none, add, mul, max, min)")
    return reduction


# ---------------------------------------------------------------- ScatterElements, Scatter


@register_converter("", "Scatter", since_opset=9)
def scatter_v9(ctx, data, indices, updates, *, axis=0):
    return _scatter_elements(ctx, data, indices, updates, axis, "none")


@register_converter("", "ScatterElements", since_opset=11)
def scatter_elements_v11(ctx, data, indices, updates, *, axis=0):
    return _scatter_elements(ctx, data, indices, updates, axis, "none")


@register_converter("", "ScatterElements", since_opset=16)
def scatter_elements_v16(ctx, data, indices, updates, *, axis=0, reduction="none"):
    """As ScatterND: max and min at opsets 16 and 17 too, as onnxruntime takes them."""
    return _scatter_elements(ctx, data, indices, updates, axis, _reduction(ctx, reduction))


def _scatter_elements(ctx, data: Value, indices: Value, updates: Value, axis: int, reduction: str):
    if data.ndim < 0 and indices.ndim >= 0:     # the indices' rank is the data's (the run checks it)
        data = of_rank(ctx, data, indices.ndim, "data")
    data = shaped(ctx, data, "data")
    _check_indices(ctx, indices)
    if not -data.ndim <= axis < data.ndim:
        raise shape_error(ctx, f"axis {axis} is out of range for rank {data.ndim}")
    return make_call("scatter_elements", ctx.expr(data), ctx.expr(indices), ctx.expr(updates),
                     axis=axis + data.ndim if axis < 0 else axis, reduction=reduction)


# ---------------------------------------------------------------- TensorScatter, ReverseSequence


@register_converter("", "TensorScatter", since_opset=24)
def tensor_scatter(ctx, past_cache, update, write_indices=None, *, axis=-2, mode="linear"):
    """The KV-cache update: ``past_cache`` with ``update`` written along
    ``axis`` from ``write_indices[b]`` for each batch entry ``b``."""
    if past_cache is None or update is None:
        raise shape_error(ctx, "needs the inputs past_cache and update")
    if mode not in ("linear", "circular"):
        raise unsupported(ctx, f"mode must be 'linear' or 'circular', got {mode!r}")
    args = [ctx.expr(past_cache), ctx.expr(update)]
    if write_indices is not None:
        args.append(ctx.expr(write_indices))
    return make_call("tensor_scatter", *args, axis=int(axis), mode=mode)


@register_converter("", "ReverseSequence", since_opset=10)
def reverse_sequence(ctx, x, sequence_lens, *, batch_axis=1, time_axis=0):
    """Reverse the first ``sequence_lens[b]`` steps of each batch entry ``b``."""
    if x is None or sequence_lens is None:
        raise shape_error(ctx, "needs the inputs input and sequence_lens")
    return make_call("reverse_sequence", ctx.expr(x), ctx.expr(sequence_lens), batch_axis=int(batch_axis),
                     time_axis=int(time_axis))
