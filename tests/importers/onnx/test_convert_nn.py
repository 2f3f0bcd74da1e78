"""Activations, the softmax family, Dropout, MatMul/Gemm, convolution,
pooling and normalization converters against onnxruntime (onnx's reference
evaluator or numpy where onnxruntime lacks the opset or disagrees with the
spec), with symbolic dims run at two sizes per build."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import UnsupportedOpError

from .backend_case import run_backend_case
from .test_convert_elementwise import check, inp, model, node, rand


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def sized(shape, n):
    return [n if d == "n" else d for d in shape]


# ---------------------------------------------------------------- activations

ACTIVATIONS = [
    ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Elu", {}), ("Elu", {"alpha": 0.5}), ("Selu", {}),
    ("Selu", {"alpha": 1.5, "gamma": 2.0}), ("Celu", {}), ("Celu", {"alpha": 2.0}), ("Gelu", {}),
    ("Gelu", {"approximate": "tanh"}), ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}), ("Mish", {}), ("ThresholdedRelu", {}), ("ThresholdedRelu", {"alpha": 0.5}),
    ("Shrink", {}), ("Shrink", {"bias": 1.5, "lambd": 1.0}), ("Softplus", {}), ("Softsign", {}),
]


@pytest.mark.parametrize("op, attrs", ACTIVATIONS, ids=lambda v: str(v))
def test_activation(op, attrs, rng):
    m = model(node(op, ["x"], **attrs), [inp("x", "float32", ["n", 5])])
    check(m, [{"x": rand(rng, (n, 5), low=-4, high=4)} for n in (1, 3)], rtol=1e-5, atol=1e-6)


def test_relu_int8_and_shrink_int(rng):
    m = model([node("Relu", ["x"], ["y"]), node("Shrink", ["x"], ["z"], lambd=1.5, bias=2.0)],
              [inp("x", "int8", [9])], ["y", "z"])
    check(m, {"x": np.arange(-4, 5, dtype=np.int8)})


@pytest.mark.parametrize("slope_shape", [[3, 1, 1], [1], [4], [5, 4]])
def test_prelu(slope_shape, rng):
    m = model(node("PRelu", ["x", "slope"]), [inp("x", "float32", ["n", 3, 5, 4])],
              initializers={"slope": rand(rng, slope_shape)})
    check(m, [{"x": rand(rng, (n, 3, 5, 4))} for n in (2, 1)])


def test_prelu_opset6_slope_per_channel(rng):
    slope = rand(rng, (3,))
    m = model(node("PRelu", ["x", "slope"]), [inp("x", "float32", [2, 3, 4])], opset=6,
              initializers={"slope": slope})
    check(m, {"x": rand(rng, (2, 3, 4))}, expected=lambda x: np.where(x >= 0, x, x * slope[:, None]))


# ---------------------------------------------------------------- softmax family


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset, axis", [(11, 0), (11, 1), (11, 2), (11, -1), (13, 0), (13, 1), (13, -1)])
def test_softmax_family(op, opset, axis, rng):
    """Opset 11 flattens to 2-D at axis; 13 works along the axis (Hardmax
    along a symbolic axis takes another path than along a static one)."""
    m = model(node(op, ["x"], axis=axis), [inp("x", "float32", ["n", 4, 5])], opset=opset)
    feeds = []
    for n in (2, 3):
        x = rand(rng, (n, 4, 5))
        if op == "Hardmax":
            x = np.round(x)            # ties: the first maximum wins
        feeds.append({"x": x})
    check(m, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_default_axis_per_opset(opset, rng):
    """1 (of the 2-D coercion) before opset 13, then -1."""
    m = model(node("Softmax", ["x"]), [inp("x", "float32", [2, 3, 4])], opset=opset)
    check(m, {"x": rand(rng, (2, 3, 4))}, rtol=1e-5)


# ---------------------------------------------------------------- dropout


def test_dropout_inference_with_mask(rng):
    m = model(node("Dropout", ["x", "ratio", "train"], ["y", "mask"]), [inp("x", "float32", ["n", 3])],
              ["y", "mask"], opset=13, initializers={"ratio": np.array(0.3, np.float32),
                                                     "train": np.array(False)})
    check(m, [{"x": rand(rng, (n, 3))} for n in (1, 4)])


def test_dropout_opset7_mask_has_the_input_dtype(rng):
    m = model(node("Dropout", ["x"], ["y", "mask"], ratio=0.2), [inp("x", "float32", [2, 3])], ["y", "mask"],
              opset=7)
    check(m, {"x": rand(rng, (2, 3))}, expected=lambda x: [x, np.ones_like(x)])


# ---------------------------------------------------------------- matmul, gemm


@pytest.mark.parametrize("a_shape, b_shape", [(["n", 4], [4, 3]), ([2, "n", 4], [4, 5]), ([4], [4, 3]),
                                              (["n", 4], [4]), ([2, 1, "n", 3], [5, 3, 2])])
def test_matmul(a_shape, b_shape, rng):
    m = model(node("MatMul", ["a", "b"]), [inp("a", "float32", a_shape), inp("b", "float32", b_shape)])
    feeds = [{"a": rand(rng, sized(a_shape, n)), "b": rand(rng, sized(b_shape, n))} for n in (1, 3)]
    check(m, feeds, rtol=1e-5, atol=1e-5)


def test_matmul_int32(rng):
    m = model(node("MatMul", ["a", "b"]), [inp("a", "int32", [3, 4]), inp("b", "int32", [4, 2])])
    check(m, {"a": rand(rng, (3, 4), "int32", -5, 5), "b": rand(rng, (4, 2), "int32", -5, 5)})


@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1}, {"transA": 1, "transB": 1, "alpha": 0.5},
                                   {"beta": 2.0}, {"alpha": 2.0, "beta": 0.0}])
@pytest.mark.parametrize("c_shape", [None, [], [5], [3, 1], [3, 5]], ids=str)
def test_gemm(attrs, c_shape, rng):
    a_shape = [4, 3] if attrs.get("transA") else [3, 4]
    b_shape = [5, 4] if attrs.get("transB") else [4, 5]
    inputs = [inp("a", "float32", a_shape), inp("b", "float32", b_shape)]
    feeds = {"a": rand(rng, a_shape), "b": rand(rng, b_shape)}
    names = ["a", "b"]
    if c_shape is not None:
        inputs.append(inp("c", "float32", c_shape))
        feeds["c"] = rand(rng, c_shape)
        names.append("c")
    check(model(node("Gemm", names, **attrs), inputs, opset=13), feeds, rtol=1e-5, atol=1e-5)


def test_gemm_opset6_broadcast_attr(rng):
    m = model(node("Gemm", ["a", "b", "c"], broadcast=1, alpha=2.0), [inp("a", "float32", [2, 3]),
              inp("b", "float32", [3, 4]), inp("c", "float32", [4])], opset=6)
    check(m, {"a": rand(rng, (2, 3)), "b": rand(rng, (3, 4)), "c": rand(rng, (4,))},
          expected=lambda a, b, c: 2 * a @ b + c, rtol=1e-5)


# ---------------------------------------------------------------- conv

CONV_CASES = [
    ([1, 2, 7], [3, 2, 3], {}),
    ([2, 3, 7, 6], [4, 3, 3, 3], {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ([1, 4, 8, 8], [4, 2, 3, 3], {"group": 2, "dilations": [2, 1], "pads": [0, 1, 2, 1]}),
    ([1, 2, 7, 5], [3, 2, 3, 2], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ([1, 2, 7, 5], [3, 2, 4, 2], {"auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ([1, 2, 7, 5], [3, 2, 3, 3], {"auto_pad": "VALID", "strides": [1, 2]}),
    ([1, 2, 5, 4, 3], [2, 2, 2, 3, 2], {"pads": [1, 0, 1, 0, 1, 0]}),
    ([1, 3, 6, 6], [6, 1, 3, 3], {"group": 3, "kernel_shape": [3, 3]}),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_CASES, ids=[str(c[2]) for c in CONV_CASES])
def test_conv(x_shape, w_shape, attrs, bias, rng):
    inits = {"w": rand(rng, w_shape)}
    names = ["x", "w"]
    if bias:
        inits["b"] = rand(rng, [w_shape[0]])
        names.append("b")
    m = model(node("Conv", names, **attrs), [inp("x", "float32", x_shape)], initializers=inits)
    check(m, {"x": rand(rng, x_shape)}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "NOTSET"])
def test_conv_symbolic_spatial_dims_stride_1(auto_pad, rng):
    m = model(node("Conv", ["x", "w", "b"], auto_pad=auto_pad), [inp("x", "float32", ["n", 2, "h", "w"])],
              initializers={"w": rand(rng, (3, 2, 4, 3)), "b": rand(rng, (3,))})
    check(m, [{"x": rand(rng, (n, 2, h, w))} for n, h, w in ((1, 5, 6), (2, 8, 4))], rtol=1e-4, atol=1e-5)


SAME_STRIDED = [(s, k, d) for s in (2, 3) for k in range(1, 6) for d in (1, 2)]


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("stride, k, dilation", SAME_STRIDED, ids=str)
def test_conv_same_padding_of_a_symbolic_dim_with_a_stride(auto_pad, stride, k, dilation, rng):
    """The padding depends on h % stride: padded explicitly by symbolic
    amounts, one build for odd and even sizes, the output dim exact.
    onnxruntime refuses dilation with SAME: numpy with the spec's pads then."""
    attrs = dict(auto_pad=auto_pad, strides=[stride, 1], dilations=[dilation, 1])
    w = rand(rng, (3, 2, k, 3))
    m = model(node("Conv", ["x", "w"], **attrs), [inp("x", "float32", [1, 2, "h", 5])], initializers={"w": w})
    expected = None if dilation == 1 else (lambda x: _conv_same_numpy(x, w, stride, dilation, auto_pad))
    mod = check(m, [{"x": rand(rng, (1, 2, h, 5))} for h in range(1, 10)], expected=expected, rtol=1e-4,
                atol=1e-5)
    assert f"(h + {stride - 1}) // {stride}" in mod.script()


