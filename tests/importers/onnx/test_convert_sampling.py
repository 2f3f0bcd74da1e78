"""Converters of GridSample, RoiAlign, MaxRoiPool and DeformConv (converters/sampling.py)
against onnxruntime, or onnx's reference evaluator where onnxruntime lacks
the case or reads the spec differently, on random inputs with odd sizes;
plus error cases.

Cubic GridSample with border padding: onnx's reference (and relaxpack)
clamp the source coordinate into the image before taking the four taps;
onnxruntime, like PyTorch, clamps each tap instead. The two differ near the
border; relaxpack follows the reference, from which the backend tests come.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError

from .backend_case import assert_close
from .helpers import one_node, rand, reference
from relaxpack.runtime import VirtualMachine


def check(op, feeds, *, more=(), ref="ort", dims=None, rtol=1e-5, atol=1e-6, **kwargs):
    """Like helpers.check, with a tolerance: interpolation weights round in float32."""
    model = one_node(op, feeds, **kwargs)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model, dims=dims)))
    for f in (feeds, *more):
        got = vm.run(f)
        for out, want in zip(model.graph.output, reference(model, f, ref)):
            assert_close(got[out.name], want, rtol, atol, out.name)


def _grid(*shape, dtype=np.float32, seed=1):
    """Normalized positions, some outside [-1, 1] (they exercise the padding)."""
    return (np.random.default_rng(seed).uniform(-1.3, 1.3, shape)).astype(dtype)


# ---------------------------------------------------------------- GridSample


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(
    ["linear", "nearest", "cubic"], ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_2d_modes(mode, padding, align):
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    ref = "onnx" if (mode, padding) == ("cubic", "border") else "ort"
    check("GridSample", {"x": rand(2, 3, 5, 7), "grid": _grid(2, 4, 6, 2)}, attrs=attrs, opset=20, ref=ref,
          sym={"x": ["n", 3, "h", "w"], "grid": ["n", "ho", "wo", 2]},
          more=[{"x": rand(1, 3, 1, 4, seed=3), "grid": _grid(1, 3, 2, 2, seed=4)}]
          # an empty batch (onnx's reference fails on one)
          + [{"x": rand(0, 3, 5, 7), "grid": _grid(0, 4, 6, 2)}] * (ref == "ort"))


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(
    ["linear", "nearest"], ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_3d(mode, padding, align):
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    check("GridSample", {"x": rand(2, 2, 3, 5, 4), "grid": _grid(2, 3, 2, 5, 3)}, attrs=attrs, opset=20)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
def test_grid_sample_1d_and_float64_against_the_reference(mode):
    attrs = {"mode": mode, "padding_mode": "reflection"}
    check("GridSample", {"x": rand(2, 3, 6, dtype=np.float64), "grid": _grid(2, 5, 1, dtype=np.float64)},
          attrs=attrs, opset=22, ref="onnx")


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_opset16_names(mode):
    check("GridSample", {"x": rand(1, 2, 4, 5), "grid": _grid(1, 3, 3, 2)}, attrs={"mode": mode}, opset=16)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_opset16_of_a_volume(mode):
    """GridSample-16 says 4-D; onnxruntime samples 5-D too (paddle2onnx's F.grid_sample of a volume)."""
    check("GridSample", {"x": rand(2, 2, 3, 5, 4), "grid": _grid(2, 3, 2, 5, 3)}, attrs={"mode": mode}, opset=16)


def _in_float32(op, attrs, opset):
    """The reference: the float32 model's onnxruntime result, rounded to float16 once."""
    def run(feeds):
        wide = {k: v.astype(np.float32) for k, v in feeds.items()}
        model = one_node(op, wide, attrs=attrs, opset=opset)
        return [y.astype(np.float16) for y in reference(model, wide, "ort")]
    return run


def test_grid_sample_float16_and_integer_nearest():
    """float16 interpolates in float32 and rounds once (onnx's reference
    rounds every step to float16)."""
    attrs = {"mode": "linear"}
    check("GridSample", {"x": rand(1, 2, 4, 5, dtype=np.float16), "grid": _grid(1, 3, 3, 2, dtype=np.float16)},
          attrs=attrs, opset=20, ref=_in_float32("GridSample", attrs, 20), rtol=1e-3, atol=1e-3)
    check("GridSample", {"x": rand(1, 2, 4, 5, dtype=np.int32), "grid": _grid(1, 3, 3, 2)},
          attrs={"mode": "nearest", "padding_mode": "border"}, opset=20, ref="onnx")


def test_grid_sample_unsupported_names():
    model = one_node("GridSample", {"x": rand(1, 1, 2, 2), "grid": _grid(1, 2, 2, 2)}, attrs={"mode": "bilinear"},
                     opset=20)
    with pytest.raises(UnsupportedOpError, match="GridSample.*mode 'bilinear'"):
        relaxpack.from_onnx(model)


# ---------------------------------------------------------------- RoiAlign


def _rois(count, height, width, *, dtype=np.float32, seed=5):
    """Boxes (x1, y1, x2, y2) of assorted sizes, some partly outside the image."""
    rng = np.random.default_rng(seed)
    start = rng.uniform([-2, -2], [width, height], (count, 2))
    size = rng.uniform(0.5, max(height, width), (count, 2))
    return np.concatenate([start, start + size], axis=1).astype(dtype)


@pytest.mark.parametrize("mode,coord,ratio", list(itertools.product(
    ["avg", "max"], ["half_pixel", "output_half_pixel"], [0, 2])))
def test_roi_align(mode, coord, ratio):
    x = rand(2, 3, 11, 9)
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "sampling_ratio": ratio,
             "output_height": 3, "output_width": 4, "spatial_scale": 0.75}
    feeds = {"x": x, "rois": _rois(5, 11, 9), "idx": np.array([0, 1, 1, 0, 1], np.int64)}
    check("RoiAlign", feeds, attrs=attrs, opset=16, sym={"rois": ["r", 4], "idx": ["r"]},
          more=[{**feeds, "rois": _rois(2, 11, 9, seed=6), "idx": np.array([1, 0], np.int64)},
                {**feeds, "rois": np.zeros((0, 4), np.float32), "idx": np.zeros(0, np.int64)}])


