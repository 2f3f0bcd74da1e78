"""non_max_suppression (kernels/detection.py): the blocked suppression matrix and its
greedy pass over Python ints, against onnx's reference evaluator and onnxruntime, and with
blocks of one candidate (the row at a time pass it replaced) and of a few (many block
boundaries): no box, one box, ties, coinciding, flipped and empty boxes, both box formats,
max_output_boxes_per_class 0 / 1 / more than there are, iou and score thresholds at their
edges, several batches and classes, more candidates than a block."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import detection

from .test_kernels_registry import run_onnx


def _boxes(rng, batches, classes, n, center, grid=6):
    """Boxes on a coarse grid (many overlap, some coincide, some are flipped or empty) and
    scores with ties."""
    a = rng.integers(0, grid, (batches, n, 2)).astype(np.float32)
    size = rng.integers(-3, 4, (batches, n, 2)).astype(np.float32)
    boxes = np.concatenate([a, np.abs(size) if center else a + size], axis=2)
    scores = rng.integers(0, 10, (batches, classes, n)).astype(np.float32) / 10
    return boxes, scores


def _run(boxes, scores, max_out, iou, score, center, block=None):
    inputs = [np.array([max_out], np.int64), None if iou is None else np.array([iou], np.float32),
              None if score is None else np.array([score], np.float32)]
    with pytest.MonkeyPatch.context() as patch:
        if block is not None:
            patch.setattr(detection, "BLOCK", block)
        return detection.non_max_suppression(boxes, scores, *inputs, center_point_box=center)


def _check(boxes, scores, max_out, iou, score, center, backends=("ref", "ort")):
    got = _run(boxes, scores, max_out, iou, score, center)
    assert got.dtype == np.int64 and got.shape[1:] == (3,)
    for block in (1, 3, 7):
        np.testing.assert_array_equal(_run(boxes, scores, max_out, iou, score, center, block), got)
    inputs = [boxes, scores, np.array([max_out], np.int64),
              np.array([0.0 if iou is None else iou], np.float32)]
    if score is not None:
        inputs.append(np.array([score], np.float32))
    for backend in backends:
        want, = run_onnx("NonMaxSuppression", inputs, {"center_point_box": center}, out_dtypes=[np.int64],
                         backend=backend, opset=11)
        np.testing.assert_array_equal(got, want.reshape(-1, 3), err_msg=backend)
    return got


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("iou,score", [(0.3, 0.25), (0.0, None), (0.5, 0.0), (1.0, None), (0.3, 0.95)])
def test_against_the_references(center, iou, score):
    rng = np.random.default_rng(int(iou * 10) + center)
    boxes, scores = _boxes(rng, 2, 3, 23, center)
    _check(boxes, scores, 5, iou, score, center)
    _check(boxes, scores, 100, iou, score, center)


@pytest.mark.parametrize("n", [0, 1, 2])
@pytest.mark.parametrize("max_out", [0, 1, 3])
def test_few_boxes_and_small_limits(n, max_out):
    rng = np.random.default_rng(n)
    boxes, scores = _boxes(rng, 1, 2, n, 0)
    got = _check(boxes, scores, max_out, 0.4, None, 0)
    if max_out == 0:
        assert got.shape == (0, 3)


@pytest.mark.parametrize("counts", [[], [0], [3], [0, 2, 0], [1, 0, 0, 4], [0, 0, 0, 0, 0, 2]])
def test_selected_rows_name_batch_and_class_of_each_group(counts):
    """The rows filled by column are the ``[batch, class, box]`` tuples in turn, with groups that
    kept nothing at the start, between others and at the end (``classes`` 2: groups cross batches)."""
    kept = list(range(100, 100 + sum(counts)))
    want = [(g // 2, g % 2, k) for g, n in enumerate(counts)
            for k in kept[sum(counts[:g]):sum(counts[:g]) + n]]
    got = detection._selected_rows(kept, counts, 2)
    assert got.dtype == np.int64 and got.shape == (len(kept), 3)
    np.testing.assert_array_equal(got, np.array(want, np.int64).reshape(-1, 3))


@pytest.mark.parametrize("batches,classes", [(0, 2), (2, 0), (3, 4)])
def test_no_batch_no_class_and_many_of_both(batches, classes):
    rng = np.random.default_rng(batches * 10 + classes)
    boxes, scores = _boxes(rng, batches, classes, 9, 0)
    got = _check(boxes, scores, 2, 0.3, 0.2, 0, backends=("ref",))
    assert len(got) <= batches * classes * 2
    if batches * classes:
        assert len(got) > 0 and set(got[:, 0]) == set(range(batches))


def test_ties_pick_the_lower_index_first():
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1], [5, 5, 6, 6]]], np.float32)
    scores = np.array([[[0.5, 0.5, 0.7, 0.5]]], np.float32)
    got = _check(boxes, scores, 10, 0.5, None, 0)
    np.testing.assert_array_equal(got[:, 2], [2, 3])
    got = _check(boxes, scores, 10, 1.0, None, 0)              # nothing is suppressed at IoU 1
    np.testing.assert_array_equal(got[:, 2], [2, 0, 1, 3])


def test_more_candidates_than_a_block():
    """600 candidates: five blocks of 128, the later ones reached with candidates alive, each
    block's kept boxes striking later candidates off."""
    rng = np.random.default_rng(9)
    boxes, scores = _boxes(rng, 1, 1, 600, 0, grid=60)
    scores = rng.random(scores.shape).astype(np.float32)
    got = _check(boxes, scores, 1000, 0.5, None, 0, backends=("ort",))
    assert len(got) > 256


