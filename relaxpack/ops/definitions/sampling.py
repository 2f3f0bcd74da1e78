"""Sampling at fractional positions: image.grid_sample, image.roi_align, nn.deform_conv;
and image.max_roi_pool, the integer-box pooling that RoiAlign replaced.

Each op reads its data at computed, non-integer coordinates and
interpolates (nearest, linear or cubic taps).

``image.grid_sample`` (ONNX GridSample) samples ``data (N, C, *spatial)`` at
the normalized positions ``grid (N, *out, r)`` (``grid[..., 0]`` is the
last spatial axis, as in PyTorch)::

    y = R.image.grid_sample(x, grid, method="linear", padding_mode="zeros", align_corners=False)
    # x: (n, 3, h, w), grid: (n, 5, 7, 2) -> y: (n, 3, 5, 7)

``image.roi_align`` (ONNX RoiAlign) pools each box of ``rois (R, 4)``
(x1, y1, x2, y2) of the image ``batch_indices[r]`` to ``(out_h, out_w)``::

    y = R.image.roi_align(x, rois, idx, output_size=(5, 5), spatial_scale=0.25, sampling_ratio=2)

``image.max_roi_pool`` (ONNX MaxRoiPool) takes the max over each of
``pooled_shape`` bins of each box of ``rois (R, 5)`` (batch index, x1, y1,
x2, y2), the corners scaled by ``spatial_scale`` and rounded to pixels::

    y = R.image.max_roi_pool(x, rois, pooled_shape=(2, 3), spatial_scale=0.5)
    # x: (n, c, h, w), rois: (r, 5) -> y: (r, c, 2, 3)

``nn.deform_conv`` (ONNX DeformConv) is a convolution whose taps move by
the per-position ``offset`` (and are scaled by an optional ``mask``).
"""

from __future__ import annotations

from ...ir.dims import Dim, DimAnalyzer, format_dim
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    FLOAT, INT, attr_error, bool_attr, check_dtype_kind, float_attrs, fmt_sinfo, int_attr, int_tuple_attr,
    pads_attr, per_spatial, provably_different, result_vdevice, shape_error, tensor_arg, with_shape,
)

# ---------------------------------------------------------------- image.grid_sample

GRID_METHODS = ("nearest", "linear", "cubic")
GRID_PADDING = ("zeros", "border", "reflection")


