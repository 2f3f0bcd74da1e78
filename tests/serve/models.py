"""Small models with symbolic dims for the serving and batch tests, built with onnx.helper."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import relaxpack

#: every datatype the Open Inference Protocol has and relaxpack stores, by ONNX element type
DTYPES = {"bool": TensorProto.BOOL, "uint8": TensorProto.UINT8, "uint16": TensorProto.UINT16,
          "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64, "int8": TensorProto.INT8,
          "int16": TensorProto.INT16, "int32": TensorProto.INT32, "int64": TensorProto.INT64,
          "float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
          "string": TensorProto.STRING}


def lookup_onnx(vocab: int = 50, width: int = 8):
    """``out[batch, k, width] = tanh(table[ids]) * scale``: an int64 input, a Gather that fails on
    an out-of-range id (a value only the run can refuse) and a per-row computation (batchable)."""
    rng = np.random.default_rng(1)
    table = numpy_helper.from_array(rng.standard_normal((vocab, width)).astype(np.float32), "table")
    scale = numpy_helper.from_array(rng.standard_normal((width,)).astype(np.float32), "scale")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
             helper.make_node("Tanh", ["rows"], ["t"]),
             helper.make_node("Mul", ["t", "scale"], ["out"])]
    graph = helper.make_graph(nodes, "lookup", [helper.make_tensor_value_info("ids", TensorProto.INT64,
                                                                               ["batch", "k"])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "k", width])],
                              [table, scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def dtypes_onnx():
    """One input and one output per datatype, ``out_<dtype> = Identity(in_<dtype>)``, shape (n, 2)."""
    nodes = [helper.make_node("Identity", [f"in_{name}"], [f"out_{name}"]) for name in DTYPES]
    inputs = [helper.make_tensor_value_info(f"in_{name}", kind, ["n", 2]) for name, kind in DTYPES.items()]
    outputs = [helper.make_tensor_value_info(f"out_{name}", kind, ["n", 2]) for name, kind in DTYPES.items()]
    graph = helper.make_graph(nodes, "dtypes", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save(model, path, **dims) -> None:
    relaxpack.build(relaxpack.from_onnx(model, dims=dims or None)).save(path)


def dtype_values(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Values of every datatype for the dtypes model, with each type's extremes among them."""
    feeds = {}
    for name in DTYPES:
        if name == "string":
            words = np.array(["", "héllo", "a b", "\u2603", "x" * 20, "0"], dtype=object)
            feeds[f"in_{name}"] = rng.choice(words, (n, 2))
        elif name == "bool":
            feeds[f"in_{name}"] = rng.random((n, 2)) < 0.5
        elif name.startswith(("int", "uint")):
            info = np.iinfo(name)
            values = rng.integers(info.min, info.max, (n, 2), dtype=name, endpoint=True)
            values.flat[0] = info.max
            feeds[f"in_{name}"] = values
        else:
            feeds[f"in_{name}"] = (rng.standard_normal((n, 2)) * 1e3).astype(name)
    return feeds


def pooled_onnx():
    """``out[4] = ReduceSum(x[batch, 4], axis 0)``: rows are not independent, and the signature says so
    (the output does not lead with ``batch``), so the server must not batch it."""
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["out"], keepdims=0)], "pooled",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [4])], [axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def tabular_onnx(features: int = 4, classes: int = 3):
    """A linear classifier ``X[batch, features]`` (float32) -> ``scores[batch, classes]`` and
    ``label[batch]`` (int64): the shape of a model over a table's feature columns."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((features, classes)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(classes).astype(np.float32), "b")
    nodes = [helper.make_node("Gemm", ["X", "w", "b"], ["scores"]),
             helper.make_node("ArgMax", ["scores"], ["label"], axis=1, keepdims=0)]
    graph = helper.make_graph(nodes, "tabular", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                                                ["batch", features])],
                              [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", classes]),
                               helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
