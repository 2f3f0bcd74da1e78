"""Image-style kernels: image.resize and pad.

Resize is separable: each resized axis in turn maps every output position to
a source coordinate (the coordinate transformation mode), picks a few source
indices around it and their weights (nearest / linear / cubic, optionally
antialiased), and sums the gathered slices. The weights and indices are
computed per axis, never per pixel. The arithmetic follows onnx's reference
implementation (``onnx.reference.ops.op_resize``) step by step, in float64
(float32 for float32 data and results: within an ulp or two, twice as fast),
so both round alike; integer results are rounded half to even and clipped to
the dtype's range, as ONNX's saturating cast does.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ...errors import ShapeError
from ._math import normalize_axis
from ._workspace import Scratch
from ._registry import register_kernel
from . import resize_dense, resize_gather, resize_lanes

# ---------------------------------------------------------------- image.resize


def _source_coords(mode: str, out_w: int, in_w: int, scale: float, roi) -> tuple[np.ndarray, np.ndarray | None]:
    """Each output position's coordinate in the input; for tf_crop_and_resize
    also the mask of positions outside the input (they get the extrapolation
    value). ``length`` is ONNX's ``output_width``: the unrounded
    ``scale * in_w`` the spec writes its formulas with."""
    y = np.arange(out_w, dtype=np.float64)
    length = scale * in_w
    outside = None
    if mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_w / 2 * (1 - out_w / length)
        x = offset + (y + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        x = np.full(out_w, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    elif mode == "align_corners":
        x = np.zeros(out_w) if length == 1 else y * (in_w - 1) / (length - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif mode == "tf_crop_and_resize":
        # ONNX's roi is float32 data: its products round to float32, as in the reference
        start, end = np.float32(roi[0]), np.float32(roi[1])
        if length == 1:
            x = np.full(out_w, (end - start) * (in_w - 1) / 2)
        else:
            x = y * (end - start) * (in_w - 1) / (length - 1)
        x = x + start * (in_w - 1)
        outside = (x < 0) | (x > in_w - 1)
    else:
        raise ShapeError(f"image.resize: unknown coordinate_transformation_mode {mode!r}")
    return x, outside


def _nearest_weights(ratio: np.ndarray, rounding: str) -> np.ndarray:
    # Between the two neighbors floor(x) and floor(x) + 1 (ratio 1 marks an
    # exact x, whose window is [x - 1, x]: the right one is x itself).
    if rounding == "round_prefer_floor":
        right = ratio > 0.5
    elif rounding == "round_prefer_ceil":
        right = ratio >= 0.5
    elif rounding == "floor":
        right = np.zeros(ratio.shape, bool)
    elif rounding == "ceil":
        right = np.ones(ratio.shape, bool)
    else:
        raise ShapeError(f"image.resize: unknown rounding_method {rounding!r}")
    right |= ratio == 1.0
    return np.stack([~right, right], axis=1).astype(np.float64)


def _cubic(r: np.ndarray, a: float) -> np.ndarray:
    # ONNX's float attribute a is a float32, and onnx's reference (like
    # onnxruntime) evaluates the cubic weights in float32: so do we, so that
    # integer results round alike. Each distance is rounded to float32 once.
    a = np.float32(a)
    t, r32, s, u = (v.astype(np.float32) for v in (r + 1, r, 1 - r, (1 - r) + 1))
    return np.stack([
        ((a * t - 5 * a) * t + 8 * a) * t - 4 * a,
        ((a + 2) * r32 - (a + 3)) * r32 * r32 + 1,
        ((a + 2) * s - (a + 3)) * s * s + 1,
        ((a * u - 5 * a) * u + 8 * a) * u - 4 * a,
    ], axis=1).astype(np.float64)


def _cubic_antialias(r: np.ndarray, scale: float, a: float) -> np.ndarray:
    scale = min(scale, 1.0)
    start = int(np.floor(-2 / scale) + 1)
    x = np.abs(scale * (np.arange(start, 2 - start)[None, :] - r[:, None]))
    a = np.float32(a)
    x1, x2, x3 = (v.astype(np.float32) for v in (x, x * x, x * (x * x)))   # float32 weights, as _cubic
    w = np.where(x <= 1, (a + 2) * x3 - (a + 3) * x2 + 1,
                 np.where(x < 2, a * x3 - 5 * a * x2 + 8 * a * x1 - 4 * a, np.float32(0))).astype(np.float64)
    return w / w.sum(axis=1, keepdims=True)


def _linear_antialias(r: np.ndarray, scale: float) -> np.ndarray:
    scale = min(scale, 1.0)
    start = int(np.floor(-1 / scale) + 1)
    x = (np.arange(start, 2 - start)[None, :] - r[:, None]) * scale
    w = np.clip(1 - np.abs(x), 0, 1)
    return w / w.sum(axis=1, keepdims=True)


def _taps(x: np.ndarray, in_w: int, scale: float, method: str, rounding: str, cubic_alpha: float,
          exclude_outside: bool, antialias: bool) -> tuple[np.ndarray, np.ndarray]:
    """The source indices (clamped into the axis: edge padding) and weights,
    both (out_w, n), for source coordinates ``x``."""
    floor = np.floor(x)
    ratio = np.where(x == floor, 1.0, x - floor)   # in (0, 1]: prefer the pixel left of x
    if method == "nearest_neighbor":
        weights = _nearest_weights(ratio, rounding)
    elif method == "linear":
        weights = _linear_antialias(ratio, scale) if antialias else np.stack([1 - ratio, ratio], axis=1)
    elif method == "cubic":
        weights = _cubic_antialias(ratio, scale, cubic_alpha) if antialias else _cubic(ratio, cubic_alpha)
    else:
        raise ShapeError(f"image.resize: unknown method {method!r}")
    n = weights.shape[1]
    # The n indices nearest to x, ties to the smaller one (the reference's
    # neighbor search, on an edge-padded axis). Taken from the same floor(x)
    # as the weights: floor(x + pad) rounds x + pad first (3.0000000000000004
    # + 1 is 4.0), which put the weights of taps (3, 4) on taps (2, 3) and
    # made a linear Resize return a neighbor's value (Mask R-CNN's paste).
    frac = x - floor
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), 1 - n // 2)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), 1 - (n - 1) // 2)
    index = (floor.astype(np.int64) + offset)[:, None] + np.arange(n)[None, :]
    if exclude_outside:
        weights = np.where((index < 0) | (index >= in_w), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(index, 0, in_w - 1), weights


@functools.lru_cache(maxsize=256)
def _axis_taps(mode: str, out_w: int, in_w: int, scale: float, roi, method: str, rounding: str,
               cubic_alpha: float, exclude_outside: bool, antialias: bool):
    """(indices, weights, outside mask or None, nearest's one index per output or None) of an
    axis: functions of these numbers alone, worked out once per distinct set (a model resizes
    the same dims call after call); read-only arrays."""
    x, outside = _source_coords(mode, out_w, in_w, scale, roi)
    index, weights = _taps(x, in_w, scale, method, rounding, cubic_alpha, exclude_outside, antialias)
    nearest = index[np.arange(out_w), weights.argmax(axis=1)] if method == "nearest_neighbor" else None
    for a in (index, weights, outside, nearest):
        if a is not None:
            a.setflags(write=False)
    return index, weights, outside, nearest


def _saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 ``values`` as ``dtype``: integers rounded half to even and clipped."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.round(values), info.min, info.max)
    return values


def _along(shape_len: int, axis: int, vector: np.ndarray) -> np.ndarray:
    """``vector`` shaped to broadcast along ``axis`` of a rank-``shape_len`` array."""
    return vector.reshape((1,) * axis + (-1,) + (1,) * (shape_len - axis - 1))


def _resize_axis(data: np.ndarray, axis: int, out_w: int, scale: float | None, roi, attrs,
                 buffers=None) -> np.ndarray:
    """One axis resized; the weighted sum goes into ``buffers`` = (result,
    term) when given (views of the pass's output shape), else new arrays."""
    in_w = data.shape[axis]
    if out_w == 0:
        return np.take(data, np.zeros(0, np.intp), axis=axis)
    if in_w == 0:
        raise ShapeError(f"image.resize: cannot resize the empty axis {axis} to size {out_w}")
    scale = out_w / in_w if scale is None else float(scale)
    mode = attrs["coordinate_transformation_mode"]
    if math.isclose(scale, 1.0) and out_w == in_w and (
            roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0))):
        return data    # the identity, skipped like the reference does
    index, weights, outside, nearest = _axis_taps(mode, out_w, in_w, scale, roi, attrs["method"],
                                                  attrs["rounding_method"], attrs["cubic_alpha"],
                                                  attrs["cubic_exclude"], attrs["antialias"])
    if nearest is not None:
        # one weight is 1: a plain gather keeps every dtype exact
        result = np.take(data, nearest, axis=axis)
    else:
        result, term = buffers if buffers is not None else (None, None)
        for k in range(index.shape[1]):
            # mode="clip": the indices are in range already, and "raise" would buffer out
            if k == 0:
                result = np.take(data, index[:, k], axis=axis, out=result, mode="clip")
                result *= _along(data.ndim, axis, weights[:, k].astype(data.dtype))
                continue
            term = np.take(data, index[:, k], axis=axis, out=term, mode="clip")
            term *= _along(data.ndim, axis, weights[:, k].astype(data.dtype))
            result += term
    if outside is not None and outside.any():
        fill = _saturate(np.float64(attrs["extrapolation_value"]), data.dtype)
        result = np.where(_along(data.ndim, axis, outside), np.asarray(fill).astype(result.dtype), result)
    return result


