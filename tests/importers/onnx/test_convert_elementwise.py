"""Elementwise converters against onnxruntime (or onnx's reference
evaluator where onnxruntime lacks the op or the opset): unary math,
broadcasting binary ops, variadic ops, Where, Clip, Cast, legacy broadcasting.

The helpers at the top are shared by the other math converter tests.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import relaxpack
from relaxpack.vm_build import build  # not relaxpack.build: importing the module shadows it
from relaxpack.errors import UnsupportedOpError, RelaxpackError
from relaxpack.runtime import VirtualMachine

OPSET = 21
NP_TO_ONNX = {np.dtype(k): v for k, v in {
    "float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT, "float64": TensorProto.DOUBLE,
    "int8": TensorProto.INT8, "int16": TensorProto.INT16, "int32": TensorProto.INT32,
    "int64": TensorProto.INT64, "uint8": TensorProto.UINT8, "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64, "bool": TensorProto.BOOL}.items()}


# ---------------------------------------------------------------- shared helpers


def inp(name, dtype, shape):
    """A graph input: ``dtype`` a numpy dtype name, ``shape`` may hold dim names."""
    return helper.make_tensor_value_info(name, NP_TO_ONNX[np.dtype(dtype)], shape)


def model(nodes, inputs, outputs=("y",), opset=OPSET, initializers=None):
    """A model of ``nodes``; ``initializers`` maps names to arrays."""
    nodes = nodes if isinstance(nodes, list) else [nodes]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs],
                              inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", opset)])


def node(op, inputs, outputs=("y",), **attrs):
    return helper.make_node(op, list(inputs), list(outputs), **attrs)


def reference_outputs(m, feeds, reference="ort"):
    if reference == "ort":
        session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(m).run(None, feeds)


def check(m, feeds_list, reference="ort", rtol=1e-5, atol=1e-6, dims=None, expected=None):
    """Import and build ``m`` once, run every feed dict and compare each
    output's dtype, shape and values with the reference (``expected``: a
    function of the feeds giving the outputs, instead of a runtime)."""
    if isinstance(feeds_list, dict):
        feeds_list = [feeds_list]
    mod = relaxpack.from_onnx(m, dims=dims)
    vm = VirtualMachine(build(mod))
    names = [o.name for o in m.graph.output]
    for feeds in feeds_list:
        got = vm.run(feeds)
        want = expected(**feeds) if expected is not None else reference_outputs(m, feeds, reference)
        want = want if isinstance(want, (list, tuple)) else [want]
        for name, w in zip(names, want):
            assert_same(got[name], np.asarray(w), rtol, atol, name)
    return mod


def assert_same(got, want, rtol, atol, name="y"):
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=name)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=name)


def rand(rng, shape, dtype="float32", low=-3.0, high=3.0):
    dtype = np.dtype(dtype)
    if dtype == bool:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = max(int(low), np.iinfo(dtype).min)
        return rng.integers(lo, int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ---------------------------------------------------------------- unary

# op -> (low, high) of the input range
FLOAT_UNARY = {
    "Abs": (-3, 3), "Neg": (-3, 3), "Exp": (-3, 3), "Log": (0.1, 5), "Sqrt": (0.0, 5),
    "Reciprocal": (0.5, 3), "Floor": (-3, 3), "Ceil": (-3, 3), "Round": (-3, 3), "Sign": (-3, 3),
    "Sin": (-3, 3), "Cos": (-3, 3), "Tan": (-1.2, 1.2), "Asin": (-1, 1), "Acos": (-1, 1), "Atan": (-3, 3),
    "Sinh": (-3, 3), "Cosh": (-3, 3), "Asinh": (-3, 3), "Acosh": (1, 5), "Atanh": (-0.95, 0.95),
    "Erf": (-3, 3), "Tanh": (-3, 3), "Sigmoid": (-6, 6), "Relu": (-3, 3), "Softplus": (-5, 5),
    "Softsign": (-3, 3),
}


@pytest.mark.parametrize("op", sorted(FLOAT_UNARY))
def test_float_unary_with_symbolic_dims(op, rng):
    low, high = FLOAT_UNARY[op]
    m = model(node(op, ["x"]), [inp("x", "float32", ["n", 3])])
    feeds = [{"x": rand(rng, (n, 3), "float32", low, high)} for n in (1, 5)]
    feeds.append({"x": np.zeros((0, 3), np.float32)})
    check(m, feeds, rtol=2e-6, atol=1e-6)


NUMPY_UNARY = {
    "Exp": np.exp, "Sqrt": np.sqrt, "Neg": np.negative, "Floor": np.floor, "Erf": np.vectorize(math.erf),
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)), "Reciprocal": lambda x: 1 / x,
}


@pytest.mark.parametrize("dtype", ["float16", "float64"])
@pytest.mark.parametrize("op", sorted(NUMPY_UNARY))
def test_float_unary_other_dtypes(op, dtype, rng):
    """Against float64 numpy (onnxruntime lacks several of these kernels,
    and onnx's reference evaluates some in float32)."""
    m = model(node(op, ["x"]), [inp("x", dtype, [2, 7])])
    check(m, {"x": rand(rng, (2, 7), dtype, 0.2, 3)}, rtol=1e-3 if dtype == "float16" else 1e-15, atol=0,
          expected=lambda x: NUMPY_UNARY[op](x.astype(np.float64)).astype(dtype))


def test_round_is_half_to_even():
    m = model(node("Round", ["x"]), [inp("x", "float32", [6])])
    check(m, {"x": np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4], np.float32)})


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign"])
def test_int_unary(op, dtype, rng):
    m = model(node(op, ["x"]), [inp("x", dtype, [9])])
    check(m, {"x": rand(rng, (9,), dtype, -50, 50)})