def _choice(call: Call, name: str, allowed: tuple[str, ...]) -> str:
    value = call.attrs[name]
    if value not in allowed:
        raise attr_error(call, f"attribute {name} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _check_same(call: Call, a: Dim, b: Dim, analyzer: DimAnalyzer, message: str) -> None:
    """A ShapeError when ``a != b`` is provable; undecided dims are checked by the kernel."""
    if (isinstance(a, int) and isinstance(b, int) and a != b) or provably_different(analyzer, a, b):
        raise shape_error(call, f"{message}: {format_dim(a)} != {format_dim(b)}")


def _infer_grid_sample(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, grid = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "grid")
    method = _choice(call, "method", GRID_METHODS)
    _choice(call, "padding_mode", GRID_PADDING)
    bool_attr(call, "align_corners")
    check_dtype_kind(call, grid, FLOAT, "grid")
    if method != "nearest":
        check_dtype_kind(call, data, FLOAT)
    elif data.dtype == "string":
        raise shape_error(call, "cannot sample string data")
    vdevice = result_vdevice(call, (data, grid))
    ndim = data.ndim if data.ndim >= 0 else grid.ndim
    if data.ndim >= 0 and grid.ndim >= 0 and data.ndim != grid.ndim:
        raise shape_error(call, f"data {fmt_sinfo(data)} and grid {fmt_sinfo(grid)} must have the same rank")
    if 0 <= ndim < 3:
        raise shape_error(call, f"data must be (N, C, *spatial) with at least one spatial dim, got rank {ndim}")
    result = TensorStructInfo(None, data.dtype, ndim, vdevice)
    if data.shape is None or grid.shape is None:
        return result
    r = ndim - 2
    last = grid.shape[-1]
    if isinstance(last, int) and last != r:
        raise shape_error(call, f"grid {fmt_sinfo(grid)} must end in {r} coordinates for data {fmt_sinfo(data)}")
    _check_same(call, data.shape[0], grid.shape[0], analyzer,
                f"data {fmt_sinfo(data)} and grid {fmt_sinfo(grid)} differ in batch size")
    return with_shape(result, (data.shape[0], data.shape[1], *grid.shape[1:-1]))


register_op("image.grid_sample", infer=_infer_grid_sample, num_args=2, attrs={
    "method": "linear", "padding_mode": "zeros", "align_corners": False,
}, doc="Sample data (N, C, *spatial) at the normalized positions grid (N, *out, r) (ONNX GridSample).")


# ---------------------------------------------------------------- image.roi_align

ROI_MODES = ("avg", "max")
ROI_COORDINATE_MODES = ("half_pixel", "output_half_pixel")


def _infer_roi_align(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, rois = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "rois")
    indices = tensor_arg(call, 2, "batch_indices")
    _choice(call, "mode", ROI_MODES)
    _choice(call, "coordinate_transformation_mode", ROI_COORDINATE_MODES)
    size = int_tuple_attr(call, "output_size")
    if len(size) != 2 or min(size) < 1:
        raise attr_error(call, f"attribute output_size must be two positive ints, got {size!r}")
    out_h, out_w = size
    int_attr(call, "sampling_ratio")
    float_attrs(call, "spatial_scale")
    check_dtype_kind(call, data, FLOAT)
    check_dtype_kind(call, rois, FLOAT, "rois")
    check_dtype_kind(call, indices, INT, "batch_indices")
    vdevice = result_vdevice(call, (data, rois, indices))
    for sinfo, rank, what in ((data, 4, "data"), (rois, 2, "rois"), (indices, 1, "batch_indices")):
        if sinfo.ndim >= 0 and sinfo.ndim != rank:
            raise shape_error(call, f"{what} {fmt_sinfo(sinfo)} must have rank {rank}")
    if rois.shape is not None and isinstance(rois.shape[1], int) and rois.shape[1] != 4:
        raise shape_error(call, f"rois {fmt_sinfo(rois)} must hold 4 coordinates (x1, y1, x2, y2) per box")
    count = rois.shape[0] if rois.shape is not None else (indices.shape[0] if indices.shape is not None else None)
    if rois.shape is not None and indices.shape is not None:
        _check_same(call, rois.shape[0], indices.shape[0], analyzer,
                    f"rois {fmt_sinfo(rois)} and batch_indices {fmt_sinfo(indices)} differ in the number of boxes")
    if count is None or data.shape is None:
        return TensorStructInfo(None, data.dtype, 4, vdevice)
    return TensorStructInfo((count, data.shape[1], out_h, out_w), data.dtype, vdevice=vdevice)


register_op("image.roi_align", infer=_infer_roi_align, num_args=3, attrs={
    "output_size": REQUIRED, "sampling_ratio": 0, "spatial_scale": 1.0, "mode": "avg",
    "coordinate_transformation_mode": "half_pixel",
}, doc="Pool each box of rois (R, 4) on image batch_indices[r] of data (N, C, H, W) to output_size (ONNX RoiAlign).")


# ---------------------------------------------------------------- image.max_roi_pool


def _infer_max_roi_pool(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, rois = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "rois")
    size = int_tuple_attr(call, "pooled_shape")
    if len(size) != 2 or min(size) < 1:
        raise attr_error(call, f"attribute pooled_shape must be two positive ints, got {size!r}")
    float_attrs(call, "spatial_scale")
    check_dtype_kind(call, data, FLOAT)
    check_dtype_kind(call, rois, FLOAT, "rois")
    vdevice = result_vdevice(call, (data, rois))
    for sinfo, rank, what in ((data, 4, "data"), (rois, 2, "rois")):
        if sinfo.ndim >= 0 and sinfo.ndim != rank:
            raise shape_error(call, f"{what} {fmt_sinfo(sinfo)} must have rank {rank}")
    if rois.shape is not None and isinstance(rois.shape[1], int) and rois.shape[1] != 5:
        raise shape_error(call, f"rois {fmt_sinfo(rois)} must hold 5 values (batch index, x1, y1, x2, y2) per box")
    if rois.shape is None or data.shape is None:
        return TensorStructInfo(None, data.dtype, 4, vdevice)
    return TensorStructInfo((rois.shape[0], data.shape[1], *size), data.dtype, vdevice=vdevice)


register_op("image.max_roi_pool", infer=_infer_max_roi_pool, num_args=2, attrs={
    "pooled_shape": REQUIRED, "spatial_scale": 1.0,
}, doc="Max over pooled_shape bins of each box of rois (R, 5) (batch, x1, y1, x2, y2) of data (ONNX MaxRoiPool).")


# ---------------------------------------------------------------- nn.deform_conv


def _infer_deform_conv(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, weight, offset = tensor_arg(call, 0), tensor_arg(call, 1, "weight"), tensor_arg(call, 2, "offset")
    mask = tensor_arg(call, 3, "mask") if len(call.args) > 3 else None
    operands = (data, weight, offset) + ((mask,) if mask is not None else ())
    for sinfo, what in zip(operands, ("data", "weight", "offset", "mask")):
        check_dtype_kind(call, sinfo, FLOAT, what)
        if sinfo.dtype is not None and data.dtype is not None and sinfo.dtype != data.dtype:
            raise shape_error(call, f"{what} dtype {sinfo.dtype} differs from the data's {data.dtype}")
    vdevice = result_vdevice(call, operands)
    groups, offset_groups = int_attr(call, "groups"), int_attr(call, "offset_groups")
    if groups < 1 or offset_groups < 1:
        raise attr_error(call, f"groups ({groups}) and offset_groups ({offset_groups}) must be positive")
    ranks = {s.ndim for s in operands if s.ndim >= 0}
    if len(ranks) > 1 or (ranks and min(ranks) < 3):
        raise shape_error(call, f"data, weight, offset and mask must share a rank >= 3, got "
                                f"{', '.join(fmt_sinfo(s) for s in operands)}")
    ndim = ranks.pop() if ranks else -1
    if ndim < 0 or data.shape is None or weight.shape is None:
        return TensorStructInfo(None, data.dtype, ndim, vdevice)
    n = ndim - 2
    strides = per_spatial(call, "strides", n, minimum=1)
    dilation = per_spatial(call, "dilation", n, minimum=1)
    begins, ends = pads_attr(call, "padding", n)
    batch, channels, *spatial = data.shape
    out_channels, per_group, *kernel = weight.shape
    _check_same(call, channels, groups * per_group, analyzer, f"data {fmt_sinfo(data)} has channels != groups "
                                                               f"({groups}) * weight dim 1 of {fmt_sinfo(weight)}")
    out = [(x + b + e - d * (k - 1) - 1) // s + 1
           for x, k, s, d, b, e in zip(spatial, kernel, strides, dilation, begins, ends)]
    if offset.shape is not None:
        for have, want in zip(offset.shape[2:], out):
            _check_same(call, have, want, analyzer, f"offset {fmt_sinfo(offset)} does not match the output's "
                                                    f"spatial dims")
        taps = 1
        for k in kernel:
            taps = taps * k
        _check_same(call, offset.shape[1], offset_groups * taps * n, analyzer,
                    f"offset {fmt_sinfo(offset)} needs offset_groups * prod(kernel) * {n} channels")
    return TensorStructInfo((batch, out_channels, *out), data.dtype, vdevice=vdevice)


register_op("nn.deform_conv", infer=_infer_deform_conv, num_args=(3, 4), attrs={
    "strides": 1, "padding": 0, "dilation": 1, "groups": 1, "offset_groups": 1,
}, doc="Deformable convolution: taps moved by offset (N, G*K*n, *out), scaled by an optional mask (ONNX DeformConv).")