@register_kernel("image.resize")
def resize(data, size, *, out, axes, scales, roi, method,
           coordinate_transformation_mode, rounding_method,
           cubic_alpha, cubic_exclude, antialias, extrapolation_value):
    """ONNX Resize of ``axes`` to the sizes ``size`` (also ``out``'s dims on
    those axes); ``scales`` (None: ``size / input dim``) drive the coordinate
    transform, ``roi`` (starts, then ends) the crop of tf_crop_and_resize."""
    axes = tuple(normalize_axis(a, data.ndim) for a in axes)
    size = tuple(int(s) for s in size)
    if len(size) != len(axes):
        raise ShapeError(f"image.resize: size {size} must give one dim per resized axis {axes}")
    attrs = dict(method=method, coordinate_transformation_mode=coordinate_transformation_mode,
                 rounding_method=rounding_method, cubic_alpha=float(cubic_alpha),
                 cubic_exclude=bool(cubic_exclude), antialias=bool(antialias),
                 extrapolation_value=extrapolation_value)
    # float32 in and out computes in float32 (within an ulp or two of the
    # float64 result; onnxruntime computes in float32 too), the rest in float64
    if method == "nearest_neighbor" and data.dtype == out.dtype and out.flags.c_contiguous \
            and _nearest_by_repeats(data, out, axes, size, scales, roi, attrs):
        return
    if method != "nearest_neighbor" and data.dtype == out.dtype and data.dtype in _PLANNED \
            and out.flags.c_contiguous:
        key = (data.shape, data.dtype, axes, size, scales, roi, method, coordinate_transformation_mode,
               rounding_method, attrs["cubic_alpha"], attrs["cubic_exclude"], attrs["antialias"])
        dense = _dense_plan(*key)
        if dense is not None and resize_dense.run(dense, data, out):
            return
        plan = _interpolation_plan(*key)
        if plan is not None:
            _run_interpolation(plan, data, out)
            return
    keep = method == "nearest_neighbor" or data.dtype == np.float64 or (
        data.dtype == np.float32 and out.dtype == np.float32)
    result = data if keep else data.astype(np.float64)
    order = _pass_order(data.shape, axes, size, result.dtype == np.float32 and method != "nearest_neighbor")
    if method == "nearest_neighbor" or not order:
        for i in order:
            result = _resize_axis(result, axes[i], size[i], None if scales is None else scales[i],
                                  _axis_roi(roi, i, len(axes)), attrs)
        if result.dtype != out.dtype:
            result = _saturate(result, out.dtype)
        np.copyto(out, result, casting="unsafe")
        return
    # each pass writes a workspace buffer (the last one ``out`` itself when it can)
    shapes, shape = [], list(data.shape)
    for i in order:
        shape[axes[i]] = size[i]
        shapes.append(tuple(shape))
    largest = max(math.prod(s) for s in shapes)
    with Scratch([((largest,), result.dtype)] * 3) as (ping, pong, term):
        for j, i in enumerate(order):
            n = math.prod(shapes[j])
            if j == len(order) - 1 and out.dtype == result.dtype and out.flags.c_contiguous:
                target = out
            else:       # never the buffer the pass reads
                target = (pong if _shares(result, ping) else ping)[:n].reshape(shapes[j])
            result = _resize_axis(result, axes[i], size[i], None if scales is None else scales[i],
                                  _axis_roi(roi, i, len(axes)), attrs, (target, term[:n].reshape(shapes[j])))
        if result is not out:
            if result.dtype != out.dtype:
                result = _saturate(result, out.dtype)
            np.copyto(out, result, casting="unsafe")


