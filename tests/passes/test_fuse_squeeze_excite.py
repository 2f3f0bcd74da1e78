"""FuseSqueezeExcite: a channels-last SE block (global pool, two 1x1 convs, the scaling multiply)
becomes one nn.squeeze_excite, bit for bit the four ops' result; and what does not fuse, with its
reason. An SE model from ONNX runs as one kernel per block, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.fuse_squeeze_excite import fuse_squeeze_excite

from .helpers import assert_rewrites, assert_same_results, ops_of, program, run_pass, with_dce

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((1, 1, 6, 3)).round(3)
B1 = RNG.standard_normal(3).round(3)
W2 = RNG.standard_normal((1, 1, 3, 6)).round(3)
B2 = RNG.standard_normal(6).round(3)
DIMS = ("n", "ht", "wd")
RET = '("n", "ht", "wd", 6)'


def _const(a: np.ndarray, dtype: str) -> str:
    return f'R.const({a.tolist()!r}, "{dtype}")'


def _params(dtype: str) -> str:
    return f'x: R.Tensor(("n", "ht", "wd", 6), "{dtype}")'


def _conv(name: str, data: str, w, b, act, dtype: str, **attrs) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in attrs.items())
    return (f'{name} = R.nn.conv_bias_act({data}, {_const(w, dtype)}, {_const(b, dtype)}, '
            f'activation={act!r}, data_layout="NHWC"{extra})')


def _block(dtype: str, act1="relu", act2=("hard_sigmoid", 0.2, 0.5), pool='R.nn.global_avg_pool(x, data_layout="NHWC")',
           gate_first=False) -> str:
    product = "R.multiply(g, x)" if gate_first else "R.multiply(x, g)"
    return f"""
p = {pool}
{_conv("h", "p", W1, B1, act1, dtype)}
{_conv("g", "h", W2, B2, act2, dtype)}
y = {product}
return y
"""


def _fused(dtype: str, act1="relu", act2=("hard_sigmoid", 0.2, 0.5)) -> str:
    return f"""
y = R.nn.squeeze_excite(x, {_const(W1.reshape(6, 3), dtype)}, {_const(B1, dtype)}, {_const(W2.reshape(3, 6), dtype)}, \
{_const(B2, dtype)}, act1={act1!r}, act2={act2!r}, data_layout="NHWC")
return y
"""


SHAPES = [{"n": 1, "ht": 5, "wd": 7}, {"n": 3, "ht": 4, "wd": 4}, {"n": 2, "ht": 1, "wd": 1}, {"n": 0, "ht": 3, "wd": 3}]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("acts", [("relu", ("hard_sigmoid", 0.2, 0.5)), ("silu", "sigmoid"), (None, "hard_swish")],
                         ids=["mobilenet_v3", "efficientnet", "other"])
def test_the_block_becomes_one_call_with_the_same_bits(acts, dtype):
    """MobileNetV3's and EfficientNet's activations (any others too); maps of 1 to 20 pixels (the
    pool's sum numpy's row reduction below 16 pixels, a product with ones from there), an empty batch."""
    params = _params(dtype)
    mod, out = assert_rewrites(with_dce(fuse_squeeze_excite), program(params, RET, _block(dtype, *acts), dtype, DIMS),
                               program(params, RET, _fused(dtype, *acts), dtype, DIMS))
    assert ops_of(out) == ["nn.squeeze_excite"]
    assert_same_results(mod, out, SHAPES, rtol=0, atol=0)


@pytest.mark.parametrize("gate_first", [False, True])
def test_a_mean_squeeze_and_either_operand_order(gate_first):
    params = _params("float32")
    body = _block("float32", pool="R.mean(x, axis=(1, 2), keepdims=True)", gate_first=gate_first)
    mod, out = assert_rewrites(with_dce(fuse_squeeze_excite), program(params, RET, body, "float32", DIMS),
                               program(params, RET, _fused("float32"), "float32", DIMS))
    assert_same_results(mod, out, SHAPES[:3], rtol=0, atol=0)


def test_what_does_not_fuse_and_why():
    dtype = "float32"
    w3 = np.ones((3, 3, 6, 3))
    body = f"""
