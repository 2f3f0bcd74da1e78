"""Adagrad, Adam and Momentum (converters/training.py) against onnx's
reference evaluator: one and several tensors, step 0 (no bias correction,
beta taken as 1) and later steps, symbolic dims."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import relaxpack
from relaxpack.errors import ShapeError

from .helpers import check_model, rand

DOMAIN = "ai.onnx.preview.training"
STATES = {"Adagrad": ["H"], "Adam": ["V", "H"], "Momentum": ["V"]}
ATTRS = {"Adagrad": {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 1e-3},
         "Adam": {"alpha": 0.9, "beta": 0.8, "epsilon": 1e-2, "norm_coefficient": 1e-3,
                  "norm_coefficient_post": 1e-2},
         "Momentum": {"alpha": 0.95, "beta": 0.1, "norm_coefficient": 1e-3, "mode": "standard"}}


def optimizer_model(op, n, attrs, dtype=TensorProto.FLOAT):
    groups = ["X", "G", *STATES[op]]
    names = [f"{k}{i}" for k in groups for i in range(n)]
    outs = [f"{k}{i}_new" for k in ["X", *STATES[op]] for i in range(n)]
    inputs = [helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    inputs += [helper.make_tensor_value_info(name, dtype, ["a", 3 + int(name[-1])]) for name in names]
    node = helper.make_node(op, ["R", "T", *names], outs, domain=DOMAIN, **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, dtype, None) for o in outs])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 22),
                                                                  helper.make_opsetid(DOMAIN, 1)])


def optimizer_feeds(model, a, step, np_type, seed):
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(step, np.int64)}
    for i, inp in enumerate(model.graph.input[2:]):
        shape = (a, inp.type.tensor_type.shape.dim[1].dim_value)
        x = rand(*shape, dtype=np_type, seed=seed + i)
        feeds[inp.name] = np.abs(x) if inp.name.startswith("H") else x      # H accumulates squares
    return feeds


@pytest.mark.parametrize("op, mode", [("Adagrad", None), ("Adam", None), ("Momentum", "standard"),
                                      ("Momentum", "nesterov")])
@pytest.mark.parametrize("n", [1, 2])
def test_optimizer_steps(op, mode, n):
    attrs = dict(ATTRS[op], **({"mode": mode} if mode else {}))
    model = optimizer_model(op, n, attrs)
    check_model(model, *(optimizer_feeds(model, a, step, np.float32, seed)
                         for seed, (a, step) in enumerate([(2, 0), (3, 1), (1, 7), (0, 2)])),
                ref=reference_as(model, np.float32))


def reference_as(model, dtype):
    """onnx's reference outputs cast to the tensors' dtype (its one-tensor Adam
    returns float64 for float32 tensors; the spec says the input's type)."""
    evaluator = ReferenceEvaluator(model)
    return lambda feeds: [np.asarray(y).astype(dtype) for y in evaluator.run(None, feeds)]


def test_optimizer_on_float64_tensors():
    model = optimizer_model("Adagrad", 1, ATTRS["Adagrad"], TensorProto.DOUBLE)
    check_model(model, optimizer_feeds(model, 4, 3, np.float64, 0), ref="onnx")


def test_optimizer_needs_whole_groups():
    model = optimizer_model("Adagrad", 1, ATTRS["Adagrad"])
    model.graph.node[0].input.append("X0")
    with pytest.raises(ShapeError, match=r"Adagrad.*needs R, T and 3 inputs per optimized tensor, got 6"):
        relaxpack.from_onnx(model)
