"""Quantization converters: every ONNX backend node test of QuantizeLinear,
DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, ConvInteger,
QLinearMatMul and QLinearConv, then seeded random inputs against
onnxruntime (onnx's reference evaluator for the float8 targets), with
symbolic batch dims run at two sizes per build.

The integer GEMMs (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv)
are judged by their exact semantics, onnx's reference evaluator, never by
onnxruntime: its u8 x s8 kernels add products in int16-saturating pairs on
CPUs without VNNI (``tests/integer_semantics.py``)."""

from __future__ import annotations

import re
import warnings

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError
from relaxpack.runtime import VirtualMachine

from .backend_case import node_cases, run_backend_case
from .test_convert_elementwise import check, model, node, rand

# ---------------------------------------------------------------- backend node tests

_OPS = re.compile(r"^test_(quantizelinear|dequantizelinear|dynamicquantizelinear|qlinearmatmul|qlinearconv|"
                  r"matmulinteger|convinteger)")
BACKEND_CASES = sorted(name for name in node_cases() if _OPS.match(name))

#: Cases relaxpack cannot run, and why: the 2-bit integer types are not IR dtypes.
EXPECTED_FAILURES: dict[str, str] = {}  # every case passes (int2/uint2 come from ml_dtypes)


def test_backend_case_list():
    assert len(BACKEND_CASES) == 45
    assert set(EXPECTED_FAILURES) <= set(BACKEND_CASES)


@pytest.mark.parametrize("name", BACKEND_CASES)
def test_backend_node_case(name):
    if name in EXPECTED_FAILURES:
        with pytest.raises(UnsupportedOpError, match=EXPECTED_FAILURES[name]):
            run_backend_case(name)
        return
    run_backend_case(name)


# ---------------------------------------------------------------- helpers


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def inp(name, dtype, shape):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)


def ties(rng, shape, scale):
    """Values whose quotient by ``scale`` is often exactly k + 0.5 (round half to
    even matters), plus some far outside every target's range."""
    x = (rng.integers(-600, 600, size=shape) + 0.5) * scale
    x = np.where(rng.random(shape) < 0.5, x, rng.uniform(-300, 300, size=shape) * scale)
    return x.astype(np.float32)


# ---------------------------------------------------------------- QuantizeLinear / DequantizeLinear


@pytest.mark.parametrize("zp_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_quantize_per_axis_symbolic_batch(zp_dtype, axis, rng):
    shape = ["n", 3, 5]
    length = {1: 3, -1: 5, 0: None}[axis]
    if length is None:   # per-axis along the symbolic dim needs a runtime scale: per-tensor here
        scale, zp = np.float32(0.05), rand(rng, (), zp_dtype, low=-20, high=20)
    else:
        scale = rng.uniform(0.01, 0.1, size=length).astype(np.float32)
        zp = rand(rng, (length,), zp_dtype, low=-20, high=20)
    m = model(node("QuantizeLinear", ["x", "s", "zp"], axis=axis), [inp("x", "float32", shape)], opset=13,
              initializers={"s": scale, "zp": zp})
    check(m, [{"x": ties(rng, (n, 3, 5), 0.05)} for n in (2, 7, 0)])


@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23, 25])
@pytest.mark.parametrize("zp_dtype", ["uint8", "int8", None])
def test_per_tensor_round_trip_each_opset(opset, zp_dtype, rng):
    """QuantizeLinear then DequantizeLinear, scale and zero point as graph inputs."""
    q_inputs, inputs = ["x", "s"], [inp("x", "float32", ["n", 4]), inp("s", "float32", [])]
    feeds = [{"x": ties(rng, (n, 4), 0.25), "s": np.array(0.25, np.float32)} for n in (3, 1)]
    if zp_dtype is not None:
        q_inputs.append("zp")
        inputs.append(inp("zp", zp_dtype, []))
        for f in feeds:
            f["zp"] = np.array(7, zp_dtype)
    nodes = [node("QuantizeLinear", q_inputs, ["q"]), node("DequantizeLinear", ["q", *q_inputs[1:]], ["y"])]
    check(model(nodes, inputs, ["q", "y"], opset=opset), feeds)


