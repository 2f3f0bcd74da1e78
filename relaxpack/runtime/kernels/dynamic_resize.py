"""``dyn.resize``: ONNX Resize / Upsample whose scales, sizes or roi are
tensors known only at run time.

The packed kernel works out the output size of each resized axis the way
the importer does for constant operands, then runs the ``image.resize``
kernel into a new array, so both paths interpolate alike:

- ``scales``: ``floor(dim * scale)``, the scales driving the coordinate
  transform;
- ``sizes``: the sizes themselves (``stretch``), or one scale for every axis
  (``not_larger``: the smallest ratio size / dim, ``not_smaller``: the
  largest) and ``round(dim * scale)``;
- ``legacy`` (Resize-10 and Upsample): asymmetric coordinates, and nearest
  rounds down on upsampled axes and up on downsampled ones, as onnxruntime
  does: one pass per rounding.

    dyn.resize(x(1, 1, 4, 4), [1, 1, 0.5, 0.5], given="scales", axes=(0, 1, 2, 3), ...)  ->  (1, 1, 2, 2)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ...errors import ShapeError
from ..kept import keep
from . import image, resize_dense
from ._math import normalize_axis
from ._registry import register_packed
from .image import resize


def _values(array: np.ndarray, count: int, what: str, kinds: str) -> list:
    """The ``count`` numbers of a 1-D run-time operand."""
    flat = np.asarray(array).reshape(-1)
    if flat.dtype.kind not in kinds:
        raise ShapeError(f"dyn.resize: {what} has dtype {flat.dtype}, expected {'ints' if kinds == 'iu' else 'floats'}")
    if flat.size != count:
        raise ShapeError(f"dyn.resize: {what} {flat.tolist()} must hold {count} values")
    return flat.tolist()


def output_sizes(in_dims: list[int], given: np.ndarray, given_is: str,
                 policy: str) -> tuple[list[int], list[float] | None]:
    """The resized axes' output sizes and the scales of the coordinate
    transform (``None``: size / dim, computed per axis by the kernel)."""
    if given_is == "scales":
        scales = [float(s) for s in _values(given, len(in_dims), "scales", "f")]
        if not all(s > 0 for s in scales):
            raise ShapeError(f"dyn.resize: scales {scales} must be positive")
        return [int(math.floor(d * s)) for d, s in zip(in_dims, scales)], scales
    sizes = [int(s) for s in _values(given, len(in_dims), "sizes", "iu")]
    if any(s < 0 for s in sizes):
        raise ShapeError(f"dyn.resize: sizes {sizes} must not be negative")
    if policy == "stretch":
        return sizes, None
    if not all(d > 0 for d in in_dims):
        raise ShapeError(f"dyn.resize: keep_aspect_ratio_policy {policy!r} needs nonzero dims, got {in_dims}")
    ratios = [s / d for s, d in zip(sizes, in_dims)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    return [int(scale * d + 0.5) for d in in_dims], [scale] * len(in_dims)


def _legacy_passes(axes: tuple[int, ...], scales: list[float], method: str):
    """(rounding, indices into axes) per pass of Resize-10 / Upsample."""
    resized = [i for i, s in enumerate(scales) if s != 1.0]
    if method == "linear":
        return [("floor", resized)]
    return [("ceil", [i for i in resized if scales[i] < 1]), ("floor", [i for i in resized if scales[i] > 1])]


@register_packed("dyn.resize")
def resize_at_run_time(data, given, *roi, given_is: str, axes: tuple[int, ...], policy: str,
                       legacy: bool, **attrs):
    """``data`` with ``axes`` resized by the run-time ``given`` (scales or
    sizes) and, for tf_crop_and_resize, the run-time ``roi``; a new array.
    ``attrs`` are image.resize's interpolation attributes."""
    axes = tuple(normalize_axis(a, data.ndim) for a in axes)
    in_dims = [data.shape[a] for a in axes]
    sizes, scales = output_sizes(in_dims, given, given_is, policy)
    attrs["roi"] = tuple(float(v) for v in _values(roi[0], 2 * len(axes), "roi", "f")) if roi else None
    rounding = attrs.pop("rounding_method")
    if legacy:
        passes = _legacy_passes(axes, scales, attrs["method"])
    else:
        passes = [(rounding, list(range(len(axes))))]
    result = data
    for rounding, picked in passes:
        if not picked:
            continue
        shape = list(result.shape)
        for i in picked:
            shape[axes[i]] = sizes[i]
        out = np.empty(shape, data.dtype)
        resize(result, tuple(sizes[i] for i in picked), out=out, axes=tuple(axes[i] for i in picked),
               scales=None if scales is None else tuple(scales[i] for i in picked), rounding_method=rounding,
               **attrs)
        result = out
    return result.copy() if result is data else result