def _conv_same_numpy(x, w, stride, dilation, auto_pad):
    """Conv along axis 2 (stride, dilation) and 3 (3 wide, unit stride), SAME padded as the spec says."""
    h, k, kw = x.shape[2], w.shape[2], w.shape[3]
    out = -(-h // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - h, 0)
    begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
    padded = np.pad(x, ((0, 0), (0, 0), (begin, total - begin), (1, 1)))
    y = np.zeros((1, w.shape[0], out, x.shape[3]), np.float32)
    for i in range(out):
        for j in range(x.shape[3]):
            taps = padded[0, :, i * stride:i * stride + (k - 1) * dilation + 1:dilation, j:j + kw]
            y[0, :, i, j] = np.einsum("chw,ochw->o", taps, w)
    return y


# onnxruntime's MaxPool refuses the negative padding of a window smaller than the stride
SAME_POOLS = [(op, attrs, s, k) for op, attrs in (("MaxPool", {}), ("AveragePool", {}),
                                                 ("AveragePool", {"count_include_pad": 1}), ("LpPool", {"p": 2}))
              for s, k in ((2, 3), (3, 3), (2, 2), (3, 2), (3, 1), (2, 4), (3, 5)) if op != "MaxPool" or k >= s]


@pytest.mark.parametrize("op, attrs, stride, k", SAME_POOLS, ids=str)
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_pool_same_padding_of_symbolic_dims_with_a_stride(op, attrs, stride, k, auto_pad, rng):
    """Pools pad with what they ignore (-inf for max, a mask counts the
    cells of an average); a window smaller than the stride skips cells at
    the start, as the spec's unclamped formula and onnxruntime's averages
    say."""
    m = model(node(op, ["x"], kernel_shape=[k, 2], strides=[stride, 2], auto_pad=auto_pad, **attrs),
              [inp("x", "float32", [1, 2, "h", "w"])], opset=19)
    check(m, [{"x": rand(rng, (1, 2, h, w))} for h, w in ((1, 2), (5, 6), (6, 7), (7, 4), (9, 9))],
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op, attrs", [("MaxPool", {}), ("AveragePool", {}), ("AveragePool", {"count_include_pad": 1}),
                                       ("LpPool", {"p": 2}), ("LpPool", {"p": 3})])