def test_roi_align_opset10_and_float64():
    feeds = {"x": rand(1, 2, 7, 8, dtype=np.float64), "rois": _rois(3, 7, 8, dtype=np.float64),
             "idx": np.zeros(3, np.int64)}
    check("RoiAlign", feeds, attrs={"output_height": 2, "output_width": 3}, opset=10)


# ---------------------------------------------------------------- MaxRoiPool


def _pool_rois(count, height, width, *, images=2, seed=7):
    """Rows (batch index, x1, y1, x2, y2): boxes partly or wholly outside the
    image, degenerate ones (x2 < x1), and corners exactly on halves (rounded
    away from zero)."""
    rng = np.random.default_rng(seed)
    start = rng.uniform([-6, -6], [width + 4, height + 4], (count, 2))
    end = start + rng.uniform(-3, max(height, width), (count, 2))
    corners = np.concatenate([start, end], axis=1)
    corners[::3] = np.round(corners[::3] * 2) / 2                   # halves: 0.5, -1.5, ...
    return np.concatenate([rng.integers(0, images, (count, 1)), corners], axis=1).astype(np.float32)


@pytest.mark.parametrize("pooled,scale", [((3, 4), 0.75), ((2, 2), 1.0), ((5, 3), 0.5), ((1, 1), 2.0)])
def test_max_roi_pool(pooled, scale):
    """Against onnxruntime (which implements MaxRoiPool-1, float32 only),
    with a symbolic number of boxes, including none."""
    attrs = {"pooled_shape": list(pooled), "spatial_scale": scale}
    feeds = {"x": rand(2, 3, 11, 9), "rois": _pool_rois(40, 11, 9)}
    check("MaxRoiPool", feeds, attrs=attrs, opset=21, sym={"x": ["n", 3, "h", "w"], "rois": ["r", 5]},
          more=[{"x": rand(1, 3, 4, 6, seed=2), "rois": _pool_rois(3, 4, 6, images=1, seed=8)},
                {**feeds, "rois": np.zeros((0, 5), np.float32)}])


def test_max_roi_pool_nan_bins_are_nan():
    """A bin holding a NaN is NaN (onnxruntime forgets a NaN that is not
    last in its scan, see the kernel); every other bin matches onnxruntime."""
    x = rand(1, 2, 6, 6)
    x[0, 0, 1, 1] = np.nan
    rois = np.array([[0, 0, 0, 5, 5], [0, 1, 1, 2, 2], [0, 3, 3, 5, 5]], np.float32)
    model = one_node("MaxRoiPool", {"x": x, "rois": rois}, attrs={"pooled_shape": [2, 2]}, opset=21)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run({"x": x, "rois": rois})["y0"]
    nan_bins = np.zeros(got.shape, bool)
    nan_bins[0, 0, 0, 0] = nan_bins[1, 0, 0, 0] = True             # the bins that hold x[0, 0, 1, 1]
    assert np.isnan(got[nan_bins]).all() and not np.isnan(got[~nan_bins]).any()
    want = reference(model, {"x": x, "rois": rois}, "ort")[0]
    np.testing.assert_array_equal(got[~nan_bins], want[~nan_bins])


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_max_roi_pool_opset22_dtypes(dtype):
    """onnxruntime has no MaxRoiPool-22 nor float64: the max picks an input
    value exactly, so the float32 result of values representable in
    ``dtype`` is the answer (pooled sizes of powers of two keep the bin
    edges exact in every precision)."""
    x, rois = rand(2, 3, 8, 7).astype(dtype), _pool_rois(12, 8, 7)
    model = one_node("MaxRoiPool", {"x": x, "rois": rois.astype(dtype)}, attrs={"pooled_shape": [2, 4]}, opset=22)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run({"x": x, "rois": rois.astype(dtype)})
    wide = one_node("MaxRoiPool", {"x": x.astype(np.float32), "rois": rois}, attrs={"pooled_shape": [2, 4]},
                    opset=21)
    want = reference(wide, {"x": x.astype(np.float32), "rois": rois}, "ort")[0]
    assert got["y0"].dtype == dtype
    np.testing.assert_array_equal(got["y0"].astype(np.float32), want)