def _pass_order(shape: tuple, axes: tuple, size: tuple, reorder: bool) -> list[int]:
    """The order :func:`resize` resizes ``axes`` in: as given, or (``reorder``: float32
    interpolation) growing inner axes first and shrinking ones last. A gather along an inner
    axis costs ~10x one along an outer axis: enlarge the inner axes while the data is small,
    shrink them once it is (the passes are separable; only the rounding order changes, within
    the float32 path's ulps)."""
    order = list(range(len(axes)))
    if reorder:
        grows = [size[i] > shape[axes[i]] for i in order]
        order.sort(key=lambda i: (not grows[i], -axes[i] if grows[i] else axes[i]))
    return order


#: the dtypes :func:`_interpolation_plan` serves (the kernel computes in them as they are)
_PLANNED = (np.dtype(np.float32), np.dtype(np.float64))


@functools.lru_cache(maxsize=256)
def _interpolation_plan(shape: tuple, dtype: np.dtype, axes: tuple, size: tuple, scales, roi, method: str,
                        mode: str, rounding: str, cubic_alpha: float, cubic_exclude: bool, antialias: bool):
    """The passes :func:`resize` makes on float32 / float64 data of this geometry (linear or cubic),
    worked out once: ``(passes, largest)``, each pass ``(axis, shape after it, ((index, weight), ...))``
    with the weights cast and shaped to broadcast along the axis; identity axes have no pass.
    The same calls in the same order as the general path (bit for bit), without its per-call
    Python; None where an axis extrapolates or is empty (the general path)."""
    order = _pass_order(shape, axes, size, dtype == np.float32)
    passes, current, largest = [], list(shape), 1
    for i in order:
        axis, out_w, in_w = axes[i], size[i], shape[axes[i]]
        if out_w == 0 or in_w == 0:
            return None
        scale = out_w / in_w if scales is None else float(scales[i])
        axis_roi = _axis_roi(roi, i, len(axes))
        current[axis] = out_w
        largest = max(largest, math.prod(current))
        if math.isclose(scale, 1.0) and out_w == in_w and (
                axis_roi is None or (math.isclose(axis_roi[0], 0.0) and math.isclose(axis_roi[1], 1.0))):
            continue
        index, weights, outside, _ = _axis_taps(mode, out_w, in_w, scale, axis_roi, method, rounding, cubic_alpha,
                                                cubic_exclude, antialias)
        if outside is not None and outside.any():
            return None
        taps = tuple((np.ascontiguousarray(index[:, k]), _along(len(shape), axis, weights[:, k].astype(dtype)))
                     for k in range(index.shape[1]))
        passes.append((axis, tuple(current), taps))
    return tuple(passes), largest