def test_pool_of_a_static_input_shorter_than_the_window_as_onnxruntime(op, attrs, rng):
    """onnxruntime truncates (1 - 2) / 2 toward zero: one partial window
    (PP-OCR's recognizer on a narrow crop); the ONNX formula's floor, none."""
    m = model(node(op, ["x"], kernel_shape=[3, 2], strides=[3, 2], **attrs), [inp("x", "float32", [1, 4, 3, 1])])
    check(m, {"x": rand(rng, (1, 4, 3, 1))})


def test_pool_of_a_symbolic_input_shorter_than_the_window_is_refused_in_words(rng):
    from relaxpack.errors import ShapeError
    from relaxpack.runtime import VirtualMachine
    m = model(node("AveragePool", ["x"], kernel_shape=[3, 2], strides=[3, 2]), [inp("x", "float32", [1, 4, 3, "w"])])
    check(m, {"x": rand(rng, (1, 4, 3, 5))})
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m)))
    with pytest.raises(ShapeError, match=r"input dim 3 is 1, shorter than the window \(2\): onnxruntime pools "
                                         r"one partial window"):
        vm.run({"x": rand(rng, (1, 4, 3, 1))})


@pytest.mark.parametrize("then", [None, "GlobalAveragePool"])
def test_conv_of_a_symbolic_input_shorter_than_its_kernel_is_refused_in_words(then, rng):
    """A 3x3 Conv of height 1 (torchvision's Inception v3 at 51x51): the ONNX formula's height is
    -1, which onnxruntime refuses ("Invalid input shape"); relaxpack said numpy's "negative
    dimensions are not allowed" for a model output and, for an intermediate in the arena, that
    the conv's buffer (1, 4, 0, 7) was not the (1, 4, -1, 7) its attributes give."""
    from relaxpack.errors import ShapeError
    from relaxpack.runtime import VirtualMachine
    w = np.ones((4, 2, 3, 3), np.float32)
    nodes = [node("Conv", ["x", "w"], ["c"] if then else ["y"], kernel_shape=[3, 3])]
    if then:
        nodes.append(node(then, ["c"], ["y"]))
    m = model(nodes, [inp("x", "float32", [1, 2, "h", "w_"])], initializers={"w": w})
    check(m, {"x": rand(rng, (1, 2, 4, 9))})
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m)))
    with pytest.raises(ShapeError, match=r"^ONNX node 'Conv.*': the inputs' dims give this node's result the "
                                         r"shape \(1, 4, -1, 7\), a negative dim: the inputs are too small"):
        vm.run({"x": rand(rng, (1, 2, 1, 9))})

