"""The reference evaluator behind ``relaxpack check``'s judgement covers QDQ models of
opset 10 to 18 (onnxruntime's quantizer writes opset 13 to 17 by default), though onnx's
evaluator implements DequantizeLinear from opset 19 only."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from relaxpack.check import reference_output


def qdq_model(opset: int, axis: int | None):
    """x -> QuantizeLinear -> DequantizeLinear (per tensor, or per channel on ``axis``)."""
    per_channel = axis is not None
    scale = [0.5, 0.25, 0.125] if per_channel else [0.1]
    zero = [3, 0, 250] if per_channel else [128]
    dims = [3] if per_channel else []
    attrs = {"axis": axis} if per_channel else {}
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **attrs),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], **attrs)],
        "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor("s", TensorProto.FLOAT, dims, scale),
         helper.make_tensor("z", TensorProto.UINT8, dims, zero)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), np.array(scale), np.array(zero)


@pytest.mark.parametrize("opset, axis", [(10, None), (13, None), (13, 1), (17, 1), (21, 1)])
def test_the_reference_dequantizes_at_every_opset(opset, axis):
    model, scale, zero = qdq_model(opset, axis)
    x = np.array([[-20.0, 0.3, 1.1], [7.77, -0.6, 40.0]], np.float32)
    got = reference_output(model, {"x": x}, "y")
    assert got is not None, "the reference evaluator could not run the QDQ model"
    want = ((np.clip(np.rint(x / scale) + zero, 0, 255) - zero) * scale).astype(np.float32)
    np.testing.assert_array_equal(got, want)