@functools.lru_cache(maxsize=256)
def _dense_plan(shape: tuple, *key):
    """:func:`_interpolation_plan`'s passes as dense matrix products (:mod:`.resize_dense`), or None."""
    return resize_dense.build(_interpolation_plan(shape, *key), shape)


def _run_interpolation(plan, data: np.ndarray, out: np.ndarray) -> None:
    """:func:`resize`'s passes by ``plan`` (:func:`_interpolation_plan`), the last one into ``out``."""
    passes, largest = plan
    if not passes:
        np.copyto(out, data)
        return
    take, multiply, add = np.take, np.multiply, np.add
    with Scratch([((largest,), data.dtype)] * 3) as (ping, pong, term):
        result = data
        for j, (axis, shape, taps) in enumerate(passes):
            n = math.prod(shape)
            target = out if j == len(passes) - 1 else (pong if _shares(result, ping) else ping)[:n].reshape(shape)
            spare = term[:n].reshape(shape)
            for k, (index, weight) in enumerate(taps):
                if k == 0:
                    take(result, index, axis=axis, out=target, mode="clip")
                    multiply(target, weight, out=target)
                else:
                    take(result, index, axis=axis, out=spare, mode="clip")
                    multiply(spare, weight, out=spare)
                    add(target, spare, out=target)
            result = target


