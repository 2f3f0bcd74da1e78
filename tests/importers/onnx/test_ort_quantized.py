"""Models quantized by onnxruntime.quantization (dynamic, static QDQ) compute
what the quantized model means, on any x86-64 CPU.

Static QDQ models are compared with onnxruntime with its graph optimizer off:
it then runs DequantizeLinear, the float op and QuantizeLinear as written
(with the optimizer on it fuses them into integer kernels that round
differently, and whose u8 x s8 GEMM saturates in int16 pairs on CPUs without
VNNI). Dynamic models run DynamicQuantizeLinear and MatMulInteger/ConvInteger,
u8 x s8 integer GEMMs in onnxruntime even without its optimizer: they are
judged by onnx's reference evaluator, their exact semantics."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                      quantize_static)

import relaxpack
from relaxpack.runtime import VirtualMachine

from ...integer_semantics import pairs_cannot_saturate


def _float_model(path):
    rng = np.random.default_rng(0)
    weights = {
        "w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(8).astype(np.float32),
        "w2": rng.standard_normal((8 * 6 * 6, 10)).astype(np.float32) * 0.1,
        "b2": rng.standard_normal(10).astype(np.float32),
    }
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "w2"], ["m"]),
             helper.make_node("Add", ["m", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 10])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(onnx.shape_inference.infer_shapes(model), str(path))


class _Calibration(CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(1)
        self.feeds = iter([{"x": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(8)])

    def get_next(self):
        return next(self.feeds, None)


QUANTIZERS = {
    "dynamic": lambda src, dst: quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8),
    "dynamic_per_channel": lambda src, dst: quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8,
                                                             per_channel=True),
    "static_qdq": lambda src, dst: quantize_static(str(src), str(dst), _Calibration(),
                                                   quant_format=QuantFormat.QDQ),
    "static_qdq_per_channel": lambda src, dst: quantize_static(str(src), str(dst), _Calibration(),
                                                               quant_format=QuantFormat.QDQ, per_channel=True),
}


def reference_runner(kind, path):
    """What judges a model quantized by ``kind``: a function of the feeds giving the outputs."""
    if kind.startswith("dynamic"):
        evaluator = ReferenceEvaluator(str(path))
        return lambda feeds: evaluator.run(None, feeds)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


@pytest.mark.parametrize("kind", sorted(QUANTIZERS))
def test_quantized_model_matches_its_semantics(kind, tmp_path):
    src, dst = tmp_path / "float.onnx", tmp_path / f"{kind}.onnx"
    _float_model(src)
    QUANTIZERS[kind](src, dst)
    ops = {n.op_type for n in onnx.load(str(dst)).graph.node}
    assert ops & {"QuantizeLinear", "DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"}, ops
    reference = reference_runner(kind, dst)
    mod = relaxpack.from_onnx(str(dst))
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
        rng = np.random.default_rng(2)
        for batch in (1, 3):
            x = rng.standard_normal((batch, 3, 12, 12)).astype(np.float32)
            expected = reference({"x": x})[0]
            got = vm.run({"x": x})["y"]
            # the integer arithmetic is exact; only float32 rescaling may round differently
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _lstm_model(path, direction):
    """One LSTM (input 12, hidden 16) with bias and initial states; dynamic batch and sequence."""
    rng = np.random.default_rng(3)
    dirs, hidden = (2 if direction == "bidirectional" else 1), 16
    weights = {"W": rng.standard_normal((dirs, 4 * hidden, 12)) * 0.3,
               "R": rng.standard_normal((dirs, 4 * hidden, hidden)) * 0.3,
               "B": rng.standard_normal((dirs, 8 * hidden)) * 0.1}
    state = ["dirs", "batch", hidden]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", "batch", 12]),
              helper.make_tensor_value_info("h0", TensorProto.FLOAT, state),
              helper.make_tensor_value_info("c0", TensorProto.FLOAT, state)]
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "y_h", "y_c"], hidden_size=hidden,
                            direction=direction)
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y_h", "y_c")]
    graph = helper.make_graph([node], "lstm", inputs, outputs,
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=9), str(path))
    return dirs


@pytest.mark.parametrize("direction, per_channel", [("forward", False), ("bidirectional", True),
                                                    ("reverse", False)])
def test_dynamic_quantized_lstm_matches_onnxruntime(direction, per_channel, tmp_path):
    """quantize_dynamic makes an LSTM a com.microsoft DynamicQuantizeLSTM (int8 weights; X and H
    quantized to uint8 on the fly). reduce_range keeps the weights within 7 bits, so onnxruntime's
    u8 x s8 products cannot saturate on any CPU and it is exact: the reference here. The float LSTM
    differs from it by about 1e-2, so the match says the quantization is emulated, not skipped."""
    src, dst = tmp_path / "lstm.onnx", tmp_path / "lstm_dynamic.onnx"
    dirs = _lstm_model(src, direction)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel, reduce_range=True)
    model = onnx.load(str(dst))
    assert [n.op_type for n in model.graph.node] == ["DynamicQuantizeLSTM"]
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert pairs_cannot_saturate(np.array([255]), inits["W_quantized"]) and \
        pairs_cannot_saturate(np.array([255]), inits["R_quantized"])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1   # with more, it may quantize H in groups of batch rows
    session, float_session = (ort.InferenceSession(str(p), options, providers=["CPUExecutionProvider"])
                              for p in (dst, src))
    mod = relaxpack.from_onnx(str(dst))
    rng = np.random.default_rng(4)
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
        for seq, batch in ((5, 1), (9, 3), (1, 2)):
            feeds = {"x": rng.standard_normal((seq, batch, 12)).astype(np.float32),
                     "h0": rng.standard_normal((dirs, batch, 16)).astype(np.float32) * 0.5,
                     "c0": rng.standard_normal((dirs, batch, 16)).astype(np.float32) * 0.5}
            got = vm.run(feeds)
            for name, want, unquantized in zip(("y", "y_h", "y_c"), session.run(None, feeds),
                                               float_session.run(None, feeds)):
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5)
                assert np.abs(unquantized - want).max() > 1e-3
