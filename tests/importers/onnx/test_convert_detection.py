"""NonMaxSuppression (converters/detection.py) against onnxruntime and onnx's
reference evaluator: random boxes in both box formats, with and without the
optional inputs, symbolic and empty dims."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError

from .helpers import check, check_model, one_node


def boxes_and_scores(batches, classes, n, seed=0, center=False):
    """Boxes on a coarse grid, so many overlap, some coincide and some are flipped."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 6, (batches, n, 2)).astype(np.float32)
    size = rng.integers(-3, 4, (batches, n, 2)).astype(np.float32)
    if center:
        boxes = np.concatenate([a, np.abs(size)], axis=2)
    else:
        boxes = np.concatenate([a, a + size], axis=2)
    scores = rng.integers(0, 10, (batches, classes, n)).astype(np.float32) / 10   # ties on purpose
    return boxes, scores


def nms_feeds(batches, classes, n, seed=0, center=False, max_out=3, iou=0.3, score=0.25):
    boxes, scores = boxes_and_scores(batches, classes, n, seed, center)
    return {"boxes": boxes, "scores": scores, "max_out": np.array([max_out], np.int64),
            "iou": np.array([iou], np.float32), "score": np.array([score], np.float32)}


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("ref", ["ort", "onnx"])
def test_nms_random_boxes_symbolic_dims(center, ref):
    sym = {"boxes": ["b", "n", 4], "scores": ["b", "c", "n"]}
    feeds = [nms_feeds(2, 3, 13, 0, center), nms_feeds(1, 1, 1, 1, center),
             nms_feeds(3, 2, 40, 2, center, 7, 0.0, 0.5), nms_feeds(2, 2, 0, 3, center),
             nms_feeds(1, 2, 9, 4, center, 0)]
    check("NonMaxSuppression", feeds[0], more=feeds[1:], sym=sym, attrs={"center_point_box": center},
          opset=11, ref=ref)


@pytest.mark.parametrize("given", [2, 3, 4])
def test_nms_optional_inputs_omitted(given):
    """Without max_output_boxes_per_class nothing is selected; without
    score_threshold every box is a candidate."""
    feeds = nms_feeds(2, 2, 11, 5)
    names = ["boxes", "scores", "max_out", "iou", "score"][:given]
    feeds = {k: feeds[k] for k in names}
    empty = {**feeds, "boxes": feeds["boxes"][:, :0], "scores": feeds["scores"][..., :0]}
    check("NonMaxSuppression", feeds, more=[empty],
          sym={"boxes": ["b", "n", 4], "scores": ["b", "c", "n"]}, opset=11)


def test_nms_constant_thresholds_and_opset_10():
    boxes, scores = boxes_and_scores(1, 2, 17, 6)
    model = one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores}, opset=10,
                     consts={"max_out": np.array([5], np.int64), "iou": np.array([0.5], np.float32)})
    check_model(model, {"boxes": boxes, "scores": scores})


def test_nms_of_constants_folds():
    boxes, scores = boxes_and_scores(1, 1, 6, 7)
    model = one_node("NonMaxSuppression", {}, consts={"boxes": boxes, "scores": scores,
                                                    "max_out": np.array([4], np.int64)}, opset=11)
    mod = check_model(model, {})
    assert "call_packed" not in mod.script()


def test_nms_rejects_boxes_without_4_coordinates():
    boxes, scores = np.zeros((1, 3, 5), np.float32), np.zeros((1, 1, 3), np.float32)
    with pytest.raises(ShapeError, match=r"NonMaxSuppression.*\(batches, boxes, 4\)"):
        relaxpack.from_onnx(one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores}, opset=11))