@pytest.mark.parametrize("zp_dtype", ["uint8", "int8"])
def test_dequantize_per_axis_symbolic_batch(zp_dtype, rng):
    m = model(node("DequantizeLinear", ["x", "s", "zp"], axis=1), [inp("x", zp_dtype, ["n", 4, 3])], opset=13,
              initializers={"s": rng.uniform(0.01, 1, 4).astype(np.float32), "zp": rand(rng, (4,), zp_dtype)})
    check(m, [{"x": rand(rng, (n, 4, 3), zp_dtype, low=-128, high=255)} for n in (1, 6)])


def test_quantize_dequantize_runtime_scales(rng):
    """Scales and zero points as graph inputs (per axis), chained Q -> DQ."""
    nodes = [node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=0),
             node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=0)]
    m = model(nodes, [inp("x", "float32", [4, "n"]), inp("s", "float32", [4]), inp("zp", "uint8", [4])],
              ["q", "y"], opset=13)
    scale = np.float32(0.1) * np.arange(1, 5, dtype=np.float32)
    check(m, [{"x": ties(rng, (4, n), 0.1), "s": scale, "zp": rand(rng, (4,), "uint8", high=255)} for n in (3, 8)])


@pytest.mark.parametrize("zp_dtype", ["int16", "uint16", "int8"])
def test_quantize_opset21_16bit_and_no_zero_point(zp_dtype, rng):
    m = model([node("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=1),
               node("QuantizeLinear", ["x", "s"], ["z"], axis=1)],
              [inp("x", "float32", ["n", 3])], ["y", "z"], opset=21,
              initializers={"s": np.array([0.002, 0.01, 0.5], np.float32), "zp": rand(rng, (3,), zp_dtype)})
    check(m, [{"x": ties(rng, (n, 3), 0.01) * 10} for n in (5, 2)])


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
@pytest.mark.parametrize("block_size, length", [(2, 6), (4, 7), (3, 3)])
def test_blocked(op, block_size, length, rng):
    blocks = -(-length // block_size)
    if op == "QuantizeLinear":
        x = ties(rng, (4, length), 0.1)
    else:
        x = rand(rng, (4, length), "int8", low=-128, high=127)
    m = model(node(op, ["x", "s", "zp"], axis=1, block_size=block_size), [inp("x", x.dtype, [4, length])],
              opset=21, initializers={"s": rng.uniform(0.05, 0.2, (4, blocks)).astype(np.float32),
                                      "zp": rand(rng, (4, blocks), "int8", low=-10, high=10)})
    check(m, {"x": x})


def test_blocked_along_symbolic_dim(rng):
    """Blocks along a symbolic axis: the repeat indices come from a range op."""
    m = model(node("DequantizeLinear", ["x", "s"], axis=0, block_size=4),
              [inp("x", "int8", ["n", 3]), inp("s", "float32", ["b", 3])], opset=21)
    feeds = []
    for n in (8, 6):
        feeds.append({"x": rand(rng, (n, 3), "int8", low=-128, high=127),
                      "s": rng.uniform(0.1, 1, (-(-n // 4), 3)).astype(np.float32)})
    check(m, feeds, reference="reference")


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
def test_int4_round_trip(dtype, rng):
    zp = np.array([1, -2, 3] if dtype == "int4" else [1, 8, 15], dtype=getattr(ml_dtypes, dtype))
    nodes = [node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=0),
             node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=0)]
    m = model(nodes, [inp("x", "float32", [3, "n"])], ["q", "y"], opset=21,
              initializers={"s": np.array([0.5, 1.0, 2.0], np.float32), "zp": zp})
    check(m, [{"x": ties(rng, (3, n), 1.0) / 40} for n in (4, 9)], reference="reference")


@pytest.mark.parametrize("target", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                                    TensorProto.FLOAT8E5M2FNUZ])
@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_float8_saturate(target, saturate, rng):
    m = model([node("QuantizeLinear", ["x", "s"], ["q"], output_dtype=target, saturate=saturate),
               node("DequantizeLinear", ["q", "s"], ["y"])],
              [inp("x", "float32", ["n"])], ["q", "y"], opset=21, initializers={"s": np.float32(0.5)})
    x = np.concatenate([rng.uniform(-30, 30, 20), [1e5, -1e5, 200.25, 0.0]]).astype(np.float32)
    check(m, [{"x": x}, {"x": x[:7]}], reference="reference", rtol=0, atol=0)


def test_quantize_float16_and_precision(rng):
    """float16 x with a float32 scale divides in float32; ``precision`` picks float16."""
    m = model([node("QuantizeLinear", ["x", "s", "zp"], ["y"]),
               node("QuantizeLinear", ["x", "s", "zp"], ["z"], precision=TensorProto.FLOAT16)],
              [inp("x", "float16", ["n"])], ["y", "z"], opset=23,
              initializers={"s": np.float32(0.3), "zp": np.int8(3)})
    check(m, [{"x": rng.uniform(-40, 40, n).astype(np.float16)} for n in (16, 5)], reference="reference")


def test_quantize_int32_input(rng):
    """An int32 x divides in float64 (numpy's promotion, as onnx's reference does)."""
    m = model(node("QuantizeLinear", ["x", "s", "zp"]), [inp("x", "int32", ["n"])], opset=10,
              initializers={"s": np.float32(3.0), "zp": np.int8(-4)})
    check(m, [{"x": rand(rng, (n,), "int32", low=-500, high=500)} for n in (12, 3)], reference="reference")


def test_dequantize_output_dtype_and_int32(rng):
    m = model([node("DequantizeLinear", ["x", "s"], ["y"], output_dtype=TensorProto.FLOAT16),
               node("DequantizeLinear", ["w", "s"], ["z"])],
              [inp("x", "uint8", ["n"]), inp("w", "int32", ["n"])], ["y", "z"], opset=23,
              initializers={"s": np.float32(0.125)})
    check(m, [{"x": rand(rng, (n,), "uint8", high=255), "w": rand(rng, (n,), "int32", low=-1e6, high=1e6)}
              for n in (3, 10)], reference="reference")


def test_float8_e8m0_scale_opset24(rng):
    """Opset 24 allows power-of-two float8e8m0 scales (the opset-23 converters serve it)."""
    scale = np.array([0.5, 2.0, 4.0], ml_dtypes.float8_e8m0fnu)
    nodes = [node("QuantizeLinear", ["x", "s"], ["q"], axis=0, output_dtype=TensorProto.INT8),
             node("DequantizeLinear", ["q", "s"], ["y"], axis=0, output_dtype=TensorProto.FLOAT)]
    m = model(nodes, [inp("x", "float32", [3, "n"])], ["q", "y"], opset=24, initializers={"s": scale})
    check(m, [{"x": ties(rng, (3, n), 1.0)} for n in (4, 2)], reference="reference")


def test_quantize_unsupported_and_malformed():
    bad_type = model(node("QuantizeLinear", ["x", "s"], output_dtype=TensorProto.INT32),
                     [inp("x", "float32", [3])], opset=21, initializers={"s": np.float32(1)})
    with pytest.raises(UnsupportedOpError, match="int32"):
        relaxpack.from_onnx(bad_type)
    bad_length = model(node("QuantizeLinear", ["x", "s"], axis=1), [inp("x", "float32", [2, 3])], opset=13,
                       initializers={"s": np.ones(4, np.float32)})
    with pytest.raises(ShapeError, match="4 elements"):
        relaxpack.from_onnx(bad_length)
    bad_blocks = model(node("DequantizeLinear", ["x", "s"], axis=1, block_size=2),
                       [inp("x", "uint8", [2, 6])], opset=21, initializers={"s": np.ones((2, 2), np.float32)})
    with pytest.raises(ShapeError, match="blocks"):
        relaxpack.from_onnx(bad_blocks)


# ---------------------------------------------------------------- DynamicQuantizeLinear


@pytest.mark.parametrize("low, high", [(-3, 5), (1, 4), (-6, -2), (0, 0)])
def test_dynamic_quantize(low, high, rng):
    """All zeros: the scale is 1 like onnxruntime's (onnx's reference gives 1/255)."""
    m = model(node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"]), [inp("x", "float32", ["n", 3])],
              ["y", "s", "zp"], opset=11)
    check(m, [{"x": rand(rng, (n, 3), low=low, high=high)} for n in (4, 1, 0)])


# ---------------------------------------------------------------- integer matmul and conv


@pytest.mark.parametrize("a_dtype, b_dtype", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")])
def test_matmul_integer(a_dtype, b_dtype, rng):
    m = model(node("MatMulInteger", ["a", "b", "azp", "bzp"]), [inp("a", a_dtype, ["n", 3, 7])], opset=10,
              initializers={"b": rand(rng, (7, 5), b_dtype, low=-128, high=255), "azp": rand(rng, (), a_dtype),
                            "bzp": rand(rng, (5,), b_dtype)})
    check(m, [{"a": rand(rng, (n, 3, 7), a_dtype, low=-128, high=255)} for n in (2, 3)], reference="reference")


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul_symbolic_batch(dtype, per_column, rng):
    """The requested check: QLinearMatMul with a symbolic batch, two sizes, one build."""
    n_cols = 5
    b_scale = rng.uniform(0.01, 0.05, n_cols if per_column else ()).astype(np.float32)
    b_zp = rand(rng, (n_cols,) if per_column else (), dtype, low=-5, high=5)
    inits = {"as": np.float32(0.02), "azp": rand(rng, (), dtype, low=-20, high=20),
             "b": rand(rng, (9, n_cols), dtype, low=-128, high=255), "bs": b_scale, "bzp": b_zp,
             "ys": np.float32(0.15), "yzp": rand(rng, (), dtype, low=-10, high=10)}
    m = model(node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"]),
              [inp("a", dtype, ["batch", 4, 9])], opset=10, initializers=inits)
    check(m, [{"a": rand(rng, (n, 4, 9), dtype, low=-128, high=255)} for n in (1, 3)], reference="reference")


def test_per_row_zero_points_and_scales_against_formula(rng):
    """A 1-D a_zero_point / a_scale holds one value per row of a (neither
    onnxruntime nor onnx's reference evaluator takes them)."""
    a = rand(rng, (4, 6), "uint8", high=255)
    b = rand(rng, (6, 3), "int8", low=-128, high=127)
    azp, bzp = rand(rng, (4,), "uint8", high=255), rand(rng, (3,), "int8", low=-5, high=5)
    a_scale = rng.uniform(0.01, 0.02, 4).astype(np.float32)
    acc = (a.astype(np.int32) - azp[:, None]) @ (b.astype(np.int32) - bzp)
    m = model(node("MatMulInteger", ["a", "b", "azp", "bzp"]), [inp("a", "uint8", [4, 6])], opset=10,
              initializers={"b": b, "azp": azp, "bzp": bzp})
    check(m, {"a": a}, expected=lambda a: acc)
    inits = {"as": a_scale, "azp": azp, "b": b, "bs": np.float32(0.05), "bzp": bzp, "ys": np.float32(0.2),
             "yzp": np.uint8(100)}
    m = model(node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"]),
              [inp("a", "uint8", [4, 6])], opset=10, initializers=inits)
    multiplier = (a_scale[:, None] * np.float32(0.05) / np.float32(0.2)).astype(np.float32)
    want = np.clip(np.rint(acc.astype(np.float32) * multiplier) + 100, 0, 255).astype(np.uint8)
    check(m, {"a": a}, expected=lambda a: want)


def test_qlinear_matmul_runtime_scales_opset21(rng):
    names = ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"]
    inputs = [inp("a", "uint8", ["n", 6]), inp("as", "float32", []), inp("azp", "uint8", []),
              inp("b", "uint8", [6, 4]), inp("bs", "float32", []), inp("bzp", "uint8", []),
              inp("ys", "float32", []), inp("yzp", "uint8", [])]
    m = model(node("QLinearMatMul", names), inputs, opset=21)

    def feeds(n):
        return {"a": rand(rng, (n, 6), "uint8", high=255), "as": np.array(0.03, np.float32),
                "azp": np.array(120, np.uint8), "b": rand(rng, (6, 4), "uint8", high=255),
                "bs": np.array(0.02, np.float32), "bzp": np.array(100, np.uint8), "ys": np.array(0.25, np.float32),
                "yzp": np.array(128, np.uint8)}
    check(m, [feeds(3), feeds(8)])


def test_qlinear_matmul_float8_against_formula(rng):
    """float8 operands (opset 21): onnxruntime and the reference lack them, so
    the check is the spec's formula in numpy."""
    f8 = ml_dtypes.float8_e4m3fn
    a = rng.uniform(-4, 4, (3, 5)).astype(f8)
    b = rng.uniform(-4, 4, (5, 2)).astype(f8)
    zero = np.zeros((), f8)
    inits = {"as": np.float32(0.5), "azp": zero, "b": b, "bs": np.float32(0.25), "bzp": zero,
             "ys": np.float32(0.1), "yzp": zero}
    m = model(node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"]),
              [inp("a", f8, [3, 5])], opset=21, initializers=inits)

    def expected(a):
        product = a.astype(np.float32) @ b.astype(np.float32)
        return np.clip(product * np.float32(0.5 * 0.25 / 0.1), -448, 448).astype(f8)
    check(m, {"a": a}, expected=expected, rtol=0, atol=0)


def _conv_model(op, dtype, w, w_zp, bias=None, **attrs):
    """A ConvInteger or QLinearConv model over x (n, C, 7, 6) with constant parameters."""
    rng = np.random.default_rng(1)
    inits = {"w": w, "wzp": w_zp, "xzp": rand(rng, (), dtype, low=-10, high=10)}
    if op == "ConvInteger":
        names = ["x", "w", "xzp", "wzp"]
    else:
        names = ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"]
        w_scale = np.linspace(0.01, 0.03, w.shape[0], dtype=np.float32) if w_zp.ndim else np.float32(0.02)
        inits.update(xs=np.float32(0.05), ws=w_scale, ys=np.float32(0.4),
                     yzp=rand(rng, (), dtype, low=-10, high=10))
        if bias is not None:
            names.append("B")
            inits["B"] = bias
    channels = w.shape[1] * attrs.get("group", 1)
    return model(node(op, names, **attrs), [inp("x", dtype, ["n", channels, 7, 6])], opset=10, initializers=inits)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 0, 2, 1], "strides": [2, 1]}, {"auto_pad": "SAME_UPPER"},
                                   {"dilations": [2, 1], "group": 2}])
@pytest.mark.parametrize("per_channel", [False, True])
def test_conv_integer(attrs, per_channel, rng):
    w = rand(rng, (4, 2, 3, 2), "uint8", high=255)
    w_zp = rand(rng, (4,) if per_channel else (), "uint8", high=255)
    m = _conv_model("ConvInteger", "uint8", w, w_zp, **attrs)
    check(m, [{"x": rand(rng, (n, 2 * attrs.get("group", 1), 7, 6), "uint8", high=255)} for n in (1, 2)],
          reference="reference")


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("per_channel, with_bias", [(False, False), (True, True)])
def test_qlinear_conv(dtype, per_channel, with_bias, rng):
    w_dtype = "int8" if per_channel else dtype     # onnxruntime: per-channel weights are int8
    w = rand(rng, (3, 2, 3, 3), w_dtype, low=-128, high=255)
    w_zp = np.zeros(3, w_dtype) if per_channel else rand(rng, (), w_dtype, low=-5, high=5)
    bias = rand(rng, (3,), "int32", low=-500, high=500) if with_bias else None
    m = _conv_model("QLinearConv", dtype, w, w_zp, bias, pads=[1, 1, 1, 1])
    check(m, [{"x": rand(rng, (n, 2, 7, 6), dtype, low=-128, high=255)} for n in (2, 1)], reference="reference")


# ---------------------------------------------------------------- NaN and inf


_SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, 1.5, -2.5, 3e4, -7.0, 1e10, -1e10], np.float32)