def _nearest_by_repeats(data, out, axes, size, scales, roi, attrs) -> bool:
    """A nearest resize whose every axis repeats each source cell ``k`` times (FPN's and DB-det's
    2x upsamples, in any coordinate mode that maps them so) as one broadcasting copy into ``out``
    split as ``(dim, k)`` per axis, after a gather along the innermost axis when it repeats (two
    gathers and a copy before: 10 -> 4 us channels first at 16x8x12);
    False (nothing written) when some axis is not such a repeat."""
    plan = _repeat_plan(data.shape, axes, size, None if scales is None else tuple(float(s) for s in scales),
                        None if roi is None else tuple(float(r) for r in roi),
                        *(attrs[k] for k in _REPEAT_ATTRS))
    if plan is None:
        return False
    _repeat_runner(plan, out)(data)
    return True


#: the attributes a nearest resize's mapping depends on, in :func:`_repeat_plan`'s order
_REPEAT_ATTRS = ("coordinate_transformation_mode", "rounding_method", "cubic_alpha", "cubic_exclude", "antialias")


@functools.lru_cache(maxsize=256)
def _repeat_plan(shape: tuple, axes: tuple, size: tuple, scales, roi, mode: str, rounding: str,
                 cubic_alpha: float, exclude_outside: bool, antialias: bool):
    """``(index, src, dst)`` of a nearest resize that repeats cells along every axis: the gather
    indices along the innermost axis (None: it does not repeat), then the shapes the (gathered)
    data and ``out`` are viewed as for the broadcasting copy; None when some axis does not repeat."""
    factors = {}
    for i, axis in enumerate(axes):
        k = _repeat_factor(mode, size[i], shape[axis], None if scales is None else scales[i],
                           _axis_roi(roi, i, len(axes)), rounding, cubic_alpha, exclude_outside, antialias)
        if k is None:
            return None
        factors[axis] = k
    last, shape = len(shape) - 1, list(shape)
    index = None
    if factors.get(last, 1) > 1:        # repeats along the innermost axis: a gather (a broadcast
        index = _repeated(shape[last], factors[last])    # copy would loop over runs of k values)
        shape[last] *= factors.pop(last)
    src, dst = [], []
    for axis, n in enumerate(shape):
        k = factors.get(axis, 1)
        src += [n, 1] if k > 1 else [n]
        dst += [n, k] if k > 1 else [n]
    return index, tuple(src), tuple(dst)


