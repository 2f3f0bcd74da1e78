"""Det (converters/linalg.py) against onnxruntime: batches of square
matrices, symbolic and empty batch dims, singular matrices."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError

from .helpers import check, one_node, rand


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_det_batched(dtype, m):
    feeds = [{"x": rand(b, 2, m, m, dtype=dtype, seed=b)} for b in (3, 1, 0)]
    singular = rand(2, 2, m, m, dtype=dtype, seed=9)
    singular[..., -1, :] = singular[..., 0, :]          # two equal rows
    feeds.append({"x": singular})
    ref = "ort" if dtype == np.float32 else "onnx"      # onnxruntime's Det is float32 only
    check("Det", feeds[0], more=feeds[1:], opset=11, sym={"x": ["b", 2, m, m]}, ref=ref)


def test_det_of_one_matrix_is_a_scalar():
    check("Det", {"x": rand(4, 4)}, opset=22)


def test_det_float16_rounds_once():
    x = rand(3, 3, 3, seed=4).astype(np.float16)
    check("Det", {"x": x}, opset=22, ref=lambda f: [np.linalg.det(f["x"].astype(np.float32)).astype(np.float16)])


def test_det_needs_square_matrices():
    with pytest.raises(ShapeError, match=r"R.det: needs square matrices, got \(2, 3, 4\).*at Det"):
        relaxpack.from_onnx(one_node("Det", {"x": rand(2, 3, 4)}, opset=11))