def test_max_roi_pool_errors():
    bad_columns = one_node("MaxRoiPool", {"x": rand(1, 1, 4, 4), "rois": rand(2, 4)},
                           attrs={"pooled_shape": [2, 2]}, opset=22)
    with pytest.raises(ShapeError, match="5 values"):
        relaxpack.from_onnx(bad_columns)
    model = one_node("MaxRoiPool", {"x": rand(2, 1, 4, 4), "rois": rand(1, 5)}, attrs={"pooled_shape": [2, 2]},
                     opset=22)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    with pytest.raises(ShapeError, match="out of range for 2 images"):
        vm.run({"x": rand(2, 1, 4, 4), "rois": np.array([[2, 0, 0, 1, 1]], np.float32)})


# ---------------------------------------------------------------- DeformConv


@pytest.mark.parametrize("attrs,groups,offset_groups,with_mask,with_bias", [
    ({}, 1, 1, False, False),
    ({"pads": [1, 0, 2, 1], "strides": [2, 1]}, 1, 1, True, True),
    ({"dilations": [1, 2]}, 2, 1, False, True),
    ({"pads": [1, 1, 1, 1]}, 1, 2, True, False),
    ({"strides": [1, 2]}, 2, 2, True, True),
])
def test_deform_conv(attrs, groups, offset_groups, with_mask, with_bias):
    rng = np.random.default_rng(7)
    c, o, k = 4, 6, (3, 2)
    x = rand(2, c, 6, 7)
    w = rand(o, c // groups, *k, seed=8)
    pads = attrs.get("pads", [0] * 4)
    strides, dil = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    out = [(s + pads[i] + pads[i + 2] - dil[i] * (kk - 1) - 1) // strides[i] + 1
           for i, (s, kk) in enumerate(zip((6, 7), k))]
    offset = rng.uniform(-2, 2, (2, offset_groups * 6 * 2, *out)).astype(np.float32)
    feeds = {"x": x, "w": w, "offset": offset}
    names = ["x", "w", "offset"]
    if with_bias:
        feeds["b"] = rand(o, seed=9)
    if with_mask:
        feeds["mask"] = rng.uniform(0, 1, (2, offset_groups * 6, *out)).astype(np.float32)
    names += (["b"] if with_bias else [""] * with_mask) + (["mask"] if with_mask else [])
    # float32 sums of C * K products: absolute rounding of a few 1e-6
    check("DeformConv", feeds, inputs=names, attrs={**attrs, "group": groups, "offset_group": offset_groups},
          opset=19, ref="onnx", atol=1e-5)


def test_deform_conv_float64_1d():
    rng = np.random.default_rng(3)
    feeds = {"x": rand(1, 2, 9, dtype=np.float64), "w": rand(3, 2, 3, dtype=np.float64, seed=4),
             "offset": rng.uniform(-3, 3, (1, 3, 7))}
    model_attrs = {"kernel_shape": [3]}
    model = one_node("DeformConv", feeds, attrs=model_attrs, opset=22)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run(feeds)["y0"]
    # the 1-d deformable convolution, written out: linear interpolation, zero outside
    x, w, off = feeds["x"][0], feeds["w"], feeds["offset"][0]
    want = np.zeros((3, 7))
    for o in range(3):
        for j in range(7):
            for t in range(3):
                p = j + t + off[t, j]
                lo = int(np.floor(p))
                frac = p - lo
                sample = sum(wt * x[:, i] for i, wt in ((lo, 1 - frac), (lo + 1, frac)) if 0 <= i < 9)
                want[o, j] += np.dot(w[o, :, t], sample if np.ndim(sample) else np.zeros(2))
    np.testing.assert_allclose(got[0], want, rtol=1e-12, atol=1e-12)