p0 = R.nn.global_avg_pool(x, data_layout="NHWC")
{_conv("h0", "p0", W1, B1, "relu", dtype)}
{_conv("g0", "h0", W2, B2, "sigmoid", dtype)}
y0 = R.multiply(x, g0)
p1 = R.nn.global_avg_pool(x, data_layout="NHWC")
{_conv("h1", "p1", w3, B1, "relu", dtype, padding=(1, 1, 1, 1))}
{_conv("g1", "h1", W2, B2, "sigmoid", dtype)}
y1 = R.multiply(x, g1)
p2 = R.mean(x, axis=(1, 2), keepdims=False)
p3 = R.reshape(p2, R.shape([n, 1, 1, 6]))
{_conv("h2", "p3", W1, B1, "relu", dtype)}
{_conv("g2", "h2", W2, B2, "sigmoid", dtype)}
y2 = R.multiply(x, g2)
p4 = R.nn.global_avg_pool(x, data_layout="NHWC")
{_conv("h4", "p4", W1, B1, "relu", dtype, strides=(2, 2))}
{_conv("g4", "h4", W2, B2, "sigmoid", dtype)}
y4 = R.multiply(x, g4)
s0 = R.add(y0, y1)
s1 = R.add(s0, y2)
s2 = R.add(s1, y4)
s3 = R.add(s2, g0)
return s3
"""
    mod = parse(program(_params(dtype), RET, body, dtype, DIMS))
    out = run_pass(with_dce(fuse_squeeze_excite), mod)
    assert "nn.squeeze_excite" not in ops_of(out)
    reasons = dict(explain(mod, "fuse_squeeze_excite"))
    assert reasons["y0"] == "the gate g0 is used twice"
    assert reasons["y1"] == "fc1 is not a 1x1 conv (weight (3, 3, 6, 3))"
    assert "y2" in reasons and reasons["y2"] is not None
    assert reasons["y4"] == "fc1 has a stride, dilation or padding"
    assert_same_results(mod, out, SHAPES[:2])


def _se_model():
    """An NCHW conv net with two SE blocks as torch exports MobileNetV3's (GlobalAveragePool, 1x1
    convs with ReLU and HardSigmoid, Mul) and EfficientNet's (SiLU as x * sigmoid(x), Sigmoid)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(1)
    init, nodes = [], []

    def weight(name, shape):
        init.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name))
        return name

    nodes.append(helper.make_node("Conv", ["x", weight("w0", (16, 3, 3, 3)), weight("b0", (16,))], ["c0"],
                                  pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("Relu", ["c0"], ["r0"]))
    nodes.append(helper.make_node("Conv", ["r0", weight("wd", (16, 1, 3, 3)), weight("bd", (16,))], ["d0"],
                                  pads=[1, 1, 1, 1], group=16))
    nodes.append(helper.make_node("GlobalAveragePool", ["d0"], ["p0"]))
    nodes.append(helper.make_node("Conv", ["p0", weight("w1", (4, 16, 1, 1)), weight("b1", (4,))], ["f1"]))
    nodes.append(helper.make_node("Relu", ["f1"], ["f1r"]))
    nodes.append(helper.make_node("Conv", ["f1r", weight("w2", (16, 4, 1, 1)), weight("b2", (16,))], ["f2"]))
    nodes.append(helper.make_node("HardSigmoid", ["f2"], ["g0"], alpha=1 / 6, beta=0.5))
    nodes.append(helper.make_node("Mul", ["d0", "g0"], ["s0"]))
    nodes.append(helper.make_node("Conv", ["s0", weight("wd2", (16, 1, 3, 3)), weight("bd2", (16,))], ["d1"],
                                  pads=[1, 1, 1, 1], group=16, strides=[2, 2]))
    nodes.append(helper.make_node("GlobalAveragePool", ["d1"], ["p1"]))
    nodes.append(helper.make_node("Conv", ["p1", weight("w3", (4, 16, 1, 1)), weight("b3", (4,))], ["f3"]))
    nodes.append(helper.make_node("Sigmoid", ["f3"], ["f3s"]))
    nodes.append(helper.make_node("Mul", ["f3", "f3s"], ["f3silu"]))
    nodes.append(helper.make_node("Conv", ["f3silu", weight("w4", (16, 4, 1, 1)), weight("b4", (16,))], ["f4"]))
    nodes.append(helper.make_node("Sigmoid", ["f4"], ["g1"]))
    nodes.append(helper.make_node("Mul", ["g1", "d1"], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "se", [x], [y], initializer=init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_se_blocks_of_an_onnx_model_run_as_one_kernel_each_against_onnxruntime():
    import relaxpack
    from relaxpack.check import onnxruntime_session
    from relaxpack.runtime import VirtualMachine
    model = _se_model()
    fused = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=2))
    labels = [fused._label(ins) for prepared in fused._prepared for ins in prepared.func.instructions]
    assert labels.count("kernel.nn.squeeze_excite") == 2
    assert not {"kernel.nn.global_avg_pool", "kernel.multiply"} & set(labels)
    session = onnxruntime_session(model, threads=1)
    rng = np.random.default_rng(3)
    for n, h, w in [(1, 61, 96), (3, 9, 7), (2, 2, 2)]:
        feeds = {"x": rng.standard_normal((n, 3, h, w)).astype(np.float32)}
        for _ in range(2):      # the second run reuses the instructions' views
            np.testing.assert_allclose(fused.run(feeds)["y"], session.run(None, feeds)[0], rtol=1e-4, atol=1e-5)
