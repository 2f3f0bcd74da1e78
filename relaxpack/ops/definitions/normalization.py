"""Softmax and normalization ops; all keep the data's struct info.

>>> make_call("nn.layer_norm", x, gamma, beta, axes=(-1,), epsilon=1e-5)   # doctest: +SKIP
>>> make_call("nn.rms_norm", x, scale, epsilon=1e-6)                        # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    FLOAT, attr_error, check_broadcastable_to, check_dims_equal, check_dtype_kind, float_attrs,
    fmt_sinfo, int_attr, int_tuple_attr, normalize_axes, normalize_axis, same_dtype, shape_error,
    tensor_arg, with_shape,
)


def _infer_softmax(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, FLOAT)
    axis = int_attr(call, "axis")
    if data.ndim >= 0:
        normalize_axis(call, axis, data.ndim, fmt_sinfo(data))
    return data


register_op("nn.softmax", infer=_infer_softmax, attrs={"axis": -1}, num_args=1,
            doc="Softmax along axis.")
register_op("nn.safe_softmax", infer=_infer_softmax, attrs={"axis": -1}, num_args=1,
            doc="Softmax along axis, NaN results as 0 (torch's _safe_softmax: a fully masked row gives zeros).")
register_op("nn.log_softmax", infer=_infer_softmax, attrs={"axis": -1}, num_args=1,
            doc="Log of softmax along axis.")


def _params(call: Call, names: tuple[str, ...], start: int = 1) -> list[TensorStructInfo]:
    """The parameter tensors after the data, checked to share the data's dtype."""
    data = tensor_arg(call, 0)
    params = [tensor_arg(call, i, name) for i, name in enumerate(names[: len(call.args) - start], start)]
    same_dtype(call, [data, *params], ["data", *names])
    return params


def _infer_layer_norm(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, FLOAT)
    float_attrs(call, "epsilon")
    params = _params(call, ("gamma", "beta"))
    axes = int_tuple_attr(call, "axes", allow_int=True)
    if not axes:
        raise attr_error(call, "attribute axes must name at least one axis")
    if data.ndim < 0:
        return data
    axes = normalize_axes(call, axes, data.ndim, fmt_sinfo(data))
    if data.shape is None:
        return data
    normalized = tuple(data.shape[a] for a in axes)
    for p, name in zip(params, ("gamma", "beta")):
        if p.shape is not None:
            # ONNX LayerNormalization lets scale and bias broadcast to the
            # normalized shape; an exact match is the common case.
            check_broadcastable_to(call, p.shape, normalized, analyzer, name)
    return data


register_op("nn.layer_norm", infer=_infer_layer_norm,
            attrs={"axes": (-1,), "epsilon": 1e-5}, num_args=(2, 3),
            doc="Layer normalization over axes, scaled by gamma and shifted by beta (optional).")


def _infer_rms_norm(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, FLOAT)
    float_attrs(call, "epsilon")
    (scale,) = _params(call, ("scale",))
    if data.shape is not None and scale.shape is not None:
        check_broadcastable_to(call, scale.shape, data.shape, analyzer, "scale")
    return data


register_op("nn.rms_norm", infer=_infer_rms_norm, attrs={"epsilon": 1e-6}, num_args=2,
            doc="RMS normalization over the last axis, scaled: x * (1 / sqrt(mean(x * x) + epsilon)) * scale "
                "(scale broadcast to the data's shape); the chain FuseRMSNorm recognises.")


def _check_per_channel(call: Call, data: TensorStructInfo, params, names, axis: int,
                       analyzer: DimAnalyzer) -> None:
    channels = data.shape[axis] if data.shape is not None else None
    for p, name in zip(params, names):
        if p.ndim >= 0 and p.ndim != 1:
            raise shape_error(call, f"{name} must be 1-D (one value per channel), got {fmt_sinfo(p)} "
                                    f"for data {fmt_sinfo(data)}")
        if channels is not None and p.shape is not None:
            check_dims_equal(call, p.shape[0], channels, analyzer,
                             f"{name} {fmt_sinfo(p)} must have one value per channel of data "
                             f"{fmt_sinfo(data)} (axis {axis})")


_BN_PARAMS = ("gamma", "beta", "moving_mean", "moving_var")


def _infer_batch_norm(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, FLOAT)
    float_attrs(call, "epsilon")
    params = _params(call, _BN_PARAMS)
    if data.ndim < 0:
        return data
    axis = normalize_axis(call, int_attr(call, "axis"), data.ndim, fmt_sinfo(data))
    _check_per_channel(call, data, params, _BN_PARAMS, axis, analyzer)
    return data


register_op("nn.batch_norm", infer=_infer_batch_norm, attrs={"axis": 1, "epsilon": 1e-5},
            num_args=5,
            doc="Inference batch norm: (x - mean) / sqrt(var + eps) * gamma + beta along axis.")


def _infer_instance_norm(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, FLOAT)
    float_attrs(call, "epsilon")
    params = _params(call, ("gamma", "beta"))
    if data.ndim < 0:
        return data
    if data.ndim < 3:
        raise shape_error(call, f"data must be (N, C, *spatial), got {fmt_sinfo(data)}")
    _check_per_channel(call, data, params, ("gamma", "beta"), 1, analyzer)
    return data


register_op("nn.instance_norm", infer=_infer_instance_norm, attrs={"epsilon": 1e-5}, num_args=3,
            doc="Instance normalization of (N, C, *spatial) over the spatial dims, per channel.")


def _infer_lrn(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, FLOAT)
    size = int_attr(call, "size")
    if size < 1:
        raise attr_error(call, f"attribute size must be >= 1, got {size}")
    float_attrs(call, "alpha", "beta", "bias")
    if 0 <= data.ndim < 3:
        raise shape_error(call, f"data must be (N, C, *spatial), got {fmt_sinfo(data)}")
    return with_shape(data, data.shape, ndim=data.ndim)


register_op("nn.lrn", infer=_infer_lrn,
            attrs={"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, num_args=1,
            doc="Local response normalization across channels (ONNX LRN).")
