"""Image-style ops: image.resize (ONNX Resize / Upsample) and pad (ONNX Pad).

``image.resize`` takes the output size of the resized axes as a shape value,
so a size computed from ``Shape`` stays symbolic (the kernel reads the
concrete size from its preallocated output)::

    lv = R.image.resize(x, R.shape([2 * h, 2 * w]), axes=(2, 3), scales=(2.0, 2.0),
                        method="linear", coordinate_transformation_mode="half_pixel")

``pad`` takes ONNX's pads layout (all begins, then all ends, one of each per
axis); negative amounts crop. The constant of ``pad_mode="constant"`` is the
attribute ``pad_value``, or a 0-d tensor given as a second argument when it
is only known at run time::

    lv = R.pad(x, pads=(0, 1, 0, 2), pad_mode="reflect")

``dynamic_pad`` pads by amounts that are symbolic dims, given as a shape
value (same layout; constant mode): the SAME padding of a strided window
over a symbolic dim depends on the dim modulo the stride::

    lv = R.dynamic_pad(x, R.shape([0, 0, b, 0, 0, e]), pad_value=0.0)
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer, format_dim
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    NUMERIC, attr_error, bool_attr, check_dtype_kind, fmt_sinfo, int_tuple_attr, is_real_value,
    normalize_axes, result_vdevice, shape_arg, shape_error, tensor_arg, with_shape,
)

# ---------------------------------------------------------------- image.resize

RESIZE_METHODS = ("nearest_neighbor", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
ROUNDING_METHODS = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _choice(call: Call, name: str, allowed: tuple[str, ...]) -> str:
    value = call.attrs[name]
    if value not in allowed:
        raise attr_error(call, f"attribute {name} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _float_tuple(call: Call, name: str, length: int) -> tuple[float, ...] | None:
    value = call.attrs[name]
    if value is None:
        return None
    if not isinstance(value, tuple) or not all(is_real_value(v) for v in value) or len(value) != length:
        raise attr_error(call, f"attribute {name} must be a tuple of {length} numbers, got {value!r}")
    return value


def _infer_resize(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, size = tensor_arg(call, 0), shape_arg(call, 1, "size")
    axes = int_tuple_attr(call, "axes")
    method = _choice(call, "method", RESIZE_METHODS)
    mode = _choice(call, "coordinate_transformation_mode", COORDINATE_MODES)
    _choice(call, "rounding_method", ROUNDING_METHODS)
    scales = _float_tuple(call, "scales", len(axes))
    roi = _float_tuple(call, "roi", 2 * len(axes))
    for name in ("cubic_alpha", "extrapolation_value"):
        if not is_real_value(call.attrs[name]):
            raise attr_error(call, f"attribute {name} must be a number, got {call.attrs[name]!r}")
    bool_attr(call, "cubic_exclude")
    bool_attr(call, "antialias")
    if scales is not None and not all(s > 0 for s in scales):
        raise attr_error(call, f"scales {scales} must be positive")
    if mode == "tf_crop_and_resize" and roi is None:
        raise attr_error(call, "coordinate_transformation_mode 'tf_crop_and_resize' needs the attribute roi")
    if method != "nearest_neighbor":
        check_dtype_kind(call, data, NUMERIC)
    if size.ndim >= 0 and size.ndim != len(axes):
        raise shape_error(call, f"size {fmt_sinfo(size)} must give one dim per resized axis {axes}")
    if size.values is not None:
        negative = [d for d in size.values if isinstance(d, int) and d < 0]
        if negative:
            raise shape_error(call, f"size {fmt_sinfo(size)} has a negative dim")
    if data.ndim < 0:
        return data
    axes = normalize_axes(call, axes, data.ndim, fmt_sinfo(data))
    if data.shape is None or size.values is None:
        return with_shape(data, None, ndim=data.ndim)
    shape = list(data.shape)
    for axis, dim in zip(axes, size.values):
        shape[axis] = dim
    return with_shape(data, tuple(shape))


register_op("image.resize", infer=_infer_resize, num_args=2, attrs={
    "axes": REQUIRED,                    # the resized axes, in the order they are interpolated
    "scales": None,                      # per axis; None: output size / input size
    "roi": None,                         # tf_crop_and_resize: starts then ends, per axis
    "method": "nearest_neighbor",
    "coordinate_transformation_mode": "half_pixel",
    "rounding_method": "round_prefer_floor",
    "cubic_alpha": -0.75,
    "cubic_exclude": False,
    "antialias": False,
    "extrapolation_value": 0.0,
}, doc="Resize the axes to the shape value size by nearest/linear/cubic interpolation (ONNX Resize).")


# ---------------------------------------------------------------- pad

PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _infer_pad(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    pads = int_tuple_attr(call, "pads")
    mode = _choice(call, "pad_mode", PAD_MODES)
    value = call.attrs["pad_value"]
    if not isinstance(value, (bool, int, float, str)):
        raise attr_error(call, f"attribute pad_value must be a number, bool or string, got {value!r}")
    vdevice = data.vdevice
    if len(call.args) == 2:
        fill = tensor_arg(call, 1, "pad value")
        vdevice = result_vdevice(call, (data, fill))
        if mode != "constant":
            raise shape_error(call, f"a pad value argument needs pad_mode 'constant', not {mode!r}")
        if fill.ndim > 1 or (fill.shape is not None and fill.ndim == 1 and fill.shape[0] != 1):
            raise shape_error(call, f"the pad value must be a scalar, got shape {fmt_sinfo(fill)}")
        if fill.dtype is not None and data.dtype is not None and fill.dtype != data.dtype:
            raise shape_error(call, f"the pad value's dtype {fill.dtype} differs from the data's {data.dtype}")
    return _padded(call, analyzer, data, pads, mode, vdevice)


def _padded(call: Call, analyzer: DimAnalyzer, data: TensorStructInfo, pads, mode: str,
            vdevice) -> TensorStructInfo:
    """The struct info of ``data`` padded by ``pads`` (begins, then ends; ints or dims)."""
    if len(pads) % 2:
        raise attr_error(call, f"pads {_fmt(pads)} must hold a begin and an end per axis")
    if data.ndim < 0:
        return TensorStructInfo(None, data.dtype, -1, vdevice)
    if len(pads) != 2 * data.ndim:
        raise shape_error(call, f"pads {_fmt(pads)} need {2 * data.ndim} values (begins, then ends) for "
                                f"data of shape {fmt_sinfo(data)}")
    if data.shape is None:
        return TensorStructInfo(None, data.dtype, data.ndim, vdevice)
    shape = []
    for axis, dim in enumerate(data.shape):
        begin, end = pads[axis], pads[axis + data.ndim]
        out = dim + begin + end
        if (isinstance(out, int) and out < 0) or analyzer.prove_lt(out, 0):
            raise shape_error(call, f"pads {_fmt(pads)} crop more than the dim {format_dim(dim)} of axis "
                                    f"{axis} of shape {fmt_sinfo(data)}")
        if mode != "constant" and (begin > 0 or end > 0) and (dim == 0 or analyzer.prove_equal(dim, 0)):
            raise shape_error(call, f"pad_mode {mode!r} cannot extend the empty axis {axis} of shape "
                                    f"{fmt_sinfo(data)}")
        shape.append(out)
    return with_shape(TensorStructInfo(None, data.dtype, data.ndim, vdevice), tuple(shape))


def _fmt(pads) -> str:
    return "(" + ", ".join(format_dim(p) for p in pads) + ")"


register_op("pad", infer=_infer_pad, num_args=(1, 2),
            attrs={"pads": REQUIRED, "pad_mode": "constant", "pad_value": 0},
            doc="Pad (negative: crop) each axis by pads (begins, then ends); modes constant/reflect/edge/wrap.")


def _infer_dynamic_pad(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, pads = tensor_arg(call, 0), shape_arg(call, 1, "pads")
    value = call.attrs["pad_value"]
    if not isinstance(value, (bool, int, float)):
        raise attr_error(call, f"attribute pad_value must be a number or bool, got {value!r}")
    if pads.values is None:
        raise attr_error(call, "pads must be a shape value with known dims")
    return _padded(call, analyzer, data, pads.values, "constant", data.vdevice)


register_op("dynamic_pad", infer=_infer_dynamic_pad, num_args=2, attrs={"pad_value": 0},
            doc="Pad (negative: crop) each axis with the constant pad_value by a shape value of symbolic "
                "amounts (begins, then ends).")