def _specialize_resize_at_run_time(attrs: dict, constant: tuple):
    """Per instruction: a linear or cubic resize (no roi, not legacy) of float32 / float64 data
    that the dense products serve (``resize_dense``: Mask R-CNN pastes each detection's mask so,
    in a Loop) keeps, per data shape and operand values, the output shape and the products, so
    a call is their two GEMMs (the general path works out the sizes, the kernel's attributes and
    its plan keys every call, ~10 us of a 30x30 -> 23x17 resize's ~15); the rest, or non-finite
    data, takes :func:`resize_at_run_time`."""
    general = functools.partial(resize_at_run_time, **attrs)
    if attrs.get("legacy") or attrs.get("method") not in ("linear", "cubic"):
        return lambda data, given, *roi, workspace=None: general(data, given, *roi)
    kept: dict = {}

    def call(data, given, *roi, workspace=None):
        if roi or type(data) is not np.ndarray or type(given) is not np.ndarray:
            return general(data, given, *roi)
        key = (data.shape, data.dtype, given.dtype, given.tobytes())
        known = kept.get(key)
        if known is None:
            known = keep(kept, key, _dense_at_run_time(data, given, attrs))
        shape, dense, between = known
        if dense is not None:
            out = np.empty(shape, data.dtype)
            if resize_dense.run(dense, data, out, between):
                return out
        return general(data, given)
    return call


def _dense_at_run_time(data: np.ndarray, given: np.ndarray, attrs: dict):
    """``(output shape, the dense products or None, their intermediate)`` of a resize of ``data`` by
    ``given``, with the plan key :func:`resize` would make (the intermediate an array of the
    instruction's own, kept with the products: the thread's scratch cost ~2 us a call); ``(None,
    None, None)`` where the kernel's general path serves."""
    if data.dtype not in image._PLANNED:
        return None, None, None
    axes = tuple(normalize_axis(a, data.ndim) for a in attrs["axes"])
    sizes, scales = output_sizes([data.shape[a] for a in axes], given, attrs["given_is"], attrs["policy"])
    shape = list(data.shape)
    for a, s in zip(axes, sizes):
        shape[a] = s
    dense = image._dense_plan(data.shape, data.dtype, axes, tuple(sizes), None if scales is None else tuple(scales),
                              None, attrs["method"], attrs["coordinate_transformation_mode"],
                              attrs["rounding_method"], float(attrs["cubic_alpha"]), bool(attrs["cubic_exclude"]),
                              bool(attrs["antialias"]))
    between = None if dense is None else resize_dense.intermediate(dense)
    if between is not None and math.prod(between) * data.itemsize > KEPT_BETWEEN_BYTES:
        between = None          # (the thread's scratch: 64 keys would hold too much)
    return tuple(shape), dense, None if between is None else np.empty(between, data.dtype)


#: an instruction keeps the dense passes' intermediate per key up to this many bytes
KEPT_BETWEEN_BYTES = 64 << 10


resize_at_run_time.specialize_attrs = _specialize_resize_at_run_time
