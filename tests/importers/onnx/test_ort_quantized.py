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
