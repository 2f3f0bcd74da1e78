"""Resize, Upsample and Pad.

Resize's output size comes from ``sizes`` (constant, or computed from
``Shape`` so it may hold symbolic dims) or from constant ``scales``: each
output dim is ``floor(dim * scale)``. For a symbolic ``dim`` that is
``dim * k`` for an integer scale ``k``, and ``dim // k`` for a scale of
``1 / k``: the float32 nearest ``1 / k`` must not be below it, and then
``floor(dim * scale) == dim // k`` holds for dims below a limit of about
``2**24 / k``, which must exceed the dim's declared upper bound (or, with no
bound declared, be at least 2**20). Any other scale is exactly ``p / q``
(a float is a dyadic fraction): ``dim * p // q``. The op keeps the scales it was given, because ONNX's
coordinate transform divides by them, not by output / input.
Data-dependent ``scales``/``sizes`` (or a tf_crop_and_resize ``roi``),
computed from tensor values, go through the packed kernel ``dyn.resize``:
it computes the output size at run time and the resized axes get fresh
dims. Data-dependent ``pads`` call the packed kernel ``dyn.pad``, whose
result is ``match_cast`` to fresh dims on the padded axes.

Opset 10's Resize and Upsample follow onnxruntime: asymmetric coordinates,
and nearest rounds down on upsampled axes and up on downsampled ones.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ....ir.dims import Dim
from ....ir.expr import ShapeExpr
from ....ops.registry import make_call
from ....runtime.dtypes import numpy_dtype
from ..registry import register_converter
from ..value import Value
from . import _unknown_rank as unknown_rank
from ._dynamic import packed_call
from ._shape_common import (
    const_ints, fmt_dims, known_ints, norm_axes, of_rank, runtime_length, shape_error, shape_expr, shaped,
    unsupported,
)

# ---------------------------------------------------------------- Resize (opset 11+)

_METHODS = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}
_MODES_11 = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize",
             "tf_half_pixel_for_nn"}
#: the spec drops tf_half_pixel_for_nn at opset 13; onnxruntime keeps it (with a warning), and
#: tf2onnx writes it at every opset for TF2's nearest resize (half_pixel_centers)
_MODES_13 = _MODES_11
_MODES_19 = _MODES_13 | {"half_pixel_symmetric"}
_NEAREST_MODES = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}
#: without a declared bound, symbolic dims are assumed below this size (see _scaled_dim)
_MIN_EXACT_DIM = 2 ** 20


@register_converter("", "Resize", since_opset=11)
def resize_v11(ctx, x, roi=None, scales=None, sizes=None, *, coordinate_transformation_mode="half_pixel",
               cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, mode="nearest",
               nearest_mode="round_prefer_floor"):
    return _resize(ctx, x, roi, scales, sizes, _MODES_11, coordinate_transformation_mode, cubic_coeff_a,
                   exclude_outside, extrapolation_value, mode, nearest_mode)


@register_converter("", "Resize", since_opset=13)
def resize_v13(ctx, x, roi=None, scales=None, sizes=None, *, coordinate_transformation_mode="half_pixel",
               cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, mode="nearest",
               nearest_mode="round_prefer_floor"):
    return _resize(ctx, x, roi, scales, sizes, _MODES_13, coordinate_transformation_mode, cubic_coeff_a,
                   exclude_outside, extrapolation_value, mode, nearest_mode)


@register_converter("", "Resize", since_opset=18)
def resize_v18(ctx, x, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
               coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
               extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
               nearest_mode="round_prefer_floor"):
    return _resize(ctx, x, roi, scales, sizes, _MODES_13, coordinate_transformation_mode, cubic_coeff_a,
                   exclude_outside, extrapolation_value, mode, nearest_mode, antialias, axes,
                   keep_aspect_ratio_policy)


@register_converter("", "Resize", since_opset=19)
def resize_v19(ctx, x, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
               coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
               extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
               nearest_mode="round_prefer_floor"):
    return _resize(ctx, x, roi, scales, sizes, _MODES_19, coordinate_transformation_mode, cubic_coeff_a,
                   exclude_outside, extrapolation_value, mode, nearest_mode, antialias, axes,
                   keep_aspect_ratio_policy)


def _resize(ctx, x: Value, roi, scales, sizes, modes, coord_mode, cubic_coeff_a, exclude_outside,
            extrapolation_value, mode, nearest_mode, antialias=0, axes=None, keep_aspect_ratio_policy="stretch"):
    method = _method(ctx, mode)
    if coord_mode not in modes:
        raise unsupported(ctx, f"coordinate_transformation_mode {coord_mode!r} (this opset has "
                               f"{', '.join(sorted(modes))})")
    if nearest_mode not in _NEAREST_MODES:
        raise unsupported(ctx, f"nearest_mode {nearest_mode!r} (expected one of {', '.join(sorted(_NEAREST_MODES))})")
    if antialias and method == "nearest_neighbor":
        raise unsupported(ctx, "antialias=1 needs mode 'linear' or 'cubic', not 'nearest'")
    if axes is None:
        x = _of_target_rank(ctx, x, scales, sizes)
    x = shaped(ctx, x)
    shape = x.shape
    axes = tuple(range(len(shape))) if axes is None else norm_axes(ctx, axes, len(shape))
    crop = coord_mode == "tf_crop_and_resize"
    if _at_run_time(scales) or _at_run_time(sizes) or (crop and _at_run_time(roi)):
        return _resize_at_run_time(ctx, x, axes, scales, sizes, roi if crop else None, keep_aspect_ratio_policy,
                                   method=method, coordinate_transformation_mode=coord_mode,
                                   rounding_method=nearest_mode, cubic_alpha=float(cubic_coeff_a),
                                   cubic_exclude=bool(exclude_outside), antialias=bool(antialias),
                                   extrapolation_value=float(extrapolation_value))
    scale_list = _floats(ctx, scales, "scales")
    size_list = None if _empty(sizes) else known_ints(ctx, sizes, "sizes")
    if (scale_list is None) == (size_list is None):
        raise shape_error(ctx, "needs exactly one of the inputs scales and sizes")
    given = scale_list if scale_list is not None else size_list
    if len(given) != len(axes):
        raise shape_error(ctx, f"{'scales' if scale_list is not None else 'sizes'} {fmt_dims(given)} need one "
                               f"value per resized axis {axes} of shape {fmt_dims(shape)}")
    roi_pairs = [None] * len(axes)
    if coord_mode == "tf_crop_and_resize":
        values = _floats(ctx, roi, "roi")
        if values is None or len(values) != 2 * len(axes):
            raise shape_error(ctx, f"tf_crop_and_resize needs a constant roi of {2 * len(axes)} values "
                                   f"(starts, then ends), got {values}")
        roi_pairs = list(zip(values[:len(axes)], values[len(axes):]))
    if scale_list is not None:
        dims = [_scaled_dim(ctx, shape[a], s) for a, s in zip(axes, scale_list)]
        used = list(scale_list)
        identity = [s == 1.0 for s in scale_list]
    else:
        dims, used = _sized_dims(ctx, [shape[a] for a in axes], size_list, keep_aspect_ratio_policy)
        analyzer = ctx.bb.analyzer
        identity = [(u is None or u == 1.0) and (d == shape[a] or analyzer.prove_equal(d, shape[a]))
                    for a, d, u in zip(axes, dims, used)]
    keep = [i for i in range(len(axes)) if not identity[i] or roi_pairs[i] not in (None, (0.0, 1.0))]
    if not keep:
        return x
    call_roi = None
    if coord_mode == "tf_crop_and_resize":
        call_roi = tuple(roi_pairs[i][0] for i in keep) + tuple(roi_pairs[i][1] for i in keep)
    return make_call("image.resize", ctx.expr(x), shape_expr([dims[i] for i in keep]),
                     axes=tuple(axes[i] for i in keep),
                     scales=None if any(used[i] is None for i in keep) else tuple(used[i] for i in keep),
                     roi=call_roi, method=method, coordinate_transformation_mode=coord_mode,
                     rounding_method=nearest_mode, cubic_alpha=float(cubic_coeff_a),
                     cubic_exclude=bool(exclude_outside), antialias=bool(antialias),
                     extrapolation_value=float(extrapolation_value))


def _method(ctx, mode: str) -> str:
    method = _METHODS.get(mode)
    if method is None:
        raise unsupported(ctx, f"mode {mode!r} (expected 'nearest', 'linear' or 'cubic')")
    return method


def _empty(value: Value | None) -> bool:
    """An omitted optional input, or one given as an empty tensor (Resize-11's way)."""
    return value is None or (value.shape is not None and len(value.shape) == 1 and value.shape[0] == 0)


def _floats(ctx, value: Value | None, what: str) -> list[float] | None:
    """The contents of a float input that must be constant (None if omitted or empty)."""
    if _empty(value):
        return None
    if value.const is None:
        raise unsupported(ctx, f"{what} must be a constant (the output shape must be known at import "
                               f"time); a data-dependent {what} is not supported")
    if value.const.dtype.kind != "f":
        raise shape_error(ctx, f"{what} must be floats, got {value.dtype}")
    return [float(v) for v in value.const.reshape(-1)]


def _at_run_time(value: Value | None) -> bool:
    """A given input whose contents are known only at run time (not constant,
    not computed from shapes)."""
    return not _empty(value) and value.const is None and value.sym is None


def _resize_at_run_time(ctx, x: Value, axes, scales, sizes, roi, policy: str, legacy: bool = False, **attrs):
    """Resize through the packed kernel ``dyn.resize``, which computes the
    output size from the run-time scales or sizes (and takes a run-time roi);
    the resized axes get fresh dims, unless constant sizes fix them."""
    if _empty(scales) == _empty(sizes):
        raise shape_error(ctx, "needs exactly one of the inputs scales and sizes")
    given, given_is = (sizes, "sizes") if _empty(scales) else (scales, "scales")
    wrong_rank = given.shape is not None and len(given.shape) != 1
    if wrong_rank or (given.shape is not None and isinstance(given.shape[0], int) and given.shape[0] != len(axes)):
        raise shape_error(ctx, f"{given_is} of shape {fmt_dims(given.shape)} need one value per resized "
                               f"axis {axes}")
    if given_is == "scales" and given.dtype is not None and not given.dtype.startswith(("float", "bfloat")):
        raise shape_error(ctx, f"scales must be floats, got {given.dtype}")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise unsupported(ctx, f"keep_aspect_ratio_policy {policy!r} (expected stretch, not_larger, not_smaller)")
    if attrs["coordinate_transformation_mode"] == "tf_crop_and_resize" and _empty(roi):
        raise shape_error(ctx, f"tf_crop_and_resize needs a roi of {2 * len(axes)} values (starts, then ends)")
    known = given.int_values() if given_is == "sizes" and policy == "stretch" else None
    dims: list[Dim | None] = list(x.shape)
    for i, axis in enumerate(axes):
        dims[axis] = None if known is None else known[i]
    inputs = [x, given] + ([] if roi is None else [roi])
    return packed_call(ctx, "dyn.resize", inputs, [(dims, x.dtype)], "resized", given_is=given_is,
                       axes=tuple(axes), policy=policy, legacy=legacy, **attrs)


def _scaled_dim(ctx, dim: Dim, scale: float) -> Dim:
    """``floor(dim * scale)``, ONNX's output dim for a scale. On a symbolic
    dim: ``dim * k`` or ``dim // k`` when that is exact for the dim's range,
    else ``dim * p // q`` with ``scale == p / q`` exactly (a float is a
    dyadic fraction), which is floor(dim * scale) for every dim (onnx's
    reference, in float64, agrees while ``dim * p < 2**53``)."""
    if not (0 < scale < math.inf):
        raise shape_error(ctx, f"scale {scale} must be positive and finite")
    if isinstance(dim, int):
        return int(math.floor(dim * scale))   # in float64, like onnx's reference
    if scale.is_integer():
        return dim * int(scale)
    k = round(1 / scale)
    excess = Fraction(scale) * k - 1      # scale == (1 + excess) / k
    if k > 1 and excess >= 0:
        limit = math.inf if excess == 0 else 1 / (k * excess)   # floor(dim * scale) == dim // k below it
        upper = ctx.bb.analyzer.upper_bound(dim)
        if (upper < limit) if upper is not None else (limit >= _MIN_EXACT_DIM):
            return dim // k
    exact = Fraction(scale)
    return (dim * exact.numerator) // exact.denominator


def _sized_dims(ctx, in_dims, sizes, policy: str) -> tuple[list[Dim], list[float | None]]:
    """Output dims and scales (None: output / input, computed at run time) for ``sizes``."""
    if any(isinstance(s, int) and s < 0 for s in sizes):
        raise shape_error(ctx, f"sizes {fmt_dims(sizes)} must not be negative")
    if policy == "stretch":
        return list(sizes), [None] * len(sizes)
    if policy not in ("not_larger", "not_smaller"):
        raise unsupported(ctx, f"keep_aspect_ratio_policy {policy!r} (expected stretch, not_larger, not_smaller)")
    if not all(isinstance(d, int) and d > 0 for d in in_dims) or not all(isinstance(s, int) for s in sizes):
        raise unsupported(ctx, f"keep_aspect_ratio_policy {policy!r} needs static, nonzero input dims and "
                               f"sizes; got dims {fmt_dims(in_dims)} and sizes {fmt_dims(sizes)}")
    ratios = [s / d for s, d in zip(sizes, in_dims)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    return [int(scale * d + 0.5) for d in in_dims], [scale] * len(in_dims)


# ---------------------------------------------------------------- Resize-10, Upsample


@register_converter("", "Upsample", since_opset=1)
def upsample_v1(ctx, x, *, height_scale=None, width_scale=None, mode="nearest"):
    """Opset 1: a 4-D NCHW input, scales for H and W, modes nearest and
    bilinear (opset 7's "linear")."""
    if height_scale is None or width_scale is None:
        raise shape_error(ctx, "needs the attributes height_scale and width_scale")
    x = shaped(ctx, x)
    if len(x.shape) != 4:
        raise shape_error(ctx, f"opset 1 upsamples a 4-D NCHW input, got rank {len(x.shape)}")
    if mode not in ("nearest", "bilinear"):
        raise shape_error(ctx, f"mode must be nearest or bilinear, got {mode!r}")
    scales = [1.0, 1.0, float(height_scale), float(width_scale)]
    return _resize_v10(ctx, x, scales, "linear" if mode == "bilinear" else mode)


@register_converter("", "Upsample", since_opset=7)
def upsample_v7(ctx, x, *, scales, mode="nearest"):
    return _resize_v10(ctx, x, [float(s) for s in scales], mode)


@register_converter("", "Upsample", since_opset=9)
def upsample_v9(ctx, x, scales, *, mode="nearest"):
    return _resize_v10(ctx, x, scales, mode)


@register_converter("", "Resize", since_opset=10)
def resize_v10(ctx, x, scales, *, mode="nearest"):
    return _resize_v10(ctx, x, scales, mode)


def _of_target_rank(ctx, x: Value, *targets) -> Value:
    """``x`` of unknown rank cast to the rank of Resize's scales or sizes (one
    value per axis; the run checks it); else ``x`` as it is."""
    if x.ndim >= 0:
        return x
    for target in targets:
        if isinstance(target, (list, tuple)) and target:
            return of_rank(ctx, x, len(target))
        if isinstance(target, Value) and not _empty(target) and target.ndim == 1 \
                and isinstance(target.shape[0], int):
            return of_rank(ctx, x, target.shape[0])
    return x


def _resize_v10(ctx, x: Value, scales: list[float] | Value, mode: str):
    method = _method(ctx, mode)
    if method == "cubic":
        raise unsupported(ctx, "mode 'cubic' needs opset 11")
    x = shaped(ctx, _of_target_rank(ctx, x, scales))
    shape = x.shape
    if isinstance(scales, Value) and _at_run_time(scales):
        return _resize_at_run_time(ctx, x, tuple(range(len(shape))), scales, None, None, "stretch", legacy=True,
                                   method=method, coordinate_transformation_mode="asymmetric")
    if isinstance(scales, Value) or scales is None:
        scales = _floats(ctx, scales, "scales")
    if scales is None or len(scales) != len(shape):
        raise shape_error(ctx, f"scales {scales} need one value per axis of shape {fmt_dims(shape)}")
    dims = [_scaled_dim(ctx, d, s) for d, s in zip(shape, scales)]
    resized = [a for a, s in enumerate(scales) if s != 1.0]
    # onnxruntime's nearest rounds i / scale down when upsampling and up when
    # downsampling: one call per rounding (nearest is separable and exact).
    groups = [("floor", resized)] if method == "linear" else \
        [("ceil", [a for a in resized if scales[a] < 1]), ("floor", [a for a in resized if scales[a] > 1])]
    result = x
    for rounding, axes in groups:
        if not axes:
            continue
        call = make_call("image.resize", ctx.expr(result), shape_expr([dims[a] for a in axes]),
                         axes=tuple(axes), scales=tuple(scales[a] for a in axes), method=method,
                         coordinate_transformation_mode="asymmetric", rounding_method=rounding)
        result = ctx.emit(call, "resize")
    return result


# ---------------------------------------------------------------- Pad


@register_converter("", "Pad", since_opset=1)
def pad_v1(ctx, data, *, paddings, mode="constant", value=0.0):
    return _pad(ctx, data, tuple(paddings), None, mode, value, None)


@register_converter("", "Pad", since_opset=2)
def pad_v2(ctx, data, *, pads, mode="constant", value=0.0):
    return _pad(ctx, data, tuple(pads), None, mode, value, None)


@register_converter("", "Pad", since_opset=11)
def pad_v11(ctx, data, pads, constant_value=None, *, mode="constant"):
    return _pad_input(ctx, data, pads, None, mode, constant_value)


@register_converter("", "Pad", since_opset=18)
def pad_v18(ctx, data, pads, constant_value=None, axes=None, *, mode="constant"):
    return _pad_input(ctx, data, pads, axes, mode, constant_value)


@register_converter("", "Pad", since_opset=19)
def pad_v19(ctx, data, pads, constant_value=None, axes=None, *, mode="constant"):
    return _pad_input(ctx, data, pads, axes, mode, constant_value, modes=("constant", "reflect", "edge", "wrap"))


def _pad_input(ctx, data: Value, pads: Value, axes: Value | None, mode: str, value_input: Value | None,
               modes=("constant", "reflect", "edge")):
    """Pad with ``pads`` (and ``axes``) as inputs: used at import time when
    they are constant, else a packed ``dyn.pad`` that keeps the dims of the
    axes it provably does not pad."""
    if const_ints(pads) is not None and (axes is None or const_ints(axes) is not None):
        return _pad(ctx, data, const_ints(pads), const_ints(axes), mode, 0, value_input, modes)
    if mode not in modes:
        raise unsupported(ctx, f"mode {mode!r} (this opset has {', '.join(modes)})")
    if data.ndim < 0 and axes is None and runtime_length(ctx, pads, "pads", unknown_ok=True) is not None:
        data = of_rank(ctx, data, _pads_rank(ctx, runtime_length(ctx, pads, "pads")))
    if data.ndim < 0:
        fill, more = _fill(data, value_input)
        return unknown_rank.pad(ctx, data, pads, axes, more, mode, fill)
    data = shaped(ctx, data)
    if pads.int_values() is not None and (axes is None or const_ints(axes) is not None):
        return _symbolic_pad(ctx, data, pads, axes, mode, value_input)
    count = runtime_length(ctx, pads, "pads")
    padded = range(data.ndim) if axes is None else const_ints(axes)
    if padded is None:
        shape = (None,) * data.ndim
    else:
        padded = norm_axes(ctx, padded, data.ndim)
        if count != 2 * len(padded):
            raise shape_error(ctx, f"pads has {count} values, not {2 * len(padded)} (begins, then ends) for "
                                   f"axes {padded}")
        shape = tuple(None if i in padded else d for i, d in enumerate(data.shape))
    fill, more = _pad_fill(data, mode, value_input)
    if axes is not None:
        more["axes"] = axes
    return packed_call(ctx, "dyn.pad", [data, pads, *more.values()], [(shape, data.dtype)], "pad",
                       parts=tuple(more), pad_mode=mode, pad_value=fill if mode == "constant" else 0)


def _pad_fill(data: Value, mode: str, value_input: Value | None) -> tuple:
    """Pad's constant fill (0 unless a constant value is given) and, when the
    value is only known at run time, ``{"value": value_input}`` to pass on."""
    if mode == "constant" and not _empty(value_input):
        if value_input.const is None:
            return _scalar(0, data.dtype), {"value": value_input}
        return _scalar(value_input.const.reshape(-1)[0], data.dtype), {}
    return _scalar(0, data.dtype), {}


def _symbolic_pad(ctx, data: Value, pads: Value, axes_input: Value | None, mode: str, value_input: Value | None):
    """Pads computed from shapes (``(8 - h % 8) % 8``, a detector's pad to its
    stride): each padded dim is ``d + begin + end``, exact. A constant fill is
    ``dynamic_pad`` (the amounts a shape value evaluated at run time); the
    other modes, or a fill computed at run time, call ``dyn.pad`` with those
    dims, which the run checks."""
    rank = len(data.shape)
    axes = tuple(range(rank)) if axes_input is None else norm_axes(ctx, const_ints(axes_input), rank)
    amounts = pads.int_values()
    if len(amounts) != 2 * len(axes):
        raise shape_error(ctx, f"pads has {len(amounts)} values, not {2 * len(axes)} (begins, then ends) for "
                               f"axes {axes}")
    full: list[Dim] = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        full[axis], full[rank + axis] = amounts[i], amounts[len(axes) + i]
    fill, more = _pad_fill(data, mode, value_input)
    if mode == "constant" and not more:
        return make_call("dynamic_pad", ctx.expr(data), ShapeExpr(tuple(full)), pad_value=fill)
    if axes_input is not None:
        more["axes"] = axes_input
    shape = tuple(d + full[i] + full[rank + i] for i, d in enumerate(data.shape))
    return packed_call(ctx, "dyn.pad", [data, pads, *more.values()], [(shape, data.dtype)], "pad",
                       parts=tuple(more), pad_mode=mode, pad_value=fill if mode == "constant" else 0)


def _pad(ctx, data: Value, pads, axes, mode: str, value, value_input: Value | None,
         modes=("constant", "reflect", "edge")):
    if mode not in modes:
        raise unsupported(ctx, f"mode {mode!r} (this opset has {', '.join(modes)})")
    if data.ndim < 0 and axes is None and pads is not None:     # the pads say the rank (the run checks it)
        data = of_rank(ctx, data, _pads_rank(ctx, len(pads)))
    if data.ndim < 0:
        fill, more = _fill(data, value_input, value)
        return unknown_rank.pad(ctx, data, ctx.const(np.array(pads, np.int64)), ctx.const(np.array(axes, np.int64)),
                                more, mode, fill)
    data = shaped(ctx, data)
    rank = len(data.shape)
    axes = tuple(range(rank)) if axes is None else norm_axes(ctx, axes, rank)
    if pads is None or len(pads) != 2 * len(axes):
        raise shape_error(ctx, f"pads {pads} need {2 * len(axes)} values (begins, then ends) for axes {axes}")
    full = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        full[axis], full[rank + axis] = int(pads[i]), int(pads[len(axes) + i])
    if not any(full):
        return data
    args = [ctx.expr(data)]
    fill = _scalar(value, data.dtype)
    if mode == "constant" and not _empty(value_input):
        if value_input.const is not None:
            fill = _scalar(value_input.const.reshape(-1)[0], data.dtype)
        else:
            args.append(ctx.expr(value_input))
    return make_call("pad", *args, pads=tuple(full), pad_mode=mode, pad_value=fill if mode == "constant" else 0)


def _pads_rank(ctx, count: int) -> int:
    """The rank that ``count`` pads (every axis's begin, then its end) are for."""
    if count % 2:
        raise shape_error(ctx, f"pads has {count} values: an even count is needed (begins, then ends)")
    return count // 2


def _fill(data: Value, value_input: Value | None, value=0) -> tuple:
    """The constant fill as a plain scalar, or ``{"value": input}`` when only the run knows it."""
    if _empty(value_input):
        return _scalar(value, data.dtype), {}
    if value_input.const is not None:
        return _scalar(value_input.const.reshape(-1)[0], data.dtype), {}
    return _scalar(0, data.dtype), {"value": value_input}


def _scalar(value, dtype: str | None):
    """``value`` as a plain Python scalar of the data's kind (Pad-2's float
    ``value`` on integer data becomes an int, as a cast to the data would)."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if dtype == "string" or isinstance(value, str):
        return str(value)
    if dtype is None:
        return np.asarray(value).item()
    return np.asarray(value).astype(numpy_dtype(dtype)).item()
