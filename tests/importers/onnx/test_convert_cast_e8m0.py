"""Cast to FLOAT8E8M0 (opset 24+) with each round_mode and saturate,
against onnx's reference evaluator (onnxruntime does not run it)."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import relaxpack
from relaxpack.runtime import VirtualMachine

from .helpers import reference

X = np.array([0.0, 0.124, 0.25, 0.5, 1.1, 1.5, 1.75, 3.0, -6.0, 2.0 ** 127 * 1.5, np.inf, np.nan, 1e-40,
              2.0 ** -126 * 1.5], np.float32)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("src", [TP.FLOAT, TP.FLOAT16, TP.DOUBLE], ids=["float", "float16", "double"])
def test_cast_to_e8m0(round_mode, saturate, src):
    node = helper.make_node("Cast", ["x"], ["y"], to=TP.FLOAT8E8M0, round_mode=round_mode, saturate=saturate)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", src, ["n"])],
                              [helper.make_tensor_value_info("y", TP.FLOAT8E8M0, ["n"])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)], ir_version=11)
    x = X.astype(helper.tensor_dtype_to_np_dtype(src))
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m))).run({"x": x})["y"]
    want = reference(m, {"x": x}, "onnx")[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
