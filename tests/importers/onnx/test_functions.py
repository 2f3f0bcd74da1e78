"""ONNX functions: model-local functions and schema function bodies expand in place."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import RelaxpackError, UnsupportedOpError
from relaxpack.importers.onnx import registry
from relaxpack.runtime import VirtualMachine

DOMAIN = "custom.fn"


def _scaled_add():
    """ScaledAdd(x, y?) = alpha * x + y, alpha an attribute (default 2.0); y optional."""
    alpha = onnx.AttributeProto(name="value_float", ref_attr_name="alpha", type=onnx.AttributeProto.FLOAT)
    const = helper.make_node("Constant", [], ["a"])
    const.attribute.append(alpha)
    nodes = [const, helper.make_node("Mul", ["x", "a"], ["ax"]), helper.make_node("Sum", ["ax", "y"], ["out"])]
    return helper.make_function(DOMAIN, "ScaledAdd", ["x", "y"], ["out"], nodes,
                                [helper.make_opsetid("", 17)], attributes=[],
                                attribute_protos=[helper.make_attribute("alpha", 2.0)])


def _model(node, inputs, functions, opset=17):
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n", 3]) for n in inputs],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    return helper.make_model(graph, functions=functions, ir_version=10,
                             opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(DOMAIN, 1)])


def _run_both(model, feeds):
    ours = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run(feeds)["z"]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return ours, ref


def test_a_model_local_function_expands_with_the_callers_attribute():
    node = helper.make_node("ScaledAdd", ["x", "y"], ["z"], domain=DOMAIN, alpha=0.5)
    model = _model(node, ["x", "y"], [_scaled_add()])
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((5, 3)).astype(np.float32), "y": rng.standard_normal((5, 3)).astype(np.float32)}
    ours, ref = _run_both(model, feeds)
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
    np.testing.assert_allclose(ours, 0.5 * feeds["x"] + feeds["y"], rtol=1e-6)


def test_an_omitted_attribute_takes_the_default_and_an_omitted_input_stays_omitted():
    node = helper.make_node("ScaledAdd", ["x"], ["z"], domain=DOMAIN)
    model = _model(node, ["x"], [_scaled_add()])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # onnxruntime crashes and onnx's reference evaluator refuses a function
    # called with fewer inputs than it declares; the spec allows it.
    ours = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run({"x": x})["z"]
    np.testing.assert_allclose(ours, 2.0 * x)


def test_a_schema_function_body_is_used_when_no_converter_exists(monkeypatch):
    # Drop our own Mish converter: the op then comes in through onnx's body of it.
    registry._ensure_loaded()
    monkeypatch.setitem(registry._REGISTRY, ("", "Mish"), [])
    node = helper.make_node("Mish", ["x"], ["z"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    mod = relaxpack.from_onnx(model)
    text = mod.script()
    assert "R.nn.mish" not in text
    assert "R.tanh(" in text and "R.multiply(x," in text
    x = np.linspace(-4, 4, 12, dtype=np.float32).reshape(4, 3)
    out = VirtualMachine(relaxpack.build(mod)).run({"x": x})["z"]
    np.testing.assert_allclose(out, x * np.tanh(np.log1p(np.exp(x))), rtol=1e-5, atol=1e-6)


def test_a_function_whose_body_uses_an_unsupported_op_is_reported_before_converting():
    bad = helper.make_function(DOMAIN, "Weird", ["x"], ["out"],
                               [helper.make_node("NoSuchOp", ["x"], ["out"], domain="nowhere")],
                               [helper.make_opsetid("", 17), helper.make_opsetid("nowhere", 1)])
    node = helper.make_node("Weird", ["x"], ["z"], domain=DOMAIN)
    model = _model(node, ["x"], [bad])
    model.opset_import.append(helper.make_opsetid("nowhere", 1))
    with pytest.raises(UnsupportedOpError, match="NoSuchOp"):
        relaxpack.from_onnx(model)


def test_a_function_that_calls_itself_is_an_error_not_a_hang():
    loop = helper.make_function(DOMAIN, "Forever", ["x"], ["out"],
                                [helper.make_node("Forever", ["x"], ["out"], domain=DOMAIN)],
                                [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    node = helper.make_node("Forever", ["x"], ["z"], domain=DOMAIN)
    with pytest.raises(RelaxpackError, match="Forever"):
        relaxpack.from_onnx(_model(node, ["x"], [loop]))
