"""benchmarks.flops: multiply-adds counted per op from the shapes a run
gives, and the 20x-bar verdicts built on them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from benchmarks.flops import bar_rows, count_macs, product_weight_bytes, read_rate, sgemm_peak


def _model(nodes, inputs, weights, outputs) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.ones(shape, np.float32), name) for name, shape in weights.items()]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_conv_counts_output_times_weight_fan_in_with_groups():
    # 8 output channels of 4x4 each, groups of 2: 3x3 taps over 6 / 2 = 3 channels
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], group=2, strides=[2, 2], pads=[1, 1, 1, 1])],
                   {"x": ["n", 6, 8, 8]}, {"w": (8, 3, 3, 3)}, ["y"])
    assert count_macs(model, {"x": np.zeros((2, 6, 8, 8), np.float32)}) == 2 * 8 * 4 * 4 * 3 * 3 * 3


def test_conv_transpose_counts_every_input_value_times_its_taps():
    model = _model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])],
                   {"x": [1, 4, 5, 5]}, {"w": (4, 3, 2, 2)}, ["y"])
    assert count_macs(model, {"x": np.zeros((1, 4, 5, 5), np.float32)}) == 4 * 5 * 5 * 3 * 2 * 2


def test_matmul_and_gemm_with_a_transposed_operand():
    model = _model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                    helper.make_node("Gemm", ["h", "v"], ["y"], transA=1)],
                   {"x": [7, 5]}, {"w": (5, 6), "v": (7, 3)}, ["y"])
    # MatMul (7,5)@(5,6): 42 outputs x 5; Gemm h^T (6,7) @ (7,3): 18 outputs x 7
    assert count_macs(model, {"x": np.zeros((7, 5), np.float32)}) == 42 * 5 + 18 * 7


def test_lstm_counts_four_gates_over_input_and_hidden_per_step_and_direction():
    hidden, size = 3, 5
    model = _model([helper.make_node("LSTM", ["x", "w", "r"], ["y"], hidden_size=hidden, direction="bidirectional")],
                   {"x": ["t", 2, size]}, {"w": (2, 4 * hidden, size), "r": (2, 4 * hidden, hidden)}, ["y"])
    macs = count_macs(model, {"x": np.zeros((9, 2, size), np.float32)})
    assert macs == 2 * 9 * 2 * 4 * hidden * (size + hidden)


def test_ops_without_products_count_nothing():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], {"x": [4]}, {}, ["y"])
    assert count_macs(model, {"x": np.zeros(4, np.float32)}) == 0


def test_weight_bytes_count_the_operands_of_products_only():
    model = _model([helper.make_node("Gather", ["table", "i"], ["e"]),
                    helper.make_node("MatMul", ["x", "w"], ["y"]),
                    helper.make_node("Add", ["y", "b"], ["z"])],
                   {"x": [2, 5], "i": [3]}, {"table": (100, 5), "w": (5, 6), "b": (6,)}, ["z", "e"])
    assert product_weight_bytes(model) == 5 * 6 * 4


def test_measured_rates_are_positive():
    assert sgemm_peak(size=64, repeat=2) > 0 and read_rate(4096, repeat=2) > 0


def _row(ref, ours, gflop, reads=None):
    return {"row": "m", "reference": {"ms": ref}, "relaxpack": {"ms": ours}, "ort_1thread": {"ms": 1.0},
            "gflop": gflop, "weight_read_ms": reads}


def test_bar_verdicts():
    peak = 100.0                                    # GFLOP/s: 1 GFLOP takes 10 ms
    met, missed, compute, reads = bar_rows(
        [_row(200, 9, 1.0), _row(400, 25, 1.0), _row(100, 12, 1.0), _row(200, 12, 0.1, reads=15.0)], peak)
    assert (met["verdict"], met["allowed_ms"], met["floor_ms"]) == ("met", 10.0, 10.0)
    assert missed["verdict"] == "not met"           # 20 ms allowed, floor 10 ms: possible, not done
    assert compute["verdict"] == "below the floor"  # 5 ms allowed, the products take 10 ms
    assert (reads["verdict"], reads["floor_ms"]) == ("below the floor", 15.0)   # 10 allowed, reading takes 15
    assert bar_rows([_row(None, 9, 1.0)], peak) == []