def _pairwise(corners, iou):
    """The suppression test of every pair as written out (``ix1 > ix0``, ``iy1 > iy0``, the
    intersection, both areas and the union positive, IoU above the threshold): the oracle of
    the kernel's shortened form."""
    (ry0, rx0, ry1, rx1), (cy0, cx0, cy1, cx1) = ((c[:, None] for c in corners), (c[None, :] for c in corners))
    with np.errstate(all="ignore"):
        iy0, ix0, iy1, ix1 = np.maximum(cy0, ry0), np.maximum(cx0, rx0), np.minimum(cy1, ry1), np.minimum(cx1, rx1)
        inter = (ix1 - ix0) * (iy1 - iy0)
        row_area, area = (rx1 - rx0) * (ry1 - ry0), (cx1 - cx0) * (cy1 - cy0)
        union = area + row_area - inter
        valid = (ix1 > ix0) & (iy1 > iy0) & (inter > 0) & (area > 0) & (row_area > 0) & (union > 0)
        return valid & (inter / union > iou)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_suppression_matrix_at_its_edges(dtype):
    """Touching, coinciding, empty, flipped, infinite and NaN boxes, signed zeros and overlaps
    whose product underflows: the kernel's matrix is the written-out test's, element for element."""
    rng = np.random.default_rng(11)
    tiny = np.finfo(dtype).smallest_subnormal
    special = np.array([[0, 0, 1, 1], [0, 1, 1, 2], [0, 0, 1, 1], [1, 1, 1, 1], [2, 2, 0, 0],
                        [-0.0, -0.0, 0.0, 0.0], [0, 0, np.inf, np.inf], [-np.inf, 0, np.inf, 1],
                        [np.nan, 0, 1, 1], [0, 0, tiny, tiny], [0, 0, 2 * tiny, 1]], dtype)
    boxes = np.concatenate([special, rng.integers(-2, 4, (30, 4)).astype(dtype),
                            rng.uniform(-2, 4, (30, 4)).astype(dtype)])
    corners = detection._corners(boxes, 0)
    with np.errstate(all="ignore"):
        area = (corners[3] - corners[1]) * (corners[2] - corners[0])
    n = len(boxes)
    for iou in (0.0, 0.3, 1.0):
        threshold = dtype(iou)
        got = detection._suppression(corners, area, slice(0, n), slice(0, n), threshold)
        np.testing.assert_array_equal(got, _pairwise(corners, threshold))
        block = detection._suppression(corners, area, slice(5, 17), slice(3, n), threshold)
        np.testing.assert_array_equal(block, _pairwise(corners, threshold)[5:17, 3:])
