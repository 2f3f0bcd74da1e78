"""image.roi_align's three methods (kernels/sampling.py, roi_separable.py, roi_cropped.py): the
separable products on the whole map and on each box's window, and the gather, each against onnx's reference evaluator and against each
other, at the edges: one box and none, boxes outside the image, every sampling grid,
one-pixel maps, tall and wide maps (rows or columns first), batch indices of one image, of
several (unsorted, an image without boxes), each float dtype, non-finite data."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import roi_cropped, roi_separable, sampling

from .test_kernels_registry import assert_close, run_kernel, run_onnx, tolerance


def _rois(rng, count, height, width, dtype):
    """Boxes (x1, y1, x2, y2) of assorted sizes, some partly or wholly outside the image, some
    flipped (negative extent)."""
    start = rng.uniform([-3, -3], [width + 1, height + 1], (count, 2))
    size = rng.uniform(-1.0, max(height, width) * 1.5, (count, 2))
    return np.concatenate([start, start + size], axis=1).astype(dtype)


def _forced(method, data, rois, indices, attrs):
    """The kernel's output with its average taken by ``method`` ("dense", "cropped" or None: the
    gather; max mode always gathers)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sampling, "_average_method", lambda mode, *rest: method if mode == "avg" else None)
        return run_kernel("image.roi_align", data, rois, indices, **attrs)


def _both(data, rois, indices, *, mode="avg", coord="half_pixel", ratio=0, size=(3, 4), scale=0.75):
    """The kernel's output by the gather and by the whole-map products (the gather where they
    cannot apply), and the reference evaluator's; the products on each box's window
    (:mod:`.roi_cropped`) are checked against the whole map's on the way (the same terms, another
    order)."""
    attrs = dict(output_size=size, sampling_ratio=ratio, spatial_scale=scale, mode=mode,
                 coordinate_transformation_mode=coord)
    gathered, dense = _forced(None, data, rois, indices, attrs), _forced("dense", data, rois, indices, attrs)
    cropped = _forced("cropped", data, rois, indices, attrs)
    assert cropped.dtype == dense.dtype
    assert_close(cropped, dense, **tolerance(data.dtype))
    want, = run_onnx("RoiAlign", [data, rois, indices],
                     dict(mode=mode, coordinate_transformation_mode=coord, sampling_ratio=ratio,
                          output_height=size[0], output_width=size[1], spatial_scale=scale))
    return gathered, dense, want


@pytest.mark.parametrize("coord", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 1, 2, 3])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_both_methods_against_the_reference(mode, ratio, coord):
    rng = np.random.default_rng(ratio)
    data = rng.standard_normal((3, 4, 9, 13)).astype(np.float32)
    rois = _rois(rng, 7, 9 / 0.75, 13 / 0.75, np.float32)
    indices = np.array([2, 0, 2, 2, 0, 0, 2], np.int64)          # image 1 has no box
    gathered, dense, want = _both(data, rois, indices, mode=mode, coord=coord, ratio=ratio)
    assert_close(gathered, want, **tolerance(np.float32))
    assert_close(dense, want, **tolerance(np.float32))