def test_not_and_bitwise_not(rng):
    m = model([node("Not", ["b"], ["y"]), node("BitwiseNot", ["i"], ["z"])],
              [inp("b", "bool", [4, 3]), inp("i", "uint8", [5])], ["y", "z"])
    check(m, {"b": rand(rng, (4, 3), bool), "i": rand(rng, (5,), "uint8", 0, 255)})


def test_opset1_consumed_inputs_is_accepted(rng):
    m = model(node("Abs", ["x"], consumed_inputs=[0]), [inp("x", "float32", [4])], opset=1)
    check(m, {"x": rand(rng, (4,))}, expected=lambda x: np.abs(x))


SPECIALS = np.array([0.0, -1.5, np.inf, -np.inf, np.nan, 3.0], np.float32)


@pytest.mark.parametrize("neg, pos", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_isinf_detect_sign(neg, pos):
    m = model(node("IsInf", ["x"], detect_negative=neg, detect_positive=pos), [inp("x", "float32", ["n"])])
    check(m, {"x": SPECIALS})


def test_isnan():
    m = model(node("IsNaN", ["x"]), [inp("x", "float64", [6])])
    check(m, {"x": SPECIALS.astype(np.float64)})


# ---------------------------------------------------------------- binary

ARITH = ["Add", "Sub", "Mul", "Div"]


@pytest.mark.parametrize("op", ARITH)
@pytest.mark.parametrize("shapes", [(["n", 4], [4]), (["n", 1, 3], [2, 1]), ([], ["n"])],
                         ids=["row", "outer", "scalar"])
def test_arith_broadcasting_float(op, shapes, rng):
    a_shape, b_shape = shapes
    m = model(node(op, ["a", "b"]), [inp("a", "float32", a_shape), inp("b", "float32", b_shape)])
    feeds = []
    for n in (1, 3):
        concrete = [[n if d == "n" else d for d in s] for s in shapes]
        feeds.append({"a": rand(rng, concrete[0]), "b": rand(rng, concrete[1], low=0.5, high=2)})
    check(m, feeds)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8"])
@pytest.mark.parametrize("op", ARITH + ["Mod"])
def test_arith_int(op, dtype, rng):
    """Integer Div truncates toward zero; Mod takes the divisor's sign."""
    m = model(node(op, ["a", "b"]), [inp("a", dtype, [3, 5]), inp("b", dtype, [5])])
    a = rand(rng, (3, 5), dtype, -20, 20)
    b = rand(rng, (5,), dtype, -7, 7)
    b[b == 0] = 3
    check(m, {"a": a, "b": b})


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_fmod(dtype, rng):
    m = model(node("Mod", ["a", "b"], fmod=1), [inp("a", dtype, [8]), inp("b", dtype, [8])])
    a = rand(rng, (8,), dtype, -20, 20)
    b = rand(rng, (8,), dtype, 1, 6) * np.where(np.arange(8) % 2, 1, -1).astype(dtype)
    check(m, {"a": a, "b": b})


@pytest.mark.parametrize("base, exponent", [("float32", "float32"), ("float32", "int64"),
                                            ("int32", "int32"), ("int64", "float32"), ("float64", "float32")])
def test_pow_mixed_dtypes(base, exponent, rng):
    m = model(node("Pow", ["x", "e"]), [inp("x", base, [2, 4]), inp("e", exponent, [4])])
    x = rand(rng, (2, 4), base, 1, 4)
    e = rand(rng, (4,), exponent, 0, 3)
    check(m, {"x": x, "e": e}, rtol=1e-6)


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_comparisons(op, dtype, rng):
    m = model(node(op, ["a", "b"]), [inp("a", dtype, ["n", 3]), inp("b", dtype, [3])])
    feeds = [{"a": rand(rng, (n, 3), dtype, -2, 2), "b": rand(rng, (3,), dtype, -2, 2)} for n in (2, 4)]
    check(m, feeds)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical(op, rng):
    m = model(node(op, ["a", "b"]), [inp("a", "bool", [3, 4]), inp("b", "bool", [4])])
    check(m, {"a": rand(rng, (3, 4), bool), "b": rand(rng, (4,), bool)})


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", ["int32", "uint8"])
def test_bitwise(op, dtype, rng):
    m = model(node(op, ["a", "b"]), [inp("a", dtype, [6]), inp("b", dtype, [6])])
    check(m, {"a": rand(rng, (6,), dtype, -100, 100), "b": rand(rng, (6,), dtype, -100, 100)})


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["uint8", "uint32", "uint64"])
def test_bit_shift(direction, dtype, rng):
    m = model(node("BitShift", ["x", "s"], direction=direction), [inp("x", dtype, [7]), inp("s", dtype, [7])])
    x = rand(rng, (7,), dtype, 0, 200)
    s = np.array([0, 1, 2, 3, 5, 7, 4], dtype)
    check(m, {"x": x, "s": s})


