"""Run-time indices are checked against ``[-n, n)`` by every index-taking op,
at -O0 and -O2 (issue 20, item 3): ``Gather`` with ``-4`` on an axis of 3
used to return row 2 (the importer added n to a negative index before the
kernel's check). In-range negative indices count from the end, as in
onnxruntime; OneHot's out-of-range indices give a row of off values (the
spec's rule), never an error."""

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.runtime import VirtualMachine

DATA = np.arange(12, dtype=np.float32).reshape(3, 4)


def model(op, inputs, index_shape, out_shape=None, opset=18, **attrs):
    """``op(data, indices[, updates])`` with data (3, 4) float and run-time int64 indices."""
    infos = [helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 4]),
             helper.make_tensor_value_info("indices", TensorProto.INT64, list(index_shape))]
    if "updates" in inputs:
        infos.append(helper.make_tensor_value_info("updates", TensorProto.FLOAT, list(index_shape)
                                                   if op != "ScatterND" else [index_shape[0], 4]))
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


CASES = [  # (op, inputs, attrs, out-of-range indices, in-range indices)
    ("Gather", ["data", "indices"], {"axis": 0}, np.array([-4]), np.array([-3])),
    ("Gather", ["data", "indices"], {"axis": 0}, np.array([3]), np.array([2])),
    ("Gather", ["data", "indices"], {"axis": 1}, np.array([1, -5]), np.array([1, -4])),
    ("GatherElements", ["data", "indices"], {"axis": 1}, np.full((3, 1), -5), np.full((3, 1), -4)),
    ("GatherElements", ["data", "indices"], {"axis": 0}, np.full((1, 4), 3), np.full((1, 4), -1)),
    ("GatherND", ["data", "indices"], {}, np.array([[-4, 0]]), np.array([[-3, -4]])),
    ("GatherND", ["data", "indices"], {}, np.array([[0, 4]]), np.array([[0, 3]])),
    ("ScatterElements", ["data", "indices", "updates"], {"axis": 1}, np.full((3, 1), -5), np.full((3, 1), -4)),
    ("ScatterElements", ["data", "indices", "updates"], {"axis": 0}, np.full((1, 4), 3), np.full((1, 4), -3)),
    ("ScatterND", ["data", "indices", "updates"], {}, np.array([[-4]]), np.array([[-3]])),
    ("ScatterND", ["data", "indices", "updates"], {}, np.array([[3]]), np.array([[2]])),
]


def feeds(op, indices):
    out = {"data": DATA, "indices": indices.astype(np.int64)}
    if op.startswith("Scatter"):
        shape = indices.shape if op != "ScatterND" else (indices.shape[0], 4)
        out["updates"] = np.full(shape, 100.0, np.float32)
    return out


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("op, inputs, attrs, bad, good", CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3].reshape(-1)[-1]}" for c in CASES])
def test_indices_outside_the_axis_are_refused_and_inside_count_from_the_end(op, inputs, attrs, bad, good, level):
    onnx_model = model(op, inputs, bad.shape, **attrs)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onnx_model), opt_level=level))
    with pytest.raises(ShapeError, match=r"index -?\d+ is out of range for axis \d of size \d") as info:
        vm.run(feeds(op, bad))
    assert "\n" not in str(info.value)
    want = ReferenceEvaluator(onnx_model).run(None, feeds(op, good))[0]
    np.testing.assert_array_equal(vm.run(feeds(op, good))["y"], want)


@pytest.mark.parametrize("level", [0, 2])
def test_one_hot_gives_off_values_for_indices_out_of_range(level):
    infos = [helper.make_tensor_value_info("indices", TensorProto.INT64, [5])]
    depth = helper.make_tensor("depth", TensorProto.INT64, [], [3])
    values = helper.make_tensor("values", TensorProto.FLOAT, [2], [0.5, 2.0])
    node = helper.make_node("OneHot", ["indices", "depth", "values"], ["y"], axis=-1)
    graph = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [depth, values])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    indices = np.array([-4, -3, -1, 2, 3], np.int64)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onnx_model), opt_level=level)).run({"indices": indices})
    np.testing.assert_array_equal(got["y"], [[0.5] * 3, [2, 0.5, 0.5], [0.5, 0.5, 2], [0.5, 0.5, 2], [0.5] * 3])


@pytest.mark.parametrize("level", [0, 2])
def test_compress_refuses_a_condition_that_selects_past_the_axis(level):
    infos = [helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 4]),
             helper.make_tensor_value_info("cond", TensorProto.BOOL, [5])]
    node = helper.make_node("Compress", ["data", "cond"], ["y"], axis=0)
    graph = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onnx_model), opt_level=level))
    with pytest.raises(ShapeError, match="selects index 4 of an axis of length 3"):
        vm.run({"data": DATA, "cond": np.array([1, 0, 0, 0, 1], bool)})
    np.testing.assert_array_equal(vm.run({"data": DATA, "cond": np.array([0, 1, 1, 0, 0], bool)})["y"], DATA[1:])
