"""com.microsoft forms of ONNX ops (TransposeMatMul, GridSample, Trilu, Range, ExpandDims,
GatherND, Pad, Unique) against onnxruntime's contrib kernels."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError

from .test_convert_microsoft import check, ms_model, rand


@pytest.mark.parametrize("attrs", [{}, {"transA": 1, "alpha": 0.5}, {"transB": 1}])
def test_transpose_matmul(attrs):
    a_shape = (2, 3, 5) if attrs.get("transA") else (2, 5, 3)
    b_shape = (4, 3) if attrs.get("transB") else (3, 4)
    model = ms_model("TransposeMatMul", {"a": rand(*a_shape), "b": rand(*b_shape, seed=1)}, attrs=attrs)
    check(model, {"a": rand(*a_shape, seed=2), "b": rand(*b_shape, seed=3)})


@pytest.mark.parametrize("attrs", [{}, {"mode": "nearest", "padding_mode": "border"},
                                   {"mode": "bicubic", "align_corners": 1, "padding_mode": "reflection"}])
def test_grid_sample(attrs):
    feeds = {"x": rand(2, 3, 5, 7), "grid": rand(2, 4, 6, 2, seed=1) * 0.8}
    check(ms_model("GridSample", feeds, attrs=attrs, sym={"x": ["n", 3, 5, 7], "grid": ["n", 4, 6, 2]}), feeds)


@pytest.mark.parametrize("upper, k", [(1, None), (0, -1), (1, 2)])
def test_trilu(upper, k):
    consts = {} if k is None else {"k": np.array(k, np.int64)}
    model = ms_model("Trilu", {"x": rand(2, 4, 5)}, consts, inputs=["x"] + list(consts), attrs={"upper": upper})
    check(model, {"x": rand(2, 4, 5, seed=1)})


@pytest.mark.parametrize("dtype, delta", [(np.int64, None), (np.int32, 3), (np.float32, 0.5)])
def test_range(dtype, delta):
    feeds = {"start": np.array(2, dtype), "limit": np.array(11, dtype)}
    consts = {} if delta is None else {"delta": np.array(delta, dtype)}
    model = ms_model("Range", feeds, consts, inputs=["start", "limit"] + list(consts))
    check(model, feeds, {"start": np.array(-3, dtype), "limit": np.array(4, dtype)})


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_expand_dims(axis):
    model = ms_model("ExpandDims", {"x": rand(3, 4)}, {"axis": np.array(axis, np.int32)}, inputs=["x", "axis"],
                     sym={"x": ["n", 4]})
    check(model, {"x": rand(3, 4, seed=1)}, {"x": rand(1, 4, seed=2)})


def test_gather_nd():
    feeds = {"data": rand(3, 4, 5), "indices": np.array([[0, 1], [2, 3], [1, 0]], np.int64)}
    check(ms_model("GatherND", feeds), feeds)


@pytest.mark.parametrize("mode, two_d", [("constant", False), ("constant", True), ("reflect", True),
                                         ("edge", False)])
def test_pad(mode, two_d):
    pads = np.array([0, 1, 2, 0, 2, 1], np.int64)
    consts = {"pads": pads.reshape(1, -1) if two_d else pads}
    inputs = ["x", "pads"]
    if mode == "constant":
        consts["value"] = np.array(1.5, np.float32)
        inputs.append("value")
    model = ms_model("Pad", {"x": rand(2, 4, 5)}, consts, inputs=inputs, attrs={"mode": mode})
    check(model, {"x": rand(2, 4, 5, seed=1)})


def test_unique_in_order_of_first_occurrence():
    feeds = {"x": np.array([3.0, 1.0, 3.0, 2.0, 1.0, 7.0, 3.0], np.float32)}
    model = ms_model("Unique", feeds, outputs=["y", "idx", "counts"], sym={"x": ["n"]})
    check(model, feeds, {"x": np.array([5.0], np.float32)}, {"x": rand(9, seed=1).round()})


def test_unique_of_two_dims_is_refused():
    model = ms_model("Unique", {"x": rand(2, 3)}, outputs=["y", "idx", "counts"])
    with pytest.raises(ShapeError, match="must be 1-D"):
        relaxpack.from_onnx(model)
