"""Training-mode Dropout (converters/random.py) against onnx's reference
evaluator, whose seeded random stream (numpy's ``RandomState(seed)``) the
kernel reproduces; unseeded draws differ from run to run."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import relaxpack
from relaxpack.runtime import VirtualMachine
from relaxpack.vm_build import build

from .helpers import check_model, rand


def dropout_model(dtype=TensorProto.FLOAT, seed=0, ratio_given=True):
    inputs = ["x", "r" if ratio_given else "", "t"]
    attrs = {} if seed is None else {"seed": seed}
    node = helper.make_node("Dropout", inputs, ["y", "mask"], **attrs)
    graph_inputs = [helper.make_tensor_value_info("x", dtype, ["n", 7]),
                    helper.make_tensor_value_info("r", TensorProto.FLOAT, []),
                    helper.make_tensor_value_info("t", TensorProto.BOOL, [])]
    if not ratio_given:
        del graph_inputs[1]
    outputs = [helper.make_tensor_value_info("y", dtype, None),
               helper.make_tensor_value_info("mask", TensorProto.BOOL, None)]
    graph = helper.make_graph([node], "g", graph_inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)


def feeds(n, ratio, training, dtype=np.float32, seed=0):
    return {"x": rand(n, 7, dtype=dtype, seed=seed), "r": np.array(ratio, np.float32), "t": np.array(training)}


def reference_as(model, dtype, drop=()):
    """onnx's reference outputs with y cast to ``dtype`` (for float16 it returns
    float32) and the inputs in ``drop`` fed to it only (the model omits them)."""
    evaluator = ReferenceEvaluator(model)

    def run(f):
        y, mask = evaluator.run(None, {k: v for k, v in f.items() if k not in drop})
        return [y.astype(dtype), mask]
    return run


@pytest.mark.parametrize("seed", [0, 5, 123])
@pytest.mark.parametrize("dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64),
                                   (TensorProto.FLOAT16, np.float16)])
def test_seeded_training_dropout_matches_the_reference(seed, dtype):
    onnx_type, np_type = dtype
    model = dropout_model(onnx_type, seed)
    check_model(model, feeds(5, 0.3, True, np_type), feeds(11, 0.75, True, np_type, 1),
                feeds(0, 0.5, True, np_type), feeds(4, 0.0, True, np_type), feeds(3, 0.5, False, np_type),
                ref=reference_as(model, np_type))


def test_default_ratio_is_a_half():
    """Against the reference given ratio 0.5 explicitly (it cannot run without one)."""
    f = feeds(9, 0.5, True)
    with_half = reference_as(dropout_model(), np.float32)
    check_model(dropout_model(ratio_given=False), {k: v for k, v in f.items() if k != "r"},
                ref=lambda g: with_half({**g, "r": np.array(0.5, np.float32)}))


def test_unseeded_dropout_draws_afresh_each_run():
    vm = VirtualMachine(build(relaxpack.from_onnx(dropout_model(seed=None))))
    f = feeds(200, 0.5, True)
    first, second = vm.run(f)["mask"], vm.run(f)["mask"]
    assert first.shape == (200, 7) and 0.4 < first.mean() < 0.6
    assert not np.array_equal(first, second)


def test_unseeded_dropout_of_a_constant_is_not_folded():
    """Folded at build time it would give one mask for ever."""
    model = dropout_model(seed=None)
    model.graph.initializer.append(helper.make_tensor("x", TensorProto.FLOAT, [200, 7], np.ones(1400).tolist()))
    del model.graph.input[0]
    vm = VirtualMachine(build(relaxpack.from_onnx(model)))
    f = {"r": np.array(0.5, np.float32), "t": np.array(True)}
    assert not np.array_equal(vm.run(f)["mask"], vm.run(f)["mask"])