def test_bit_shift_signed_is_unsupported_before_opset_28():
    m = model(node("BitShift", ["x", "s"], direction="LEFT"), [inp("x", "int32", [2]), inp("s", "int32", [2])])
    with pytest.raises(UnsupportedOpError, match=r"BitShift node.*opset 21.*unsigned"):
        relaxpack.from_onnx(m)


def _shift_by_spec(x, s, direction):
    """Opset 28's BitShift on Python ints: out-of-range amounts leave the sign fill."""
    bits = x.dtype.itemsize * 8
    out = []
    for a, n in zip(*np.broadcast_arrays(x, s)):
        a, n = int(a), int(n)
        if n < 0 or n >= bits:
            out.append(-1 if direction == "RIGHT" and a < 0 else 0)
        elif direction == "RIGHT":
            out.append(a >> n)
        else:
            out.append((a << n) & ((1 << bits) - 1))
    return np.array(out, np.uint64).astype(x.dtype) if x.dtype.kind == "u" else \
        np.array([(v + (1 << bits - 1)) % (1 << bits) - (1 << bits - 1) for v in out], x.dtype)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16"])
def test_bit_shift_opset_28_all_ints(direction, dtype, rng):
    """Signed ints (arithmetic right shift), negative and too-wide amounts, a
    broadcast amount, symbolic and empty dims: against the spec on Python ints
    and onnx's reference evaluator."""
    bits = np.dtype(dtype).itemsize * 8
    m = model(node("BitShift", ["x", "s"], direction=direction), [inp("x", dtype, ["n"]), inp("s", dtype, [1])],
              opset=28)
    amounts = [0, 1, bits - 1, bits, bits + 3] + ([-1, -bits] if dtype.startswith("int") else [])
    info = np.iinfo(dtype)
    x = np.concatenate([rand(rng, (9,), dtype, -100, 100), np.array([info.min, info.max], dtype)])
    for a in amounts:
        s = np.array([a], dtype)
        feeds = [{"x": x, "s": s}, {"x": x[:0], "s": s}]
        check(m, feeds, reference="onnx")
        check(m, feeds, expected=lambda x, s: _shift_by_spec(x, s, direction))


