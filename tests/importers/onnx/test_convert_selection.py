"""Unique and Compress (converters/selection.py) against onnxruntime:
sorted and first-occurrence order, with and without an axis, each dtype,
symbolic and empty dims, and a run through a saved archive."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.runtime import VirtualMachine, load
from relaxpack.vm_build import build

from .helpers import check, check_model, one_node


def repeats(shape, dtype, seed=0):
    """Values from a small set, so rows and elements repeat."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    return rng.integers(0 if np.dtype(dtype).kind == "u" else -2, 3, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int64"])
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_flattened(dtype, sorted_):
    feeds = [{"x": repeats((n, 3), dtype, n)} for n in (5, 1, 0, 8)]
    check("Unique", feeds[0], more=feeds[1:], attrs={"sorted": sorted_}, outputs=4, opset=11,
          sym={"x": ["n", 3]})


@pytest.mark.parametrize("dtype", ["int16", "int32", "uint8", "uint64", "bool"])
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_other_dtypes(dtype, sorted_):
    """Dtypes onnxruntime's Unique lacks, against onnx's reference evaluator (1-D:
    its first-occurrence order takes from the unflattened input)."""
    feeds = [{"x": repeats((n,), dtype, n)} for n in (9, 1, 0)]
    check("Unique", feeds[0], more=feeds[1:], attrs={"sorted": sorted_}, outputs=4, opset=11, sym={"x": ["n"]},
          ref="onnx")


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_along_an_axis(axis, sorted_):
    feeds = [{"x": repeats((n, 4, 2), "float32", n)} for n in (7, 2, 1)]
    mod = check("Unique", feeds[0], more=feeds[1:], attrs={"sorted": sorted_, "axis": axis}, outputs=4,
                opset=11, sym={"x": ["n", 4, 2]})
    text = mod.script()
    assert 'R.call_packed("unique"' in text and "R.match_cast" in text


def test_unique_of_a_constant_folds():
    model = one_node("Unique", {}, consts={"c": np.array([3, 1, 3, 2], np.int64)}, attrs={"sorted": 0},
                     outputs=4, opset=11)
    mod = check_model(model, {})
    assert "call_packed" not in mod.script()


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "uint16"])
def test_compress(axis, dtype):
    attrs = {} if axis is None else {"axis": axis}
    rng = np.random.default_rng(1)
    feeds = [{"x": repeats((n, 5), dtype, n), "c": rng.random(k) < 0.5} for n, k in ((4, 4), (3, 2), (0, 0), (6, 1))]
    check("Compress", feeds[0], more=feeds[1:], attrs=attrs, opset=11, sym={"x": ["n", 5], "c": ["k"]})


def test_compress_without_axis_takes_a_condition_of_the_inputs_shape_as_onnxruntime_does():
    """paddle2onnx writes masked_select as Compress(x, x > 0) with no axis: an N-D condition the
    spec does not allow and onnxruntime reads flattened, as numpy's x[mask]."""
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((n, 4)).astype(np.float32), "c": rng.random((n, 4)) < 0.5} for n in (3, 1, 5)]
    check("Compress", feeds[0], more=feeds[1:], opset=11, sym={"x": ["n", 4], "c": ["n", 4]})


def test_compress_through_a_saved_archive(tmp_path):
    x, c = repeats((4, 3), "float32"), np.array([True, False, True])
    model = one_node("Compress", {"x": x, "c": c}, attrs={"axis": 1}, opset=11, sym={"x": ["n", 3]})
    path = tmp_path / "m.rpk"
    build(relaxpack.from_onnx(model)).save(str(path))
    got = VirtualMachine(load(str(path))).run({"x": x, "c": c})["y0"]
    np.testing.assert_array_equal(got, x[:, [0, 2]])


def test_compress_rejects_a_condition_past_the_axis():
    model = one_node("Compress", {"x": np.ones((2, 3), np.float32), "c": np.ones(4, bool)}, attrs={"axis": 1},
                     opset=11)
    vm = VirtualMachine(build(relaxpack.from_onnx(model)))
    with pytest.raises(ShapeError, match="compress: condition selects index 3 of an axis of length 3"):
        vm.run({"x": np.ones((2, 3), np.float32), "c": np.ones(4, bool)})
