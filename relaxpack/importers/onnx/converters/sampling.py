"""GridSample, RoiAlign, MaxRoiPool and DeformConv: ops that sample at computed positions.

GridSample-16 spells the modes ``bilinear``/``bicubic`` and takes 4-D input
only; opset 20 renames them ``linear``/``cubic`` and allows any number of
spatial dims. The IR op uses the later names.
"""

from __future__ import annotations

from ....ops.registry import make_call
from ..registry import register_converter
from ._math_common import spatial_attr
from ._shape_common import shape_error, unsupported
from .nn import _add_bias, _kernel, _pads, _spatial_rank

# ---------------------------------------------------------------- GridSample

_GRID_MODES_16 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
_GRID_MODES_20 = {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}
_PADDING_MODES = ("zeros", "border", "reflection")


@register_converter("", "GridSample", since_opset=16)
def grid_sample_v16(ctx, x, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    """GridSample-16 says 4-D input; onnxruntime samples 5-D (volumes) too, as opset 20 does, and
    paddle2onnx writes ``F.grid_sample`` of a volume at 16: so does relaxpack."""
    return _grid_sample(ctx, x, grid, align_corners, mode, padding_mode, _GRID_MODES_16)


@register_converter("", "GridSample", since_opset=20)
def grid_sample_v20(ctx, x, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    return _grid_sample(ctx, x, grid, align_corners, mode, padding_mode, _GRID_MODES_20)


def _grid_sample(ctx, x, grid, align_corners, mode: str, padding_mode: str, modes: dict[str, str]):
    if mode not in modes:
        raise unsupported(ctx, f"mode {mode!r} (this opset has {', '.join(modes)})")
    if padding_mode not in _PADDING_MODES:
        raise unsupported(ctx, f"padding_mode {padding_mode!r} (expected one of {', '.join(_PADDING_MODES)})")
    return make_call("image.grid_sample", ctx.expr(x), ctx.expr(grid), method=modes[mode],
                     padding_mode=padding_mode, align_corners=bool(align_corners))


# ---------------------------------------------------------------- RoiAlign


@register_converter("", "RoiAlign", since_opset=10)
def roi_align_v10(ctx, x, rois, batch_indices, *, mode="avg", output_height=1, output_width=1, sampling_ratio=0,
                  spatial_scale=1.0):
    """RoiAlign-10 has no coordinate_transformation_mode: its boxes are not
    shifted by half a pixel (what opset 16 calls output_half_pixel)."""
    return _roi_align(ctx, x, rois, batch_indices, "output_half_pixel", mode, output_height, output_width,
                      sampling_ratio, spatial_scale)


@register_converter("", "RoiAlign", since_opset=16)
def roi_align_v16(ctx, x, rois, batch_indices, *, coordinate_transformation_mode="half_pixel", mode="avg",
                  output_height=1, output_width=1, sampling_ratio=0, spatial_scale=1.0):
    return _roi_align(ctx, x, rois, batch_indices, coordinate_transformation_mode, mode, output_height,
                      output_width, sampling_ratio, spatial_scale)


def _roi_align(ctx, x, rois, batch_indices, coord_mode, mode, out_h, out_w, sampling_ratio, spatial_scale):
    if mode not in ("avg", "max"):
        raise unsupported(ctx, f"mode {mode!r} (expected 'avg' or 'max')")
    if coord_mode not in ("half_pixel", "output_half_pixel"):
        raise unsupported(ctx, f"coordinate_transformation_mode {coord_mode!r} (expected 'half_pixel' or "
                               f"'output_half_pixel')")
    if out_h < 1 or out_w < 1 or sampling_ratio < 0:
        raise shape_error(ctx, f"output_height {out_h} and output_width {out_w} must be positive, "
                               f"sampling_ratio {sampling_ratio} non-negative")
    return make_call("image.roi_align", ctx.expr(x), ctx.expr(rois), ctx.expr(batch_indices),
                     output_size=(int(out_h), int(out_w)), sampling_ratio=int(sampling_ratio),
                     spatial_scale=float(spatial_scale), mode=mode, coordinate_transformation_mode=coord_mode)


# ---------------------------------------------------------------- MaxRoiPool


@register_converter("", "MaxRoiPool", since_opset=1)
def max_roi_pool(ctx, x, rois, *, pooled_shape=None, spatial_scale=1.0):
    """MaxRoiPool-1 and -22 differ only in the dtypes they allow."""
    if pooled_shape is None or len(pooled_shape) != 2 or min(pooled_shape) < 1:
        raise shape_error(ctx, f"pooled_shape must be two positive ints (height, width), got {pooled_shape!r}")
    return make_call("image.max_roi_pool", ctx.expr(x), ctx.expr(rois),
                     pooled_shape=tuple(int(v) for v in pooled_shape), spatial_scale=float(spatial_scale))


# ---------------------------------------------------------------- DeformConv


@register_converter("", "DeformConv", since_opset=19)
def deform_conv(ctx, x, w, offset, b=None, mask=None, *, dilations=None, group=1, kernel_shape=None,
                offset_group=1, pads=None, strides=None):
    """Deformable convolution; the bias is added per channel afterwards, as for Conv."""
    n = _spatial_rank(ctx, x, w)
    kernel = _kernel(ctx, kernel_shape, w, n)
    if not all(isinstance(k, int) for k in kernel):
        raise unsupported(ctx, f"a symbolic kernel shape {kernel}")
    args = [ctx.expr(x), ctx.expr(w), ctx.expr(offset)] + ([ctx.expr(mask)] if mask is not None else [])
    out = make_call("nn.deform_conv", *args, strides=spatial_attr(ctx, strides, n, 1, "strides"),
                    padding=_pads(ctx, pads, n), dilation=spatial_attr(ctx, dilations, n, 1, "dilations"),
                    groups=int(group), offset_groups=int(offset_group))
    return _add_bias(ctx, out, b, n + 2)
