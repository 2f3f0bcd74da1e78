"""Elementwise kernels against onnx's reference evaluator (and math.erf)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

from relaxpack.runtime.kernels.activation import hard_sigmoid, hard_swish

from .test_kernels_registry import assert_close, rand, run_graph, run_kernel, run_onnx

FLOATS = ["float16", "float32", "float64"]
SIGNED = ["int8", "int32", "int64"]
INTS = [*SIGNED, "uint8", "uint32"]
SHAPES = [(3, 5, 7), (0, 4)]


def node(op_type, inputs, outputs, **attrs):
    return helper.make_node(op_type, inputs, outputs, **attrs)


# ---------------------------------------------------------------- unary

# kernel -> (ONNX op or a graph builder, dtypes, input range)
UNARY = {
    "abs": ("Abs", FLOATS + INTS, None), "negative": ("Neg", FLOATS + SIGNED, None),
    "exp": ("Exp", FLOATS, None), "log": ("Log", FLOATS, (0.01, 5)), "sqrt": ("Sqrt", FLOATS, (0, 5)),
    "sin": ("Sin", FLOATS, None), "cos": ("Cos", FLOATS, None), "tan": ("Tan", FLOATS, (-1.4, 1.4)),
    "tanh": ("Tanh", FLOATS, None), "asin": ("Asin", FLOATS, (-0.99, 0.99)),
    "acos": ("Acos", FLOATS, (-0.99, 0.99)), "atan": ("Atan", FLOATS, None),
    "sinh": ("Sinh", FLOATS, None), "cosh": ("Cosh", FLOATS, None), "asinh": ("Asinh", FLOATS, None),
    "acosh": ("Acosh", FLOATS, (1.01, 5)), "atanh": ("Atanh", FLOATS, (-0.95, 0.95)),
    "sigmoid": ("Sigmoid", FLOATS, (-30, 30)), "floor": ("Floor", FLOATS, (-5, 5)),
    "ceil": ("Ceil", FLOATS, (-5, 5)), "sign": ("Sign", FLOATS + INTS, None),
    "reciprocal": ("Reciprocal", FLOATS, (0.1, 5)),
    "square": (lambda: [node("Mul", ["i0", "i0"], ["o0"])], FLOATS + INTS, None),
    "rsqrt": (lambda: [node("Sqrt", ["i0"], ["t"]), node("Reciprocal", ["t"], ["o0"])], FLOATS, (0.1, 5)),
    "logical_not": ("Not", ["bool"], None), "bitwise_not": ("BitwiseNot", INTS, None),
    "nn.relu": ("Relu", FLOATS + ["int8", "int32", "int64"], None),
    "nn.softplus": ("Softplus", FLOATS, (-20, 20)), "nn.softsign": ("Softsign", FLOATS, None),
    "nn.mish": ("Mish", FLOATS, (-20, 20)), "nn.hard_swish": ("HardSwish", FLOATS, (-5, 5)),
    "nn.silu": (lambda: [node("Sigmoid", ["i0"], ["s"]), node("Mul", ["i0", "s"], ["o0"])], FLOATS, (-20, 20)),
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name, dtype", [(n, d) for n, (_, ds, _) in UNARY.items() for d in ds])
def test_unary(name, dtype, shape):
    op, _, domain = UNARY[name]
    rng = np.random.default_rng(abs(hash((name, dtype))) % 2**32)
    x = rand(rng, shape, dtype, *(domain or (None, None))) if np.dtype(dtype).kind == "f" \
        else rand(rng, shape, dtype)
    nodes = op() if callable(op) else [node(op, ["i0"], ["o0"])]
    expected, = run_graph(nodes, [x], [x.dtype])
    assert_close(run_kernel(name, x), expected, **float64_attr_tolerance(dtype, name == "nn.hard_swish"))


def float64_attr_tolerance(dtype, applies=True) -> dict:
    # ONNX float attributes are float32 (HardSwish's 1/6 is too), and onnx's
    # reference evaluator computes with them (Gelu even through a float32
    # erf), so a float64 result can only match to float32 precision.
    return dict(rtol=1e-6, atol=1e-7) if dtype == "float64" and applies else {}


@pytest.mark.parametrize("dtype", FLOATS)
def test_round_is_half_to_even(dtype):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -3.7, 1e4 + 0.5], dtype)
    expected, = run_onnx("Round", [x])
    assert_close(run_kernel("round", x), expected)
    np.testing.assert_array_equal(run_kernel("round", x[:6]), np.array([-2, -2, -0, 0, 2, 2], dtype))


@pytest.mark.parametrize("dtype", FLOATS)
def test_isnan_isinf_isfinite(dtype):
    x = np.array([[0.0, np.nan, np.inf], [-np.inf, -1.5, 3.0]], dtype)
    for name, nodes in [
        ("isnan", [node("IsNaN", ["i0"], ["o0"])]),
        ("isinf", [node("IsInf", ["i0"], ["o0"])]),
        ("isfinite", [node("IsNaN", ["i0"], ["a"]), node("IsInf", ["i0"], ["b"]),
                      node("Or", ["a", "b"], ["c"]), node("Not", ["c"], ["o0"])]),
    ]:
        expected, = run_graph(nodes, [x], [np.bool_])
        assert_close(run_kernel(name, x), expected)
    assert run_kernel("isnan", np.zeros((0, 2), dtype)).shape == (0, 2)


def test_erf_float64_is_within_two_ulps_of_math_erf():
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-7, 7, 20001), rng.standard_normal(20000) * 2,
                        [0.0, -0.0, 1e-300, -1e-20, 0.84375, 1.25, 1 / 0.35, 6.0, np.inf, -np.inf]])
    got = run_kernel("erf", x)
    ref = np.array([math.erf(v) for v in x])
    np.testing.assert_array_less(np.abs(got - ref), 2 * np.spacing(np.abs(ref)) + 1e-320)
    assert np.isnan(run_kernel("erf", np.array([np.nan]))[0])
    assert math.copysign(1, run_kernel("erf", np.array([-0.0]))[0]) == -1


# float32 takes a float32 path within 1.5 ulp: test_kernels_fastpaths.py
def test_erf_float16_is_the_float32_result_rounded_once():
    """The float16 contract: computed in float32, rounded once. Over every float16 that is the
    correctly rounded erf but at two near-ties (+-0.001482), one ulp off there."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    got = run_kernel("erf", x)
    np.testing.assert_array_equal(got, run_kernel("erf", x.astype(np.float32)).astype(np.float16))
    ref = np.array([math.erf(float(v)) if not math.isnan(v) else math.nan for v in x]).astype(np.float16)
    differ = (got != ref) & ~(np.isnan(got) & np.isnan(ref))
    assert differ.sum() <= 2
    assert np.all(np.abs(got[differ].astype(np.float64) - ref[differ]) <= np.spacing(np.abs(ref[differ])))
    expected, = run_onnx("Erf", [x[:1000]])        # the evaluator agrees (it rounds through float32)
    assert_close(got[:1000], expected)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name, op, attrs, onnx_attrs", [
    ("nn.leakyrelu", "LeakyRelu", {"alpha": 0.2}, {"alpha": 0.2}),
    ("nn.leakyrelu", "LeakyRelu", {}, {"alpha": 0.01}),
    ("nn.elu", "Elu", {"alpha": 0.7}, {"alpha": 0.7}),
    ("nn.selu", "Selu", {}, {}),
    ("nn.selu", "Selu", {"alpha": 1.5, "gamma": 0.5}, {"alpha": 1.5, "gamma": 0.5}),
    ("nn.hard_sigmoid", "HardSigmoid", {}, {}),
    ("nn.hard_sigmoid", "HardSigmoid", {"alpha": 0.3, "beta": 0.4}, {"alpha": 0.3, "beta": 0.4}),
    ("nn.gelu", "Gelu", {}, {}),
    ("nn.gelu", "Gelu", {"approximate": "tanh"}, {"approximate": "tanh"}),
])
def test_activation_with_attributes(name, op, attrs, onnx_attrs, dtype, shape):
    rng = np.random.default_rng(7)
    x = (rand(rng, shape, "float64") * 4).astype(dtype)
    expected, = run_onnx(op, [x], onnx_attrs)
    assert_close(run_kernel(name, x, **attrs), expected, **float64_attr_tolerance(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, attrs", [("nn.hard_swish", {}), ("nn.hard_sigmoid", {"alpha": 0.25, "beta": 0.5})])
def test_hard_activations_in_place_equal_out_of_place(name, attrs, dtype):
    """A fused conv calls its activation with ``x`` as ``out``: the same values as into a new
    array, NaN and the infinities included (ONNX's formulas at the saturation edges +-3)."""
    x = np.concatenate([np.linspace(-4, 4, 101), [-3, 3, -2.5, 2.5, np.nan, np.inf, -np.inf, 0]]).astype(dtype)
    expected, = run_onnx("HardSwish" if name == "nn.hard_swish" else "HardSigmoid", [x], attrs)
    fresh = run_kernel(name, x, **attrs)
    inplace = x.copy()
    (hard_swish if name == "nn.hard_swish" else hard_sigmoid)(inplace, out=inplace, **attrs)
    np.testing.assert_array_equal(inplace, fresh)
    assert_close(fresh, expected, **float64_attr_tolerance(dtype, name == "nn.hard_swish"))


def test_activations_do_not_overflow():
    x = np.array([-1e4, -100.0, -30.0, 0.0, 30.0, 100.0, 1e4], np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        for name, op in [("sigmoid", "Sigmoid"), ("nn.softplus", "Softplus"), ("nn.elu", "Elu"),
                         ("nn.mish", "Mish"), ("nn.selu", "Selu")]:
            got = run_kernel(name, x)
            with np.errstate(all="ignore"):
                expected, = run_onnx(op, [x])
            assert_close(got, expected)
            assert np.isfinite(got).all()


# ---------------------------------------------------------------- binary

BROADCASTS = [((3, 5, 7), (5, 1)), ((1, 4), (3, 1)), ((0, 3), (1, 3)), ((), (2, 3))]

# kernel -> (ONNX op, dtypes, output dtype or None)
BINARY = {
    "add": ("Add", FLOATS + INTS, None), "subtract": ("Sub", FLOATS + INTS, None),
    "multiply": ("Mul", FLOATS + INTS, None), "maximum": ("Max", FLOATS + INTS, None),
    "minimum": ("Min", FLOATS + INTS, None),
    "equal": ("Equal", FLOATS + INTS + ["bool"], np.bool_),
    "less": ("Less", FLOATS + INTS, np.bool_), "less_equal": ("LessOrEqual", FLOATS + INTS, np.bool_),
    "greater": ("Greater", FLOATS + INTS, np.bool_),
    "greater_equal": ("GreaterOrEqual", FLOATS + INTS, np.bool_),
    "logical_and": ("And", ["bool"], None), "logical_or": ("Or", ["bool"], None),
    "logical_xor": ("Xor", ["bool"], None),
    "bitwise_and": ("BitwiseAnd", INTS, None), "bitwise_or": ("BitwiseOr", INTS, None),
    "bitwise_xor": ("BitwiseXor", INTS, None),
}


@pytest.mark.parametrize("shapes", BROADCASTS)
@pytest.mark.parametrize("name, dtype", [(n, d) for n, (_, ds, _) in BINARY.items() for d in ds])
def test_binary(name, dtype, shapes):
    op, _, out_dtype = BINARY[name]
    rng = np.random.default_rng(3)
    a, b = rand(rng, shapes[0], dtype), rand(rng, shapes[1], dtype)
    expected, = run_onnx(op, [a, b], out_dtypes=[out_dtype or a.dtype])
    assert_close(run_kernel(name, a, b), expected)


def test_not_equal():
    rng = np.random.default_rng(4)
    a, b = rand(rng, (4, 5), "int32", 0, 3), rand(rng, (5,), "int32", 0, 3)
    expected, = run_graph([node("Equal", ["i0", "i1"], ["e"]), node("Not", ["e"], ["o0"])],
                          [a, b], [np.bool_])
    assert_close(run_kernel("not_equal", a, b), expected)


@pytest.mark.parametrize("shapes", BROADCASTS)
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_divide(dtype, shapes):
    rng = np.random.default_rng(5)
    a = rand(rng, shapes[0], dtype) * (1 if np.dtype(dtype).kind in "iu" else 10)
    b = rand(rng, shapes[1], dtype)
    b = np.where(b == 0, 3, b).astype(dtype)          # ONNX leaves integer x / 0 undefined
    expected, = run_onnx("Div", [a, b])               # integers truncate toward zero
    assert_close(run_kernel("divide", a, b), expected)


def test_integer_divide_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 0, -128, 127], np.int8)
    b = np.array([2, 2, -2, -2, 5, 3, -4], np.int8)
    np.testing.assert_array_equal(run_kernel("divide", a, b), [3, -3, -3, 3, 0, -42, -31])


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_floor_divide(dtype):
    rng = np.random.default_rng(6)
    a, b = rand(rng, (3, 5, 7), dtype), rand(rng, (5, 1), dtype)
    b = np.where(b == 0, 3, b).astype(dtype)
    if np.dtype(dtype).kind == "f":
        expected, = run_graph([node("Div", ["i0", "i1"], ["d"]), node("Floor", ["d"], ["o0"])],
                              [a, b], [a.dtype])
        assert_close(run_kernel("floor_divide", a, b), expected, rtol=2e-3 if dtype == "float16" else 1e-6,
                     atol=1)  # exact quotients near an integer may floor either way after rounding
        return
    python = np.frompyfunc(lambda p, q: int(p) // int(q), 2, 1)   # Python's floor division
    assert_close(run_kernel("floor_divide", a, b), python(a, b).astype(dtype))


@pytest.mark.parametrize("fmod", [False, True])
@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_mod(dtype, fmod):
    rng = np.random.default_rng(8)
    a = rand(rng, (3, 5, 7), dtype) * (1 if np.dtype(dtype).kind in "iu" else 10)
    b = rand(rng, (5, 1), dtype)
    b = np.where(b == 0, 3, b).astype(dtype)
    got = run_kernel("mod", a, b, fmod=fmod)
    if np.dtype(dtype).kind == "f" and not fmod:
        # ONNX Mod requires fmod=1 for floats; the op documents Python's % sign rule
        python = np.frompyfunc(lambda p, q: float(p) % float(q), 2, 1)
        assert_close(got, python(a.astype(float), b.astype(float)).astype(dtype), atol=1e-2)
        return
    expected, = run_onnx("Mod", [a, b], {"fmod": int(fmod)})
    assert_close(got, expected)


@pytest.mark.parametrize("shapes", BROADCASTS[:3])
@pytest.mark.parametrize("dtype", FLOATS + ["int32", "int64", "uint8"])
def test_power(dtype, shapes):
    rng = np.random.default_rng(9)
    if np.dtype(dtype).kind == "f":
        a, b = rand(rng, shapes[0], dtype, 0.1, 3), rand(rng, shapes[1], dtype, -2, 2)
    else:
        a, b = rand(rng, shapes[0], dtype, 0, 6), rand(rng, shapes[1], dtype, 0, 4)
    expected, = run_onnx("Pow", [a, b])
    assert_close(run_kernel("power", a, b), expected)


def test_integer_power_with_negative_exponents_truncates():
    a = np.array([2, -2, 1, -1, -1, 0, 3, 5], np.int32)
    b = np.array([-1, -3, -4, -3, -2, 2, 0, 2], np.int32)
    np.testing.assert_array_equal(run_kernel("power", a, b), [0, 0, 1, -1, 1, 0, 1, 25])


# ---------------------------------------------------------------- clip, where, prelu


@pytest.mark.parametrize("bounds", [(-0.5, 0.75), (None, 0.25), (-1.0, None), (None, None), (1.0, -1.0)])
@pytest.mark.parametrize("dtype", FLOATS + SIGNED + ["uint8"])
def test_clip(dtype, bounds):
    rng = np.random.default_rng(10)
    x = rand(rng, (3, 5, 7), dtype)
    lo, hi = bounds
    if np.dtype(dtype).kind in "iu":
        shift = 4 if dtype == "uint8" else 0           # keep the bounds representable
        lo, hi = (None if lo is None else lo * 4 + shift), (None if hi is None else hi * 4 + shift)
    as_input = lambda v: None if v is None else np.array(v, dtype)         # noqa: E731
    expected, = run_onnx("Clip", [x, as_input(lo), as_input(hi)])
    assert_close(run_kernel("clip", x, min=lo, max=hi), expected)


def test_clip_integers_with_fractional_and_wide_bounds():
    x = np.arange(-6, 7, dtype=np.int8)
    np.testing.assert_array_equal(run_kernel("clip", x, min=-2.5, max=3.7), np.clip(x, -2, 3))
    np.testing.assert_array_equal(run_kernel("clip", x, min=-1e9, max=1e9), x)
    np.testing.assert_array_equal(run_kernel("clip", x, min=float("-inf"), max=2.0), np.minimum(x, 2))
    np.testing.assert_array_equal(run_kernel("clip", np.arange(5, dtype=np.uint8), min=-3.0), np.arange(5))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bounds", [(-1.0, 2.0), (None, 2.0), (-1.0, None), (None, None)])
def test_clip_saturate_nan_is_fmax_fmin(dtype, bounds):
    """saturate_nan: NaN becomes min (max when min is None), as np.fmin(np.fmax(x, min), max);
    without it NaN stays NaN (ONNX Clip). Inputs without NaN, and empty ones, are unchanged."""
    lo, hi = bounds
    x = np.array([np.nan, -np.inf, np.inf, -3.0, 0.5, 3.0, -np.nan], dtype)
    want = x
    if lo is not None:
        want = np.fmax(want, np.array(lo, dtype))
    if hi is not None:
        want = np.fmin(want, np.array(hi, dtype))
    np.testing.assert_array_equal(run_kernel("clip", x, min=lo, max=hi, saturate_nan=True), want)
    assert np.isnan(run_kernel("clip", x, min=lo, max=hi)[[0, 6]]).all()
    clean = x[1:6]
    np.testing.assert_array_equal(run_kernel("clip", clean, min=lo, max=hi, saturate_nan=True),
                                  run_kernel("clip", clean, min=lo, max=hi))
    assert run_kernel("clip", x[:0], min=lo, max=hi, saturate_nan=True).shape == (0,)


@pytest.mark.parametrize("shapes", [((3, 5, 7), (5, 7), (3, 1, 1)), ((2, 1), (1, 4), ()), ((0, 3), (1, 3), (3,))])
@pytest.mark.parametrize("dtype", ["float16", "float32", "int64", "bool"])
def test_where(dtype, shapes):
    rng = np.random.default_rng(11)
    cond = rand(rng, shapes[0], "bool")
    x, y = rand(rng, shapes[1], dtype), rand(rng, shapes[2], dtype)
    expected, = run_onnx("Where", [cond, x, y], out_dtypes=[x.dtype])
    assert_close(run_kernel("where", cond, x, y), expected)


@pytest.mark.parametrize("shapes", [((2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (1,)), ((4, 7), (7,)), ((0, 3), (3,))])
@pytest.mark.parametrize("dtype", FLOATS)
def test_prelu(dtype, shapes):
    rng = np.random.default_rng(12)
    x, slope = rand(rng, shapes[0], dtype), rand(rng, shapes[1], dtype)
    expected, = run_onnx("PRelu", [x, slope])
    assert_close(run_kernel("nn.prelu", x, slope), expected)