def _repeat_runner(plan, out: np.ndarray):
    """``run(data)`` writing ``out`` (C-contiguous) by ``plan`` (:func:`_repeat_plan`); an innermost
    axis that repeats into machine integers by :mod:`.resize_lanes` (one multiply, no gather)."""
    index, src, dst = plan
    target, copy, take = out.reshape(dst), np.copyto, np.take
    if index is None:
        return lambda data: copy(target, data.reshape(src))
    lanes = resize_lanes.runner(src, dst, len(index) // (int(index[-1]) + 1), out) if index.size else None
    if lanes is not None:
        return lanes
    return lambda data: copy(target, take(data, index, axis=-1).reshape(src))


def _specialize_resize(attrs: dict, constant: tuple):
    """Per instruction: a nearest resize by repeats (or by one flat gather, :mod:`.resize_gather`),
    a linear or cubic one by dense products (:func:`.resize_dense.runner`), keeps its plan and view
    of ``out`` while the call passes the same ``out`` (an arena view) and data of the same shape and
    sizes."""
    prepare = _prepare_resize if attrs.get("method") == "nearest_neighbor" else _prepare_dense
    state = [None, None]        # (data shape, dtype, sizes, out), its runner (None: the kernel's)

    def call(data, size, *, out, workspace=None):
        key = state[0]
        if key is None or data.shape != key[0] or data.dtype != key[1] or out is not key[3] \
                or tuple(size) != key[2]:
            state[0], state[1] = (data.shape, data.dtype, tuple(size), out), prepare(data, size, out, attrs)
        if state[1] is None:
            resize(data, size, out=out, **attrs)
        else:
            state[1](data)
    return call


def _prepare_resize(data, size, out, attrs):
    if data.dtype != out.dtype or not out.flags.c_contiguous or out.size == 0:
        return None
    try:
        axes = tuple(normalize_axis(a, data.ndim) for a in attrs["axes"])
        size = tuple(int(s) for s in size)
        scales, roi = attrs["scales"], attrs["roi"]
        plan = _repeat_plan(data.shape, axes, size, None if scales is None else tuple(float(s) for s in scales),
                            None if roi is None else tuple(float(r) for r in roi),
                            *(attrs[k] for k in _REPEAT_ATTRS[:2]), float(attrs["cubic_alpha"]),
                            bool(attrs["cubic_exclude"]), bool(attrs["antialias"]))
    except Exception:   # noqa: BLE001 - bad attributes or sizes: the kernel says what is wrong
        return None
    expected = list(data.shape)
    for a, n in zip(axes, size):
        expected[a] = n
    if len(size) != len(axes) or tuple(out.shape) != tuple(expected):
        return None
    if plan is None:            # not whole repeats: one gather through a flat index, if the axes are adjacent
        gather = _gather_plan(data.shape, axes, size, None if scales is None else tuple(float(s) for s in scales),
                              None if roi is None else tuple(float(r) for r in roi),
                              *(attrs[k] for k in _REPEAT_ATTRS[:2]), float(attrs["cubic_alpha"]),
                              bool(attrs["cubic_exclude"]), bool(attrs["antialias"]))
        return None if gather is None else resize_gather.runner(gather, out)
    return _repeat_runner(plan, out)


def _prepare_dense(data, size, out, attrs):
    """The runner of a linear or cubic resize that :func:`resize` runs by dense products (the same
    plan, from the same key), or None."""
    if data.dtype != out.dtype or data.dtype not in _PLANNED or not out.flags.c_contiguous or out.size == 0:
        return None
    try:
        axes = tuple(normalize_axis(a, data.ndim) for a in attrs["axes"])
        size = tuple(int(s) for s in size)
        expected = list(data.shape)
        for a, n in zip(axes, size):
            expected[a] = n
        if len(size) != len(axes) or tuple(out.shape) != tuple(expected):
            return None
        dense = _dense_plan(data.shape, data.dtype, axes, size, attrs["scales"], attrs["roi"], attrs["method"],
                            attrs["coordinate_transformation_mode"], attrs["rounding_method"],
                            float(attrs["cubic_alpha"]), bool(attrs["cubic_exclude"]), bool(attrs["antialias"]))
    except Exception:   # noqa: BLE001 - bad attributes or sizes: the kernel says what is wrong
        return None
    if dense is None:
        return None
    return resize_dense.runner(dense, out, lambda x: resize(x, size, out=out, **attrs))


@functools.lru_cache(maxsize=256)
def _gather_plan(shape: tuple, axes: tuple, size: tuple, scales, roi, mode: str, rounding: str,
                 cubic_alpha: float, exclude_outside: bool, antialias: bool):
    """:func:`.resize_gather.plan` of a nearest resize, from the cells :func:`_resize_axis` takes
    along each axis (None where it skips the identity); None where an axis extrapolates or is
    empty (the kernel's path)."""
    indices = []
    for i, axis in enumerate(axes):
        in_w, out_w = shape[axis], size[i]
        if in_w == 0 or out_w == 0:
            return None
        scale = out_w / in_w if scales is None else float(scales[i])
        axis_roi = _axis_roi(roi, i, len(axes))
        if math.isclose(scale, 1.0) and out_w == in_w and (
                axis_roi is None or (math.isclose(axis_roi[0], 0.0) and math.isclose(axis_roi[1], 1.0))):
            indices.append(None)
            continue
        _, _, outside, nearest = _axis_taps(mode, out_w, in_w, scale, axis_roi, "nearest_neighbor", rounding,
                                            cubic_alpha, exclude_outside, antialias)
        if outside is not None and outside.any():
            return None
        indices.append(nearest)
    return resize_gather.plan(shape, axes, tuple(indices))


resize.specialize_attrs = _specialize_resize


@functools.lru_cache(maxsize=64)
def _repeated(n: int, k: int) -> np.ndarray:
    """``0, .., 0, 1, .., 1, ..``: each of ``n`` indices ``k`` times (read-only, cached)."""
    index = np.arange(n * k) // k
    index.setflags(write=False)
    return index


@functools.lru_cache(maxsize=256)
def _repeat_factor(mode: str, out_w: int, in_w: int, scale, roi, rounding: str, cubic_alpha: float,
                   exclude_outside: bool, antialias: bool) -> int | None:
    """``k`` when nearest resizing ``in_w`` cells to ``out_w = k * in_w`` takes cell ``j // k`` for
    output ``j`` (1: the identity, which the kernel skips too), else None (worked out once per set)."""
    if in_w == 0 or out_w == 0 or out_w % in_w:     # (an empty result: the kernel's path)
        return None
    k = out_w // in_w
    if k == 1 and (scale is None or math.isclose(scale, 1.0)) and (
            roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0))):
        return 1
    _, _, outside, nearest = _axis_taps(mode, out_w, in_w, out_w / in_w if scale is None else scale, roi,
                                        "nearest_neighbor", rounding, cubic_alpha, exclude_outside, antialias)
    if (outside is not None and outside.any()) or not np.array_equal(nearest, np.arange(out_w) // k):
        return None
    return k


def _axis_roi(roi, i: int, n: int):
    return None if roi is None else (float(roi[i]), float(roi[i + n]))


def _shares(a: np.ndarray, b: np.ndarray) -> bool:
    return a.size > 0 and b.size > 0 and np.may_share_memory(a, b)


# ---------------------------------------------------------------- pad


@register_kernel("pad")
def pad(data, *value, out, pads, pad_mode, pad_value):
    """ONNX Pad: ``pads`` holds every axis's begin, then every axis's end;
    negative amounts crop (first, so reflect/edge/wrap see the cropped data).
    The constant is the 0-d tensor ``value`` when given, else ``pad_value``."""
    crop, interior, gathers = _pad_plan(data.shape, pads if type(pads) is tuple else tuple(pads), pad_mode)
    inner = data if crop is None else data[crop]
    if pad_mode == "constant":
        out[...] = np.asarray(value[0]).reshape(()) if value else pad_value
        out[interior] = inner
        return
    for k, (axis, index) in enumerate(gathers):
        last = k == len(gathers) - 1
        if last and out.dtype == inner.dtype and out.flags.c_contiguous:
            inner.take(index, axis, out, "clip")
        else:
            inner = inner.take(index, axis, None, "clip")
    if not gathers or out.dtype != inner.dtype or not out.flags.c_contiguous:
        np.copyto(out, inner)


@functools.lru_cache(maxsize=256)
def _pad_plan(shape: tuple, pads: tuple, pad_mode: str) -> tuple:
    """``(crop, interior, gathers)`` of a pad of data of ``shape``: the crop's index (None: no
    axis is cropped), where the cropped data lands in the output (constant mode), and
    :func:`_pad_gathers` (other modes). Worked out once per shape, pads and mode: the Python
    around a small pad's one ``take`` was most of its ~4.5 us."""
    pads = tuple(int(p) for p in pads)
    rank = len(shape)
    if len(pads) != 2 * rank:
        raise ShapeError(f"pad: pads {pads} need {2 * rank} values for data of shape {shape}")
    begins, ends = pads[:rank], pads[rank:]
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, b, e in zip(shape, begins, ends))
    if any(s.start > s.stop for s in crop):
        raise ShapeError(f"pad: pads {pads} crop more than the data's shape {shape}")
    inner = tuple(s.stop - s.start for s in crop)
    widths = tuple((max(b, 0), max(e, 0)) for b, e in zip(begins, ends))
    interior = tuple(slice(b, b + n) for (b, _), n in zip(widths, inner))
    cropped = None if all(b >= 0 and e >= 0 for b, e in zip(begins, ends)) else crop
    if pad_mode == "constant":
        return cropped, interior, ()
    if pad_mode not in ("reflect", "edge", "wrap"):
        raise ShapeError(f"pad: unknown pad_mode {pad_mode!r}")
    for axis, (b, e) in enumerate(widths):
        if (b or e) and inner[axis] == 0:
            raise ShapeError(f"pad: pad_mode {pad_mode!r} cannot extend the empty axis {axis} "
                             f"(data shape {shape}, pads {pads})")
    return cropped, interior, _pad_gathers(inner, widths, pad_mode)


@functools.lru_cache(maxsize=256)
def _pad_gathers(shape: tuple, widths: tuple, pad_mode: str) -> tuple:
    """``(axis, index)`` per padded axis: reflect, edge and wrap pad each axis on its own, so
    ``np.pad(x, widths, mode)`` is one gather per padded axis by ``np.pad(arange(n), width,
    mode)`` (numpy's own rule, large pads included): one ``take`` instead of np.pad's ~30 us
    of Python on a small tensor."""
    return tuple((axis, np.pad(np.arange(n, dtype=np.intp), width, mode=pad_mode))
                 for axis, (n, width) in enumerate(zip(shape, widths)) if width != (0, 0))


@register_kernel("dynamic_pad")
def dynamic_pad(data, pads, *, out, pad_value):
    """``pad`` in constant mode by amounts known only at run time (a shape value)."""
    pad(data, out=out, pads=tuple(int(p) for p in pads), pad_mode="constant", pad_value=pad_value)