def test_empty_tensor_broadcast(rng):
    m = model(node("Mul", ["a", "b"]), [inp("a", "float32", ["n", 2]), inp("b", "float32", [1, 2])])
    check(m, [{"a": np.zeros((0, 2), np.float32), "b": rand(rng, (1, 2))}])


# ---------------------------------------------------------------- legacy broadcasting (opset < 7)


@pytest.mark.parametrize("op, fn", [("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract)])
def test_legacy_broadcast_with_axis(op, fn, rng):
    m = model(node(op, ["a", "b"], broadcast=1, axis=1), [inp("a", "float32", [2, 3, 4, 5]),
                                                         inp("b", "float32", [3, 4])], opset=6)
    check(m, {"a": rand(rng, (2, 3, 4, 5)), "b": rand(rng, (3, 4))},
          expected=lambda a, b: fn(a, b[:, :, None]))


def test_legacy_broadcast_suffix(rng):
    m = model(node("Div", ["a", "b"], broadcast=1), [inp("a", "float32", [2, 3]), inp("b", "float32", [3])],
              opset=6)
    check(m, {"a": rand(rng, (2, 3)), "b": rand(rng, (3,), low=1, high=2)}, expected=lambda a, b: a / b)


# ---------------------------------------------------------------- variadic


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_variadic(op, count, rng):
    shapes = [["n", 3], [3], [1, 1]][:count]
    names = [f"x{i}" for i in range(count)]
    m = model(node(op, names), [inp(nm, "float32", s) for nm, s in zip(names, shapes)])
    feeds = []
    for n in (1, 4):
        feeds.append({nm: rand(rng, [n if d == "n" else d for d in s]) for nm, s in zip(names, shapes)})
    check(m, feeds)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_variadic_int(op, rng):
    m = model(node(op, ["a", "b"]), [inp("a", "int32", [4]), inp("b", "int32", [4])])
    check(m, {"a": rand(rng, (4,), "int32", -9, 9), "b": rand(rng, (4,), "int32", -9, 9)})


# ---------------------------------------------------------------- where, identity


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_where(dtype, rng):
    m = model(node("Where", ["c", "a", "b"]), [inp("c", "bool", ["n", 1]), inp("a", dtype, [3]),
                                               inp("b", dtype, ["n", 3])])
    feeds = [{"c": rand(rng, (n, 1), bool), "a": rand(rng, (3,), dtype), "b": rand(rng, (n, 3), dtype)}
             for n in (2, 5)]
    check(m, feeds, reference="ref" if dtype == "bool" else "ort")  # onnxruntime has no bool Where


def test_where_broadcasts_unrelated_symbolic_dims_at_run_time(rng):
    """Three operands whose middle dims only the run relates (a mask made by an Expand against
    scores): any of them may be 1, or all equal."""
    m = model(node("Where", ["c", "a", "b"]), [inp("c", "bool", ["n", "k", 5]), inp("a", "float32", ["n", "h", 5]),
                                               inp("b", "float32", ["n", "g", 5])])
    feeds = [{"c": rand(rng, (2, k, 5), bool), "a": rand(rng, (2, h, 5)), "b": rand(rng, (2, g, 5))}
             for k, h, g in [(1, 3, 1), (3, 1, 3), (1, 1, 4), (2, 2, 2), (3, 3, 1), (1, 1, 1)]]
    check(m, feeds)


@pytest.mark.parametrize("op, dtype, attrs", [("Pow", "float32", {}), ("Mod", "float32", {"fmod": 1}),
                                             ("Mod", "int32", {}), ("BitShift", "uint8", {"direction": "LEFT"}),
                                             ("PRelu", "float32", {})])
def test_binary_ops_broadcast_unrelated_symbolic_dims_at_run_time(op, dtype, attrs, rng):
    """The binary ops outside the common table broadcast as Add does (either operand's dim 1)."""
    m = model(node(op, ["a", "b"], **attrs), [inp("a", dtype, ["n", "h", 5]), inp("b", dtype, ["n", "g", 5])],
              opset=17)

    def operand(shape):
        if dtype == "uint8":
            return rand(rng, shape, dtype, 0, 7)
        if dtype == "int32":
            return rand(rng, shape, dtype, 1, 9)
        return np.abs(rand(rng, shape)) + np.float32(0.5)
    check(m, [{"a": operand((2, h, 5)), "b": operand((2, g, 5))} for h, g in [(3, 1), (1, 3), (2, 2)]])


def test_identity_keeps_the_value(rng):
    m = model([node("Identity", ["x"], ["t"]), node("Relu", ["t"])], [inp("x", "float32", ["n"])])
    mod = check(m, {"x": rand(rng, (5,))})
    assert "R.nn.relu(x)" in mod.script()


# ---------------------------------------------------------------- clip


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_clip_constant_bounds(dtype, rng):
    m = model(node("Clip", ["x", "lo", "hi"]), [inp("x", dtype, ["n", 4])],
              initializers={"lo": np.array(-1, dtype), "hi": np.array(2, dtype)})
    check(m, [{"x": rand(rng, (n, 4), dtype, -5, 5)} for n in (1, 3)])


def test_clip_only_max_and_no_bounds(rng):
    m = model([node("Clip", ["x", "", "hi"], ["y"]), node("Clip", ["x"], ["z"])], [inp("x", "float32", [6])],
              ["y", "z"], initializers={"hi": np.array(0.5, np.float32)})
    check(m, {"x": rand(rng, (6,))})


def test_clip_dynamic_bounds(rng):
    m = model(node("Clip", ["x", "lo", "hi"]), [inp("x", "float32", [8]), inp("lo", "float32", []),
                                                inp("hi", "float32", [])])
    check(m, [{"x": rand(rng, (8,)), "lo": np.array(-1, np.float32), "hi": np.array(1.5, np.float32)},
              {"x": rand(rng, (8,)), "lo": np.array(1, np.float32), "hi": np.array(0, np.float32)}])


def test_clip_mixed_constant_and_dynamic_bounds(rng):
    m = model(node("Clip", ["x", "lo", "hi"]), [inp("x", "float32", [8]), inp("hi", "float32", [])],
              initializers={"lo": np.array(-1, np.float32)})
    check(m, {"x": rand(rng, (8,)), "hi": np.array(0.25, np.float32)})


@pytest.mark.parametrize("attrs", [{"min": -0.5, "max": 0.5}, {"min": 0.0}, {}])
def test_clip_opset6_attributes(attrs, rng):
    m = model(node("Clip", ["x"], **attrs), [inp("x", "float32", [2, 5])], opset=6)
    x = rand(rng, (2, 5))
    x[0, 0] = np.inf
    check(m, {"x": x}, expected=lambda x: np.clip(x, attrs.get("min", -3.4028234663852886e38),
                                                  attrs.get("max", 3.4028234663852886e38)).astype(np.float32))


# ---------------------------------------------------------------- cast


@pytest.mark.parametrize("src, dst", [("float32", "int32"), ("float32", "float16"), ("int64", "float32"),
                                      ("float64", "bool"), ("bool", "float32"), ("int32", "int8"),
                                      ("float16", "float64"), ("uint8", "int64")])
def test_cast(src, dst, rng):
    m = model(node("Cast", ["x"], to=NP_TO_ONNX[np.dtype(dst)]), [inp("x", src, ["n", 3])])
    check(m, [{"x": rand(rng, (n, 3), src, -100, 100)} for n in (2, 3)])


def test_cast_opset1_names_the_type_as_a_string(rng):
    m = model(node("Cast", ["x"], to="INT32"), [inp("x", "float32", [4])], opset=1)
    check(m, {"x": rand(rng, (4,), low=-9, high=9)}, expected=lambda x: x.astype(np.int32))


def test_cast_like(rng):
    m = model(node("CastLike", ["x", "like"]), [inp("x", "float32", [5]), inp("like", "int64", [0])])
    check(m, {"x": rand(rng, (5,), low=-9, high=9), "like": np.zeros(0, np.int64)})


FLOAT8 = [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
          TensorProto.FLOAT8E5M2FNUZ]


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("to", FLOAT8, ids=lambda t: TensorProto.DataType.Name(t))
def test_cast_to_float8_saturate(to, saturate):
    """Out-of-range values and infinities clamp to the largest finite value
    with ``saturate`` (onnx's reference), else become inf/NaN."""
    x = np.array([0.4, -3.3, 300, 1e6, -1e6, np.inf, -np.inf, np.nan], np.float32)
    m = model([node("Cast", ["x"], ["f8"], to=to, saturate=saturate),
               node("Cast", ["f8"], ["y"], to=TensorProto.FLOAT)], [inp("x", "float32", [8])])
    check(m, {"x": x}, reference="ref", rtol=0, atol=0)


def test_binary_with_an_unknown_attribute_names_it():
    m = model(node("Add", ["a", "b"], axis=0), [inp("a", "float32", [2]), inp("b", "float32", [2])])
    with pytest.raises(UnsupportedOpError, match="axis"):
        relaxpack.from_onnx(m)



def test_broadcast_of_dims_only_the_run_can_relate():
    """(n, 3) + (m, 3) with unrelated n and m: equal, or one of them 1, is
    decided at run time (as onnxruntime does), from one build."""
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g",
                               [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3]),
                                helper.make_tensor_value_info("b", TensorProto.FLOAT, ["m", 3])],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = relaxpack.from_onnx(model)
    assert 'R.call_packed("dyn.broadcast_pair"' in mod.script()
    vm = VirtualMachine(build(mod))
    rng = np.random.default_rng(0)
    for n, m in [(4, 4), (1, 5), (6, 1), (0, 1), (1, 1)]:
        a, b = rng.standard_normal((n, 3)).astype(np.float32), rng.standard_normal((m, 3)).astype(np.float32)
        np.testing.assert_array_equal(vm.run({"a": a, "b": b})["y"], a + b)
    with pytest.raises(RelaxpackError, match=r"^ONNX node 'Add:y': broadcast: cannot broadcast \(n, 3\) and \(m, 3\): "
                                             r"n = 2 and m = 3 differ and neither is 1$"):
        vm.run({"a": np.ones((2, 3), np.float32), "b": np.ones((3, 3), np.float32)})
