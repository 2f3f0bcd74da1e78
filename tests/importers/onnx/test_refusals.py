"""Deliberate refusals (importers/onnx/refusals.py): an op in the table fails at import with one
line naming the op, its domain and opset, the reason and the way around it; a converter
registered for a refused op wins. The table holds onnxruntime's NCHWc layout ops (the map ops it
held, ZipMap, CastMap and DictVectorizer, convert since maps joined the IR: test_maps.py); most
tests put an entry of their own in it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import UnsupportedOpError
from relaxpack.importers.onnx import refusals, registry
from relaxpack.importers.onnx.refusals import REFUSALS, Refusal, find_refusal
from relaxpack.ops.registry import make_call
from relaxpack.runtime import VirtualMachine

ACME = "acme.vision"


@pytest.fixture
def refused(monkeypatch):
    """The table with ``acme.vision`` Warp refused."""
    entry = Refusal(ACME, "Warp", "a warp field", "it reads a warp field relaxpack has no kernel for",
                    "apply the warp before the model")
    monkeypatch.setattr(refusals, "REFUSALS", {**REFUSALS, (ACME, "Warp"): entry})
    return entry


def _model(nodes, opsets=((ACME, 2),)):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   *(helper.make_opsetid(d, v) for d, v in opsets)], ir_version=10)


def _one_line_error(model) -> str:
    with pytest.raises(UnsupportedOpError) as info:
        relaxpack.from_onnx(model)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_refused_op_names_op_domain_opset_reason_and_workaround(refused):
    message = _one_line_error(_model([helper.make_node("Warp", ["x"], ["y"], domain=ACME)]))
    assert message == ("Warp (domain acme.vision, opset 2) is not supported: it reads a warp field relaxpack has "
                       "no kernel for; apply the warp before the model")


def test_a_refused_op_among_other_unsupported_ops_keeps_its_reason(refused):
    nodes = [helper.make_node("Warp", ["x"], ["t"], domain=ACME),
             helper.make_node("NoSuchOp", ["t"], ["y"], domain="acme")]
    message = _one_line_error(_model(nodes, ((ACME, 2), ("acme", 1))))
    assert "Warp (domain acme.vision, opset 2) is not supported: it reads a warp field" in message
    assert "unsupported op(s): NoSuchOp (domain acme, opset 1)" in message


def test_a_registered_converter_overrides_a_refusal(refused, monkeypatch):
    """A user's converter for a refused op is used."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register_converter(ACME, "Warp", since_opset=1,
                                fn=lambda ctx, x, **attrs: make_call("negative", ctx.expr(x)))
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(_model([helper.make_node("Warp", ["x"], ["y"],
                                                                                      domain=ACME)]))))
    x = np.array([[0.25, 0.75], [1, 0]], np.float32)
    np.testing.assert_array_equal(vm.run({"x": x})["y"], -x)


def test_no_refused_op_has_a_converter():
    """A refusal stands in for a missing converter; both at once would make the coverage
    matrix's "refused" row a lie. The map ops left the table when they gained converters."""
    for domain, op in REFUSALS:
        assert registry.find_converter(domain, op, 1) is None, op
    for op in ("ZipMap", "CastMap", "DictVectorizer"):
        assert find_refusal("ai.onnx.ml", op) is None
        assert registry.find_converter("ai.onnx.ml", op, 1) is not None


def test_onnxruntimes_nchwc_layout_ops_share_one_reason_in_one_line():
    """A CNN whose optimized graph onnxruntime saved at ORT_ENABLE_ALL holds NCHWc blocks of its
    CPU's size: the error names every such op once, why, and how to get a graph relaxpack takes."""
    nchwc = refusals.NCHWC_DOMAIN
    nodes = [helper.make_node("ReorderInput", ["x"], ["b"], domain=nchwc),
             helper.make_node("MaxPool", ["b"], ["p"], domain=nchwc, kernel_shape=[1, 1]),
             helper.make_node("ReorderOutput", ["p"], ["y"], domain=nchwc, channels=2)]
    message = _one_line_error(_model(nodes, ((nchwc, 1),)))
    assert message.startswith("MaxPool, ReorderInput, ReorderOutput (domain com.microsoft.nchwc, opset 1) are not "
                              "supported: onnxruntime's NCHWc layout"), message
    assert message.endswith("save its optimized graph at ORT_ENABLE_EXTENDED") and message.count("NCHWc") == 1
