"""Deliberate refusals (importers/onnx/refusals.py): the map ops CastMap,
DictVectorizer and ZipMap, and graph inputs of map type, fail at import with
one line naming the op, its domain and opset, that maps are not supported,
and how to do without them; a converter registered for a refused op wins."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import UnsupportedOpError
from relaxpack.importers.onnx import registry
from relaxpack.importers.onnx.refusals import REFUSALS
from relaxpack.ops.registry import make_call
from relaxpack.runtime import VirtualMachine

ML = "ai.onnx.ml"


def _ml_model(node, inputs, outputs, ml_opset=1):
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)],
                             ir_version=10)


def _map_input(name, key, value):
    return helper.make_value_info(name, helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, None)))


def _one_line_error(model) -> str:
    with pytest.raises(UnsupportedOpError) as info:
        relaxpack.from_onnx(model)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_cast_map_is_refused_naming_op_domain_opset_and_maps():
    node = helper.make_node("CastMap", ["m"], ["y"], domain=ML, cast_to="TO_FLOAT", map_form="DENSE")
    model = _ml_model(node, [_map_input("m", TensorProto.INT64, TensorProto.STRING)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    message = _one_line_error(model)
    assert message.startswith("CastMap (domain ai.onnx.ml, opset 1) is not supported: its input is a map")
    assert "map-typed values (ONNX map(K, V), Python dicts) are not supported" in message


def test_dict_vectorizer_is_refused_with_the_way_around_it():
    node = helper.make_node("DictVectorizer", ["m"], ["y"], domain=ML, string_vocabulary=["a", "b"])
    model = _ml_model(node, [_map_input("m", TensorProto.STRING, TensorProto.FLOAT)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], ml_opset=3)
    message = _one_line_error(model)
    assert message.startswith("DictVectorizer (domain ai.onnx.ml, opset 3) is not supported")
    assert "map-typed values" in message and "vectorize the dicts before the model" in message


def test_dict_vectorizer_from_skl2onnx_is_refused():
    pytest.importorskip("sklearn")
    skl2onnx = pytest.importorskip("skl2onnx")
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    from sklearn.feature_extraction import DictVectorizer
    fitted = DictVectorizer(sparse=False).fit([{"a": 1.0, "b": 2.0}, {"c": 3.0}])
    onx = skl2onnx.convert_sklearn(fitted, initial_types=[("m", DictionaryType(StringTensorType([1]),
                                                                                FloatTensorType([1])))])
    assert "DictVectorizer" in [n.op_type for n in onx.graph.node]
    assert "DictVectorizer (domain ai.onnx.ml, opset" in _one_line_error(onx)


def test_a_refused_op_among_other_unsupported_ops_keeps_its_reason():
    nodes = [helper.make_node("CastMap", ["m"], ["t"], domain=ML),
             helper.make_node("NoSuchOp", ["t"], ["y"], domain="acme")]
    graph = helper.make_graph(nodes, "g", [_map_input("m", TensorProto.INT64, TensorProto.FLOAT)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1),
                                                    helper.make_opsetid("acme", 1)], ir_version=10)
    message = _one_line_error(model)
    assert "CastMap (domain ai.onnx.ml, opset 1) is not supported: its input is a map" in message
    assert "unsupported op(s): NoSuchOp (domain acme, opset 1)" in message


def test_a_map_graph_input_fails_in_one_line():
    node = helper.make_node("Identity", ["m"], ["y"])
    graph = helper.make_graph([node], "g", [_map_input("m", TensorProto.STRING, TensorProto.FLOAT)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    message = _one_line_error(model)
    assert message == ("graph input 'm' is a map (map(string, float32)): relaxpack values are tensors, sequences "
                       "and optionals; map-typed values are not supported (feed the map's contents as tensors "
                       "instead)")


def test_a_sequence_of_maps_graph_input_names_the_map():
    seq = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    graph = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["y"])], "g",
                              [helper.make_value_info("s", seq)],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    message = _one_line_error(model)
    assert "graph input 's' holds map(int64, float32) elements" in message and "map-typed values" in message


def test_no_refused_op_has_a_converter():
    """A refusal stands in for a missing converter; both at once would make
    the coverage matrix's "refused" row a lie."""
    for domain, op in REFUSALS:
        assert registry.find_converter(domain, op, 1) is None, op


def test_a_registered_converter_overrides_a_refusal(monkeypatch):
    """A user's converter for ZipMap (say, one that keeps the probabilities) is used."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register_converter(ML, "ZipMap", since_opset=1,
                                fn=lambda ctx, x, **attrs: make_call("astype", ctx.expr(x), dtype="float32"))
    node = helper.make_node("ZipMap", ["p"], ["y"], domain=ML, classlabels_int64s=[0, 1])
    model = _ml_model(node, [helper.make_tensor_value_info("p", TensorProto.FLOAT, [2, 2])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    p = np.array([[0.25, 0.75], [1, 0]], np.float32)
    np.testing.assert_array_equal(vm.run({"p": p})["y"], p)