def test_maxpool_indices_with_symbolic_same_padding_is_unsupported():
    m = model(node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[3], strides=[2], auto_pad="SAME_UPPER"),
              [inp("x", "float32", [1, 1, "h"])], ["y", "idx"])
    with pytest.raises(UnsupportedOpError, match=r"MaxPool node.*Indices output.*auto_pad SAME_UPPER.*symbolic"):
        relaxpack.from_onnx(m)


TRANSPOSE_CASES = [
    ([1, 2, 3, 4], [2, 3, 3, 3], {}),
    ([1, 2, 3, 4], [2, 3, 3, 2], {"strides": [2, 3], "output_padding": [1, 2]}),
    ([2, 4, 3, 3], [4, 1, 3, 3], {"group": 2, "pads": [1, 0, 1, 1], "strides": [2, 2]}),
    ([1, 2, 4], [2, 2, 3], {"dilations": [2], "strides": [2]}),
    ([1, 1, 3, 3], [1, 2, 3, 3], {"strides": [3, 2], "output_shape": [10, 8]}),
    ([1, 1, 3, 3], [1, 2, 3, 3], {"strides": [2, 2], "output_shape": [6, 6]}),
    ([1, 1, 3, 3], [1, 2, 3, 3], {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ([1, 1, 3, 3], [1, 2, 4, 4], {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", TRANSPOSE_CASES, ids=[str(c[2]) for c in TRANSPOSE_CASES])
def test_conv_transpose(x_shape, w_shape, attrs, rng):
    """SAME against onnx's reference: onnxruntime puts SAME_UPPER's odd
    padding at the other end than the spec says."""
    inits = {"w": rand(rng, w_shape), "b": rand(rng, [w_shape[1] * attrs.get("group", 1)])}
    m = model(node("ConvTranspose", ["x", "w", "b"], **attrs), [inp("x", "float32", x_shape)],
              initializers=inits)
    reference = "ref" if "auto_pad" in attrs else "ort"
    check(m, {"x": rand(rng, x_shape)}, reference=reference, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("stride, k", [(3, 2), (3, 1), (4, 1), (2, 3)], ids=str)
def test_conv_transpose_same_with_a_kernel_smaller_than_the_stride(auto_pad, stride, k, rng):
    """The output is h * stride: the spec's negative padding extends it with
    zeros (then the bias). Against onnx's reference: onnxruntime clamps the
    padding at 0 and gives a shorter output."""
    inits = {"w": rand(rng, (2, 3, k, k)), "b": rand(rng, (3,))}
    m = model(node("ConvTranspose", ["x", "w", "b"], auto_pad=auto_pad, strides=[stride, stride]),
              [inp("x", "float32", [1, 2, "h", 3])], initializers=inits)
    mod = check(m, [{"x": rand(rng, (1, 2, h, 3))} for h in (1, 2, 5)], reference="ref", rtol=1e-4, atol=1e-5)
    assert f'R.Tensor((1, 3, "{stride} * h", {3 * stride}), "float32")' in mod.script()


def test_conv_transpose_symbolic_batch_and_spatial(rng):
    m = model(node("ConvTranspose", ["x", "w"], strides=[2, 2], pads=[1, 0, 0, 1]),
              [inp("x", "float32", ["n", 2, "h", 3])], initializers={"w": rand(rng, (2, 3, 3, 3))})
    check(m, [{"x": rand(rng, (n, 2, h, 3))} for n, h in ((1, 2), (3, 5))], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- pooling

POOL_CASES = [
    ([1, 2, 7, 7], {"kernel_shape": [3, 3]}),
    ([2, 3, 8, 7], {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ([1, 2, 8, 7], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ([1, 2, 9, 8], {"kernel_shape": [2, 2], "dilations": [2, 2]}),
    ([1, 2, 7, 6], {"kernel_shape": [3, 2], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ([1, 2, 7, 6], {"kernel_shape": [4, 3], "strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ([1, 2, 9], {"kernel_shape": [3], "strides": [2], "auto_pad": "VALID"}),
    ([1, 1, 4, 5, 6], {"kernel_shape": [2, 2, 3], "pads": [1, 0, 1, 0, 1, 1]}),
]


@pytest.mark.parametrize("x_shape, attrs", POOL_CASES, ids=[str(c[1]) for c in POOL_CASES])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "AveragePoolIncludePad"])
def test_pool(op, x_shape, attrs, rng):
    if op == "AveragePoolIncludePad":
        op, attrs = "AveragePool", {**attrs, "count_include_pad": 1}
    m = model(node(op, ["x"], **attrs), [inp("x", "float32", x_shape)], opset=19)
    check(m, {"x": rand(rng, x_shape)}, rtol=1e-5, atol=1e-6)


def test_pools_with_symbolic_dims(rng):
    m = model([node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
               node("AveragePool", ["x"], ["z"], kernel_shape=[2, 2], strides=[2, 2]),
               node("GlobalAveragePool", ["x"], ["g"]), node("GlobalMaxPool", ["x"], ["h"])],
              [inp("x", "float32", ["n", 3, "h", "w"])], ["y", "z", "g", "h"])
    check(m, [{"x": rand(rng, (n, 3, h, w))} for n, h, w in ((1, 4, 6), (2, 7, 5))], rtol=1e-5, atol=1e-6)


def test_maxpool_int8(rng):
    m = model(node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2]), [inp("x", "int8", [1, 2, 4, 4])])
    check(m, {"x": rand(rng, (1, 2, 4, 4), "int8", -100, 100)})


def test_maxpool_indices_output(rng):
    """The Indices output uses nn.max_pool_argmax (more cases in test_convert_fold.py)."""
    m = model(node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2, 2]), [inp("x", "float32", [1, 1, 4, 4])],
              ["y", "idx"])
    assert "R.nn.max_pool_argmax" in relaxpack.from_onnx(m).script()
    check(m, {"x": rand(rng, (1, 1, 4, 4))})


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [2, 2]},
                                   {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}])
def test_lp_pool(p, attrs, rng):
    m = model(node("LpPool", ["x"], p=p, **attrs), [inp("x", "float32", ["n", 2, 5, 6])], opset=18)
    check(m, [{"x": rand(rng, (n, 2, 5, 6))} for n in (1, 2)], rtol=1e-5, atol=1e-5)


def test_lp_pool_ceil_mode_is_unsupported():
    m = model(node("LpPool", ["x"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
              [inp("x", "float32", [1, 1, 5, 5])], opset=18)
    with pytest.raises(UnsupportedOpError, match="LpPool.*ceil_mode"):
        relaxpack.from_onnx(m)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p, rng):
    m = model(node("GlobalLpPool", ["x"], p=p), [inp("x", "float32", ["n", 3, "h", 4])])
    check(m, [{"x": rand(rng, (n, 3, h, 4))} for n, h in ((1, 2), (2, 5))], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- normalization


@pytest.mark.parametrize("shape", [["n", 3], ["n", 3, 5], ["n", 3, 4, 2]])
def test_batch_norm(shape, rng):
    m = model(node("BatchNormalization", ["x", "s", "b", "mean", "var"], epsilon=1e-3),
              [inp("x", "float32", shape)], opset=15,
              initializers={"s": rand(rng, (3,)), "b": rand(rng, (3,)), "mean": rand(rng, (3,)),
                            "var": rand(rng, (3,), low=0.5, high=2)})
    check(m, [{"x": rand(rng, sized(shape, n))} for n in (1, 4)], rtol=1e-5, atol=1e-5)


def test_batch_norm_opset7_spatial_0(rng):
    params = {k: rand(rng, (3, 4), low=0.5, high=2) for k in ("s", "b", "mean", "var")}
    m = model(node("BatchNormalization", ["x", "s", "b", "mean", "var"], spatial=0),
              [inp("x", "float32", [2, 3, 4])], opset=7, initializers=params)

    def expected(x):
        p = params
        return ((x - p["mean"]) / np.sqrt(p["var"] + 1e-5) * p["s"] + p["b"]).astype(np.float32)
    check(m, {"x": rand(rng, (2, 3, 4))}, expected=expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [["n", 3], ["n", 3, 5, 4]])
def test_batch_norm_training_mode(shape, rng):
    outputs = ["y", "running_mean", "running_var"]   # the spec requires all three in training mode
    m = model(node("BatchNormalization", ["x", "s", "b", "mean", "var"], outputs, training_mode=1, momentum=0.7,
                   epsilon=1e-3),
              [inp("x", "float32", shape)], outputs, opset=15,
              initializers={"s": rand(rng, (3,)), "b": rand(rng, (3,)), "mean": rand(rng, (3,)),
                            "var": rand(rng, (3,), low=0.5, high=2)})
    check(m, [{"x": rand(rng, sized(shape, n))} for n in (2, 5)], rtol=1e-4, atol=1e-5)


def batch_norm_training_spec(x, s, b, mean, var, momentum, epsilon):
    """The spec's formulas: batch mean and population variance over all axes
    but 1, computed in float32; running statistics in their own dtype."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    data = x.astype(np.float32)
    cur_mean, cur_var = data.mean(axis=axes), data.var(axis=axes)
    bshape = (-1,) + (1,) * (x.ndim - 2)
    y = (data - cur_mean.reshape(bshape)) / np.sqrt(cur_var.reshape(bshape) + epsilon)
    y = y * s.reshape(bshape) + b.reshape(bshape)
    return (y.astype(x.dtype), (mean * momentum + cur_mean * (1 - momentum)).astype(mean.dtype),
            (var * momentum + cur_var * (1 - momentum)).astype(var.dtype))


def test_batch_norm_training_mode_float16_with_float32_statistics(rng):
    """Opset 15 lets scale/bias (T1) and the statistics (T2) differ from x's dtype."""
    params = {"s": rand(rng, (3,), "float16"), "b": rand(rng, (3,), "float16"), "mean": rand(rng, (3,)),
              "var": rand(rng, (3,), low=0.5, high=2)}
    outputs = ["y", "running_mean", "running_var"]
    m = model(node("BatchNormalization", ["x", "s", "b", "mean", "var"], outputs, training_mode=1),
              [inp("x", "float16", [4, 3, 5])], outputs, opset=15, initializers=params)

    def expected(x):
        return batch_norm_training_spec(x, params["s"].astype(np.float32), params["b"].astype(np.float32),
                                        params["mean"], params["var"], 0.9, 1e-5)
    check(m, {"x": rand(rng, (4, 3, 5), "float16")}, expected=expected, rtol=1e-2, atol=1e-2)


def test_instance_norm(rng):
    m = model(node("InstanceNormalization", ["x", "s", "b"], epsilon=1e-4), [inp("x", "float32", ["n", 3, "h", 4])],
              initializers={"s": rand(rng, (3,)), "b": rand(rng, (3,))})
    check(m, [{"x": rand(rng, (n, 3, h, 4))} for n, h in ((1, 2), (2, 5))], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 1, 2])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_with_statistics(axis, with_bias, rng):
    normalized = [4, 5][axis - 1 if axis > 0 else 1:]
    inits = {"s": rand(rng, normalized)}
    names = ["x", "s"]
    if with_bias:
        inits["b"] = rand(rng, normalized)
        names.append("b")
    m = model(node("LayerNormalization", names, ["y", "mean", "inv"], axis=axis),
              [inp("x", "float32", ["n", 4, 5])], ["y", "mean", "inv"], opset=17, initializers=inits)
    check(m, [{"x": rand(rng, (n, 4, 5))} for n in (1, 3)], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("a_dims, b_dims, shapes", [
    (["b", "h", 4, 5], ["b", "g", 5, 3], [((2, 3, 4, 5), (2, 1, 5, 3)), ((2, 1, 4, 5), (2, 3, 5, 3)),
                                          ((2, 2, 4, 5), (2, 2, 5, 3))]),
    (["h", 4, 5], ["b", "g", 5, 3], [((3, 4, 5), (2, 1, 5, 3)), ((1, 4, 5), (2, 3, 5, 3))]),
])
def test_matmul_batch_dims_only_the_run_relates(a_dims, b_dims, shapes, rng):
    """Batch dims of unrelated symbolic names (scores against a mask-like operand): either may be
    1, or they are equal; a rank-3 operand against a rank-4 one."""
    m = model(node("MatMul", ["a", "b"]), [inp("a", "float32", a_dims), inp("b", "float32", b_dims)])
    check(m, [{"a": rand(rng, x), "b": rand(rng, y)} for x, y in shapes], rtol=1e-5, atol=1e-5)


def test_gemm_c_broadcasts_rows_only_the_run_relates(rng):
    """C of (k, N) against M rows, k and M unrelated symbolic dims: k may be 1 or M."""
    m = model(node("Gemm", ["a", "b", "c"], beta=0.5), [inp("a", "float32", ["m", 4]), inp("c", "float32", ["k", 3])],
              initializers={"b": rand(rng, (4, 3))})
    check(m, [{"a": rand(rng, (5, 4)), "c": rand(rng, (1, 3))}, {"a": rand(rng, (5, 4)), "c": rand(rng, (5, 3))}],
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale_shape, bias_shape", [((1, 5), (5,)), ((4, 5), (1, 1, 5)), ((1, 1, 5), None),
                                                      ((4, 5), (4, 5))])
def test_layer_norm_scale_of_more_dims_than_normalized(scale_shape, bias_shape, rng):
    """The function body broadcasts Scale and B against all of X: onnxruntime takes a Scale of
    leading 1s (dropped) or of leading dims of X's (applied after a plain normalization)."""
    inits = {"s": rand(rng, scale_shape)}
    names = ["x", "s"]
    if bias_shape is not None:
        inits["b"] = rand(rng, bias_shape)
        names.append("b")
    m = model(node("LayerNormalization", names, axis=-1), [inp("x", "float32", ["n", 4, 5])], opset=17,
              initializers=inits)
    check(m, [{"x": rand(rng, (n, 4, 5))} for n in (1, 3)], rtol=1e-4, atol=1e-5)


def lrn_spec(x, size, alpha, beta, bias):
    """The spec's formula: channels c - floor((size-1)/2) .. c + ceil((size-1)/2)."""
    square = x.astype(np.float64) ** 2
    total = np.zeros_like(square)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + -(-(size - 1) // 2))
        total[:, c] = square[:, lo:hi + 1].sum(axis=1)
    return (x / (bias + alpha / size * total) ** beta).astype(x.dtype)


@pytest.mark.parametrize("size", [3, 4])
def test_lrn(size, rng):
    """onnxruntime takes odd sizes only; onnx's reference LRN loops over the
    batch instead of the channels, so the spec's formula is the reference."""
    attrs = dict(size=size, alpha=1e-3, beta=0.6, bias=2.0)
    m = model(node("LRN", ["x"], **attrs), [inp("x", "float32", ["n", 5, 3, 3])])
    check(m, [{"x": rand(rng, (n, 5, 3, 3))} for n in (1, 2)], expected=lambda x: lrn_spec(x, **attrs),
          rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axes", [None, [1], [0, 1, 2, 3]])
def test_mean_variance_normalization(axes, rng):
    attrs = {} if axes is None else {"axes": axes}
    m = model(node("MeanVarianceNormalization", ["x"], **attrs), [inp("x", "float32", ["n", 3, 2, 4])])
    check(m, [{"x": rand(rng, (n, 3, 2, 4))} for n in (2, 3)], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- onnx's own node tests

BACKEND_CASES = [
    "test_conv_with_autopad_same", "test_convtranspose_autopad_same", "test_convtranspose_output_shape",
    "test_convtranspose_kernel_shape", "test_maxpool_2d_same_lower", "test_averagepool_2d_same_upper",
    "test_averagepool_2d_ceil_last_window_starts_on_pad", "test_lppool_2d_dilations", "test_hardmax_one_hot",
    "test_softmax_axis_0", "test_logsoftmax_large_number", "test_gelu_tanh_2", "test_layer_normalization_4d_axis1",
    "test_batchnorm_epsilon", "test_instancenorm_example", "test_lrn", "test_prelu_broadcast", "test_celu",
]


@pytest.mark.parametrize("name", BACKEND_CASES)
def test_onnx_backend_node_case(name):
    run_backend_case(name)