def _run_levels(m, feeds):
    """The outputs of ``m`` built at -O0 and at -O2 (FuseOps puts the clip in a fused kernel)."""
    mod = relaxpack.from_onnx(m)
    return [VirtualMachine(relaxpack.build(mod, opt_level=level)).run(feeds) for level in (0, 2)]


def _reference_quantized(m, feeds, ort_too=True):
    """onnx's reference evaluator's output and, when asked, onnxruntime's (its graph optimizer off)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ReferenceEvaluator(m).run(None, feeds)[0]
    if not ort_too:
        return ref, None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return ref, session.run(None, feeds)[0]


@pytest.mark.parametrize("zp_dtype", ["int8", "uint8", "int16", "uint16"])
@pytest.mark.parametrize("scale", [0.5, np.inf, 0.0])
def test_quantize_nan_is_the_minimum(zp_dtype, scale):
    """A NaN quotient (NaN input, inf / inf, 0 / 0) quantizes to the type's minimum, as in
    onnxruntime and onnx's reference evaluator; inf saturates. The reference evaluator casts
    to int32 before saturating, so it wraps quotients beyond int32 (+inf, 1e10) to the
    minimum too: there onnxruntime (float clamps, then the cast) and the spec decide."""
    m = model(node("QuantizeLinear", ["x", "s", "zp"]), [inp("x", "float32", ["n"]), inp("s", "float32", [])],
              opset=21, initializers={"zp": np.array(3, zp_dtype)})
    feeds = {"x": _SPECIAL, "s": np.array(scale, np.float32)}
    info = np.iinfo(zp_dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = _SPECIAL / np.float32(scale)
        want = np.where(np.isnan(q), info.min, np.clip(np.rint(q) + 3, info.min, info.max)).astype(zp_dtype)
    ref, ort_out = _reference_quantized(m, feeds)
    within_int32 = np.isnan(q) | (np.abs(q) < 2.0 ** 31)
    np.testing.assert_array_equal(ref[within_int32], want[within_int32])
    np.testing.assert_array_equal(ort_out, want)
    for got in _run_levels(m, feeds):
        np.testing.assert_array_equal(got["y"], want)
        assert got["y"].dtype == np.dtype(zp_dtype)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_qlinear_matmul_nan_requantization_is_the_minimum(dtype):
    """y_scale 0 makes the multiplier inf: a zero accumulator gives 0 * inf = NaN, the minimum
    (onnxruntime's MLAS clamp; onnx's reference evaluator casts the NaN with numpy, 0 on x86),
    the others saturate. Judged by the formula: integer GEMMs are never judged by onnxruntime."""
    inits = {"as": np.float32(0.02), "azp": np.array(3, dtype), "b": np.array([[1, 2], [3, 4], [0, 1]], dtype),
             "bs": np.float32(0.5), "bzp": np.array(0, dtype), "ys": np.float32(0.0), "yzp": np.array(10, dtype)}
    m = model(node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"]), [inp("a", dtype, [3, 3])],
              opset=10, initializers=inits)
    a = np.array([[3, 3, 3], [4, 5, 6], [2, 1, 3]], dtype)
    acc = (a.astype(np.int32) - 3) @ inits["b"].astype(np.int32)
    info = np.iinfo(dtype)
    want = np.where(acc == 0, info.min, np.where(acc > 0, info.max, info.min)).astype(dtype)
    assert (acc == 0).any() and (acc > 0).any()
    for got in _run_levels(m, {"a": a}):
        np.testing.assert_array_equal(got["y"], want)


def test_clip_keeps_onnx_nan_propagation():
    """ONNX Clip is not a quantizer: NaN stays NaN at every level."""
    m = model(node("Clip", ["x", "lo", "hi"]), [inp("x", "float32", ["n"])], opset=13,
              initializers={"lo": np.float32(-1), "hi": np.float32(1)})
    for got in _run_levels(m, {"x": _SPECIAL}):
        np.testing.assert_array_equal(np.isnan(got["y"]), np.isnan(_SPECIAL))
