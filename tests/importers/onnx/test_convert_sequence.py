"""Sequence and optional ops against onnxruntime / onnx's reference, sequence
graph inputs and outputs, and the input checks of the VM."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from relaxpack.errors import InputError
from relaxpack.runtime import VirtualMachine, load

from .helpers import check_model

SEQ_F32 = h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, ["a", "b"]))


def _model(nodes, inputs, outputs, opset=17):
    graph = h.make_graph(nodes, "g", inputs, outputs)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


def test_construct_insert_erase_at_length_concat():
    nodes = [h.make_node("SequenceConstruct", ["x", "y"], ["s1"]),
             h.make_node("SequenceInsert", ["s1", "x", "zero"], ["s2"]),
             h.make_node("SequenceErase", ["s2", "minus1"], ["s3"]),
             h.make_node("SequenceAt", ["s3", "one"], ["at"]),
             h.make_node("SequenceLength", ["s3"], ["len"]),
             h.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=1),
             h.make_node("ConcatFromSequence", ["s3"], ["stacked"], axis=0, new_axis=1)]
    inputs = [h.make_tensor_value_info(n, T.FLOAT, [2, 3]) for n in ("x", "y")]
    inputs += [h.make_tensor_value_info(n, T.INT64, []) for n in ("zero", "minus1", "one")]
    outputs = [h.make_tensor_value_info("at", T.FLOAT, None), h.make_tensor_value_info("len", T.INT64, None),
               h.make_tensor_value_info("cat", T.FLOAT, None), h.make_tensor_value_info("stacked", T.FLOAT, None)]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((2, 3)).astype(np.float32), "y": rng.standard_normal((2, 3)).astype(np.float32),
             "zero": np.array(0, np.int64), "minus1": np.array(-1, np.int64), "one": np.array(1, np.int64)}
    check_model(_model(nodes, inputs, outputs), feeds)


@pytest.mark.parametrize("split,keepdims", [(None, 1), (None, 0), (np.array(2, np.int64), 1),
                                            (np.array([1, 3], np.int64), 1)])
def test_split_to_sequence_and_back(split, keepdims):
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [4, "n"])]
    names = ["x"]
    if split is not None:
        inputs.append(h.make_tensor_value_info("split", T.INT64, list(split.shape)))
        names.append("split")
    nodes = [h.make_node("SplitToSequence", names, ["s"], axis=0, keepdims=keepdims),
             h.make_node("SequenceLength", ["s"], ["len"]),
             h.make_node("ConcatFromSequence", ["s"], ["cat"], axis=0, new_axis=1 - keepdims)]
    outputs = [h.make_tensor_value_info("len", T.INT64, None), h.make_tensor_value_info("cat", T.FLOAT, None)]
    feeds = {"x": np.arange(4 * 5, dtype=np.float32).reshape(4, 5)}
    if split is not None:
        feeds["split"] = split
    check_model(_model(nodes, inputs, outputs), feeds)


def test_sequence_input_and_output_and_archive(tmp_path):
    model = _model([h.make_node("SequenceInsert", ["xs", "x"], ["ys"])],
                   [h.make_value_info("xs", SEQ_F32), h.make_tensor_value_info("x", T.FLOAT, [2, 2])],
                   [h.make_value_info("ys", SEQ_F32)])
    exe = relaxpack.build(relaxpack.from_onnx(model))
    exe.save(tmp_path / "seq.rpk")
    loaded = load(tmp_path / "seq.rpk")
    assert [p.kind for p in loaded.function("main").params] == ["sequence", "tensor"]
    vm = VirtualMachine(loaded)
    xs = [np.ones((1, 2), np.float32), np.zeros((3, 4), np.float32)]
    out = vm.run({"xs": xs, "x": np.full((2, 2), 7, np.float32)})["ys"]
    assert isinstance(out, list) and [o.shape for o in out] == [(1, 2), (3, 4), (2, 2)]
    with pytest.raises(InputError, match="'xs'"):
        vm.run({"xs": np.ones((2, 2), np.float32), "x": np.ones((2, 2), np.float32)})
    with pytest.raises(InputError, match="'xs' element 1"):
        vm.run({"xs": [np.ones((1, 2), np.float32), np.ones((1, 2), np.int64)], "x": np.ones((2, 2), np.float32)})


def test_optional_has_and_get_element():
    opt = h.make_optional_type_proto(h.make_tensor_type_proto(T.FLOAT, [3]))
    model = _model([h.make_node("OptionalHasElement", ["o"], ["has"]),
                    h.make_node("OptionalGetElement", ["o"], ["value"])],
                   [h.make_value_info("o", opt)],
                   [h.make_tensor_value_info("has", T.BOOL, []), h.make_tensor_value_info("value", T.FLOAT, [3])],
                   opset=18)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    out = vm.run({"o": np.arange(3, dtype=np.float32)})
    assert bool(out["has"]) and out["value"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(relaxpack.RelaxpackError, match="empty"):
        vm.run({"o": None})
