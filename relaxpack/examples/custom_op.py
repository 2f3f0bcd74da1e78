"""A custom op end to end (README.md shows this file; a test runs it).

Importing it registers both sides, so it is also a command-line plugin:
``relaxpack convert row_norm.onnx --plugin relaxpack.examples.custom_op``.
"""
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.importers.onnx import call_registered, register_converter
from relaxpack.runtime import InferenceSession, register_func


def make_model():
    """y = RowNorm(x @ w): RowNorm is an op of the company's own domain "acme"."""
    w = np.random.default_rng(0).standard_normal((4, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("RowNorm", ["h"], ["y"], domain="acme", eps=1e-6)],
        "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme", 1)])


# Build side: RowNorm becomes a call of the function "acme.row_norm". Its
# output has x's (symbolic) shape and dtype; dps=True lets the memory planner
# allocate it and the function write into it.
@register_converter("acme", "RowNorm", since_opset=1)
def convert_row_norm(ctx, x, *, eps=1e-5):
    return call_registered(ctx, "acme.row_norm", [x], (x.shape, x.dtype), dps=True, eps=eps)


# Deploy side (numpy only): the archive names "acme.row_norm" and holds no
# code, so the process that runs it registers the function first.
@register_func("acme.row_norm", dps=True)
def row_norm(x, *, eps, out):
    np.divide(x, np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + eps), out=out)


def main(path="row_norm.rpk"):
    onnx.save(make_model(), str(Path(path).with_suffix(".onnx")))
    mod = relaxpack.from_onnx(make_model(), dims={"batch": (1, 16)})
    relaxpack.build(mod).save(path)                        # convert and pack
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    (y,) = InferenceSession(path).run(None, {"x": x})     # deploy and run
    h = x @ numpy_helper.to_array(make_model().graph.initializer[0])
    np.testing.assert_allclose(y, h / np.sqrt((h * h).sum(-1, keepdims=True) + 1e-6), rtol=1e-5)
    print("custom op ok:", y.shape)
    print(f"next: relaxpack run {path} --plugin relaxpack.examples.custom_op --fill random --dim batch=3")


if __name__ == "__main__":
    main(*sys.argv[1:])