@pytest.mark.parametrize("ratio", [0, 2])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_square_bins_against_the_reference(mode, ratio):
    """Square output sizes sample both axes in one stacked call (``_roi_axes``)."""
    rng = np.random.default_rng(10 + ratio)
    data = rng.standard_normal((2, 3, 9, 13)).astype(np.float32)
    rois = _rois(rng, 6, 9 / 0.75, 13 / 0.75, np.float32)
    indices = np.array([1, 0, 1, 1, 0, 0], np.int64)
    gathered, dense, want = _both(data, rois, indices, mode=mode, ratio=ratio, size=(4, 4))
    assert_close(gathered, want, **tolerance(np.float32))
    assert_close(dense, want, **tolerance(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ratio", [0, 1, 3])
@pytest.mark.parametrize("hw", [(9, 13), (1, 7), (6, 1)])
def test_both_axes_in_one_go_as_each_alone(hw, ratio, dtype):
    """The stacked call gives each axis's taps, weights and used samples bit for bit as its own
    call (adaptive grids: at the larger of the two axes' most samples)."""
    height, width = hw
    rng = np.random.default_rng(height * width + ratio)
    rois = _rois(rng, 9, height / 0.5, width / 0.5, dtype)
    y0, h, grid_h, x0, w, grid_w = sampling._roi_boxes(rois, 5, 5, ratio, 0.5, True)
    most = max(int(grid_h.max()), int(grid_w.max()), 1)
    got = sampling._roi_axes(y0, h, grid_h, x0, w, grid_w, (5, 5), height, width, most, most)
    want = (sampling._roi_axis(y0, h, grid_h, 5, height, most), sampling._roi_axis(x0, w, grid_w, 5, width, most))
    for got_axis, want_axis in zip(got, want):
        for g, e in zip(got_axis, want_axis):
            assert g.dtype == e.dtype and g.shape == e.shape
            np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ratio", [0, 1, 3])
@pytest.mark.parametrize("hw", [(9, 13), (1, 7), (6, 1)])
@pytest.mark.parametrize("bins", [(5, 5), (4, 6)], ids=["square", "oblong"])
def test_hat_matrices_as_the_taps_summed_by_pixel(bins, hw, ratio, dtype):
    """The separable method's axis weights by hat functions (both axes stacked for square bins, each
    alone for oblong ones) against the taps' weights summed by pixel: boxes partly and wholly
    outside, one-pixel axes, adaptive grids; within a few ulps of the boxes' dtype, which the hats
    keep (the far pixel's weight and the sums' order differ in the last bits; the taps' weights
    are float64 either way, their integer taps widening the fractions)."""
    height, width = hw
    rng = np.random.default_rng(height * width + ratio)
    rois = _rois(rng, 9, height / 0.5, width / 0.5, dtype)
    y0, h, grid_h, x0, w, grid_w = sampling._roi_boxes(rois, *bins, ratio, 0.5, True)
    most_h, most_w = max(int(grid_h.max()), 1), max(int(grid_w.max()), 1)
    got = sampling._axis_matrices(y0, h, grid_h, x0, w, grid_w, bins, height, width, most_h, most_w)
    for (start, length, grid, count, size, most), g in zip(((y0, h, grid_h, bins[0], height, most_h),
                                                          (x0, w, grid_w, bins[1], width, most_w)), got):
        taps, weights, _ = sampling._roi_axis(start, length, grid, count, size, most)
        want = roi_separable.axis_matrix(taps, weights, size)
        assert g.shape == want.shape == (len(start), count, size) and g.dtype == dtype     # (the taps': float64)
        np.testing.assert_allclose(g, want, rtol=0, atol=8 * np.finfo(dtype).eps)
        assert (g >= 0).all()


def test_large_axis_arrays_take_the_taps(monkeypatch):
    """Past HAT_MAX_VALUES the weights come from the taps (the same matrices), and roi_align still
    matches the reference."""
    rng = np.random.default_rng(7)
    data = rng.standard_normal((2, 3, 9, 13)).astype(np.float32)
    rois = _rois(rng, 6, 9 / 0.75, 13 / 0.75, np.float32)
    indices = np.array([1, 0, 1, 1, 0, 0], np.int64)
    monkeypatch.setattr(roi_separable, "HAT_MAX_VALUES", 0)
    gathered, dense, want = _both(data, rois, indices, ratio=2)
    assert_close(dense, want, **tolerance(np.float32))


@pytest.mark.parametrize("shape", [(1, 2, 1, 1), (1, 3, 1, 7), (1, 3, 7, 1), (2, 1, 23, 5), (2, 1, 5, 23)],
                         ids=["pixel", "row", "column", "tall", "wide"])
@pytest.mark.parametrize("size", [(1, 1), (2, 5), (5, 2)])
def test_odd_maps_and_bins(shape, size):
    """One-pixel maps clamp every tap; tall and wide maps take rows or columns first."""
    rng = np.random.default_rng(sum(shape))
    data = rng.standard_normal(shape).astype(np.float32)
    rois = _rois(rng, 6, shape[2], shape[3], np.float32)
    indices = rng.integers(0, shape[0], 6).astype(np.int64)
    gathered, dense, want = _both(data, rois, indices, size=size, scale=1.0)
    assert_close(gathered, want, **tolerance(np.float32))
    assert_close(dense, want, **tolerance(np.float32))


@pytest.mark.parametrize("count", [0, 1])
def test_no_box_and_one_box(count):
    rng = np.random.default_rng(3)
    data = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    rois = np.array([[1.0, 0.5, 6.5, 5.0]], np.float32)[:count]
    indices = np.ones(count, np.int64)
    gathered, dense, want = _both(data, rois, indices, ratio=2, size=(2, 3))
    assert gathered.shape == dense.shape == (count, 3, 2, 3)
    assert_close(gathered, want, **tolerance(np.float32))
    assert_close(dense, want, **tolerance(np.float32))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_each_float_dtype(dtype):
    rng = np.random.default_rng(7)
    data = rng.standard_normal((2, 3, 8, 10)).astype(dtype)
    rois = _rois(rng, 5, 8, 10, dtype)
    indices = np.array([1, 0, 1, 1, 0], np.int64)
    gathered, dense, want = _both(data, rois, indices, ratio=2, scale=1.0)
    assert gathered.dtype == dense.dtype == dtype
    # float16: the kernel works in float32 and rounds once; the reference rounds as it goes
    assert_close(dense, gathered, **tolerance(dtype))
    assert_close(dense, want.astype(dtype), **tolerance(dtype))


def test_non_finite_data_is_gathered():
    """An inf on a map the products would read gives NaN only where the reference has one (the
    windows' products meet it in the second box's window and the gather redoes the call)."""
    rng = np.random.default_rng(11)
    data = rng.standard_normal((1, 2, 10, 10)).astype(np.float32)
    data[0, 1, 8, 8] = np.inf
    rois = np.array([[0.0, 0.0, 3.0, 3.0], [6.0, 6.0, 9.5, 9.5]], np.float32)
    gathered, dense, want = _both(data, rois, np.zeros(2, np.int64), ratio=2, scale=1.0)
    assert np.isfinite(want[0]).all() and not np.isfinite(want[1, 1]).all()
    assert_close(gathered, want, **tolerance(np.float32))
    assert_close(dense, want, **tolerance(np.float32))


def test_axis_matrix_sums_the_weights_of_shared_pixels():
    taps = np.array([[[[0, 1], [1, 1]]]])                    # one box, one bin, two samples
    weights = np.array([[[[0.25, 0.75], [0.5, 0.5]]]], np.float32)
    np.testing.assert_array_equal(roi_separable.axis_matrix(taps, weights, 3), [[[0.25, 1.75, 0.0]]])


def _method(count, channels, height, width, box, mode="avg"):
    """The method ``roi_align`` takes for ``count`` boxes of ``box`` (h, w) map pixels, 7x7 bins
    of 2x2 samples."""
    h, w = np.full(count, float(box[0])), np.full(count, float(box[1]))
    return sampling._average_method(mode, count, channels, height, width, 7, 7, 2, 2, h, w, 1)


def test_the_choice_of_method():
    """A head's few boxes on a small map (the zoo's Mask R-CNN) take the whole-map products; a
    detector's hundreds of small boxes on a large map (torchvision's Faster R-CNN at 128x160: 431
    boxes of ~6x4 pixels on a 32x40x256 map, 340 ms gathered, 35 by the whole map, 15 cropped)
    their windows, as do a few small boxes on a large map (3 boxes of 2x2 pixels on 200x300x256:
    0.2 ms, 1.0 gathered, 43 by the whole map, which also copies the map channels last); a box
    or two of one channel the gather; max mode always the gather."""
    assert _method(20, 16, 16, 24, (1.5, 2.5)) == "dense"
    assert _method(431, 256, 32, 40, (5.7, 4.0)) == "cropped"
    assert _method(1000, 256, 200, 336, (6.0, 6.0)) == "cropped"
    assert _method(3, 256, 200, 300, (2.0, 2.0)) == "cropped"
    assert _method(2, 1, 200, 300, (2.0, 2.0)) is None
    assert _method(431, 256, 32, 40, (5.7, 4.0), mode="max") is None


def test_spans_of_the_weighed_pixels():
    """A box's window: the first and one past the last pixel a bin weighs; none for a box whose
    bins weigh nothing (every sample outside the map)."""
    matrix = np.zeros((3, 2, 6), np.float32)
    matrix[0, 0, 1], matrix[0, 1, 3] = 0.5, 0.25
    matrix[2, :, 5] = 1.0
    lo, hi = roi_cropped.spans(matrix)
    assert lo.tolist() == [1, 0, 5] and hi.tolist() == [4, 0, 6]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_cropped_windows_of_many_boxes_against_the_reference(dtype):
    """Many boxes, as a detector's RoI head pools them: small and large, flipped, outside the map
    (a box weighing no pixel is 0), over two images in no order; the windows' products against
    the gather and the reference evaluator."""
    rng = np.random.default_rng(23)
    data = rng.standard_normal((2, 8, 12, 17)).astype(dtype)
    rois = _rois(rng, 60, 12 / 0.5, 17 / 0.5, dtype)
    rois[5] = [100, 100, 110, 104]                          # wholly outside: no pixel weighed
    indices = rng.integers(0, 2, 60)
    attrs = dict(output_size=(4, 5), sampling_ratio=2, spatial_scale=0.5, mode="avg",
                 coordinate_transformation_mode="half_pixel")
    cropped, gathered = _forced("cropped", data, rois, indices, attrs), _forced(None, data, rois, indices, attrs)
    want, = run_onnx("RoiAlign", [data, rois, indices],
                     dict(mode="avg", coordinate_transformation_mode="half_pixel", sampling_ratio=2,
                          output_height=4, output_width=5, spatial_scale=0.5))
    assert cropped.dtype == dtype
    assert not cropped[5].any()
    assert_close(cropped, gathered, **tolerance(dtype))
    assert_close(cropped, want.astype(dtype), **tolerance(dtype))


@pytest.mark.parametrize("method", ["dense", "cropped"])
def test_products_on_a_wide_map_within_float32_rounding_of_float64(method):
    """The products in float32 on a map wide and deep enough that BLAS may block its sums
    otherwise than on a small one (B^T is passed contiguous): within the rounding of a sum of
    ``H + W`` terms of the float64 kernel's result (bilinear weights of a bin sum to at most its
    sample count, so no average exceeds the largest ``|data|``)."""
    rng = np.random.default_rng(11)
    data = rng.standard_normal((1, 256, 40, 72)).astype(np.float32)
    start = rng.uniform(0, [72, 40], (30, 2))
    rois = np.concatenate([start, start + rng.uniform(2, 30, (30, 2))], axis=1).astype(np.float32)
    indices = np.zeros(30, np.int64)
    attrs = dict(output_size=(7, 7), sampling_ratio=2, spatial_scale=1.0, mode="avg",
                 coordinate_transformation_mode="half_pixel")
    got = _forced(method, data, rois, indices, attrs)
    want = _forced(method, data.astype(np.float64), rois.astype(np.float64), indices, attrs)
    assert got.dtype == np.float32 and want.dtype == np.float64
    bound = (40 + 72 + 4) * np.finfo(np.float32).eps * np.abs(data).max()
    assert np.abs(got - want).max() <= bound
    assert np.abs(want).max() > 0.1         # the boxes sample the map, not its empty outside
