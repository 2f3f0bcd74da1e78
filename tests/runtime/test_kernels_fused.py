"""The fused kernels (nn.gemm, nn.conv_bias_act) against the unfused kernels
they stand for: the same kernels run in the same order, so results are equal."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import UnsupportedOpError
from relaxpack.ir import parse
from relaxpack.runtime import VirtualMachine, load
from relaxpack.runtime.kernels import get_kernel

from .test_kernels_registry import rand, run_kernel

ACTIVATIONS = [None, "relu", "sigmoid", "tanh", "silu", "gelu", "gelu_tanh", ("leakyrelu", 0.2),
               ("clip", -0.5, 0.75), ("clip", None, 0.0), "hard_swish", ("hard_sigmoid", 0.2, 0.5)]


def unfused_activation(activation) -> tuple[str, dict]:
    """The op (and its attributes) that an ``activation`` attribute stands for."""
    if isinstance(activation, tuple):
        name, *params = activation
        if name == "leakyrelu":
            return "nn.leakyrelu", {"alpha": params[0]}
        if name == "hard_sigmoid":
            return "nn.hard_sigmoid", {"alpha": params[0], "beta": params[1]}
        return "clip", {"min": params[0], "max": params[1]}
    if activation.startswith("gelu"):
        return "nn.gelu", {"approximate": "tanh" if activation == "gelu_tanh" else "none"}
    return {"relu": "nn.relu", "silu": "nn.silu", "hard_swish": "nn.hard_swish"}.get(activation, activation), {}


def unfused(product, bias, activation):
    """``product`` (an array) plus ``bias`` then the activation, by the unfused kernels."""
    out = product if bias is None else run_kernel("add", product, bias)
    if activation is not None:
        op, attrs = unfused_activation(activation)
        out = run_kernel(op, out, **attrs)
    return out


def assert_same(actual, expected):
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)


# (x shape, w shape, bias shape or None)
GEMM_CASES = [
    ((5, 7), (7, 3), (3,)),
    ((2, 5, 7), (7, 3), (5, 3)),
    ((3, 1, 4, 6), (2, 6, 5), (1, 5)),    # broadcast batch dims
    ((7,), (7, 3), (3,)),                 # 1-D lhs
    ((5, 7), (7,), None),                 # 1-D rhs
    ((0, 7), (7, 3), (3,)),               # empty batch
    ((4, 0), (0, 3), (3,)),               # empty inner dim: the bias alone
    ((1, 1), (1, 1), (1,)),
]


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("x, w, bias", GEMM_CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gemm_is_matmul_add_activation(dtype, x, w, bias, activation):
    rng = np.random.default_rng(0)
    a, b = rand(rng, x, dtype), rand(rng, w, dtype)
    args = (a, b) if bias is None else (a, b, rand(rng, bias, dtype))
    expected = unfused(run_kernel("matmul", a, b), args[2] if bias else None, activation)
    assert_same(run_kernel("nn.gemm", *args, activation=activation), expected)


@pytest.mark.parametrize("x, w, bias", GEMM_CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float16", "float32", "int32"])
def test_gemm_by_a_constant_weight_is_the_plain_kernel(dtype, x, w, bias):
    """Specialized for a bound weight (a float16 one keeps its float32 copy, an integer one is
    declared), nn.gemm gives the plain kernel's result, also for a second weight array."""
    rng = np.random.default_rng(3)
    fn = get_kernel("nn.gemm").fn
    call = fn.specialize_attrs({"activation": "relu"}, (False, True, bias is not None))
    a, c = rand(rng, x, dtype), None if bias is None else rand(rng, bias, dtype)
    for b in (rand(rng, w, dtype), rand(rng, w, dtype)):
        expected = run_kernel("nn.gemm", *((a, b) if c is None else (a, b, c)), activation="relu")
        for _ in range(2):
            out = np.empty(expected.shape, expected.dtype)
            call(a, b, c, out=out)
            assert_same(out, expected)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_gemm_bound_bias_as_a_tile_is_the_plain_kernel(dtype):
    """A bound bias is added as its tile of the product's shape: the plain kernel's bits at each
    output shape (a tile per shape, one past ``ROW_TILE_MAX_SIZE`` broadcast as before), for a bias of
    the output's own shape, a single value, and a second bias array."""
    from relaxpack.runtime.kernels.tiled_operand import ROW_TILE_MAX_SIZE
    rng = np.random.default_rng(4)
    fn = get_kernel("nn.gemm").fn
    call = fn.specialize_attrs({"activation": None}, (False, True, True))
    w = rand(rng, (7, 3), dtype)
    rows = ROW_TILE_MAX_SIZE // 3 + 1          # the first output past the tile bar
    for bias_shape in ((3,), (1, 3), (1,), (5, 3)):
        for bias in (rand(rng, bias_shape, dtype), rand(rng, bias_shape, dtype)):
            shapes = [(5, 7), (2, 5, 7), (rows, 7), (rows - 1, 7), (5, 7), (1, 7)] if bias_shape != (5, 3) else [(5, 7), (2, 5, 7)]
            for x_shape in shapes:
                a = rand(rng, x_shape, dtype)
                expected = run_kernel("nn.gemm", a, w, bias, activation=None)
                out = np.empty(expected.shape, expected.dtype)
                call(a, w, bias, out=out)
                assert_same(out, expected)


@pytest.mark.parametrize("dtype, activation", [(d, a) for d in ("float32", "float64", "float16") for a in ACTIVATIONS]
                         + [("int32", a) for a in (None, "relu", ("clip", -0.5, 0.75))], ids=str)
def test_specialized_gemm_activation_per_dtype_is_the_plain_kernel(dtype, activation):
    """The specialized gemm applies the conv epilogue's in-place activation kept per ``out`` dtype
    (a float ReLU the relu kernel's clip, SiLU/sigmoid/HardSwish their arithmetic): the plain
    kernel's bits for every activation and dtype, products holding NaN, +-inf and -0.0, one
    instruction called with two dtypes in turn, and an empty output."""
    rng = np.random.default_rng(6)
    call = get_kernel("nn.gemm").fn.specialize_attrs({"activation": activation}, (False, False, False))
    cases = []
    for kind in (dtype, "float32" if dtype != "float32" else "float64") if dtype != "int32" else (dtype, "int64"):
        w, bias = rand(rng, (4, 3), kind), rand(rng, (3,), kind)
        for rows in (5, 1, 0):
            a = rand(rng, (rows, 4), kind)
            if kind.startswith("float") and rows:
                a[0] = [np.nan, 0.0, 1.0, 0.0]
                a[-1] = [np.inf, -np.inf, 0.0, 0.0] if rows > 1 else a[-1]
                w[:, 2] = [0.0, 0.0, -0.0, 0.0]             # -0.0 * ... + -0.0 bias: a -0.0 product
                bias[2] = -0.0
            cases.append((a, w.copy(), bias.copy()))
    with np.errstate(all="ignore"):
        for a, w, bias in cases * 2:
            expected = run_kernel("nn.gemm", a, w, bias, activation=activation)
            out = np.empty(expected.shape, expected.dtype)
            call(a, w, bias, out=out)
            assert out.dtype == expected.dtype and out.tobytes() == expected.tobytes()


def test_integer_gemm_with_relu_and_clip():
    rng = np.random.default_rng(1)
    a, b, c = rand(rng, (6, 5), "int32"), rand(rng, (5, 4), "int32"), rand(rng, (4,), "int32")
    for activation in ("relu", ("clip", -3.5, 20.0)):
        expected = unfused(run_kernel("matmul", a, b), c, activation)
        assert_same(run_kernel("nn.gemm", a, b, c, activation=activation), expected)


# (data shape, weight shape, conv attrs)
CONV_CASES = [
    ((2, 3, 7, 5), (4, 3, 3, 2), dict(padding=1, strides=(2, 1))),
    ((1, 4, 9), (6, 2, 3), dict(groups=2, dilation=2)),
    ((2, 6, 5, 5), (6, 1, 3, 3), dict(groups=6, padding=1)),             # depthwise
    ((1, 2, 3, 4, 5), (3, 2, 1, 2, 2), {}),
    ((3, 8, 4, 4), (5, 8, 1, 1), {}),                                    # 1x1
    ((0, 3, 6, 6), (4, 3, 3, 3), {}),                                    # empty batch
]


@pytest.mark.parametrize("activation", ACTIVATIONS, ids=str)
@pytest.mark.parametrize("data, weight, attrs", CONV_CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv_bias_act_is_conv_add_activation(dtype, data, weight, attrs, activation):
    rng = np.random.default_rng(2)
    x, w, b = rand(rng, data, dtype), rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    conv = run_kernel("nn.conv", x, w, **attrs)
    bias = b.reshape((1, -1) + (1,) * (len(data) - 2))
    assert_same(run_kernel("nn.conv_bias_act", x, w, b, activation=activation, **attrs),
                unfused(conv, bias, activation))
    assert_same(run_kernel("nn.conv_bias_act", x, w, activation=activation, **attrs),
                unfused(conv, None, activation))


def test_activation_may_arrive_as_a_list_and_unknown_ones_fail():
    x, w = np.ones((2, 3), np.float32), -np.ones((3, 2), np.float32)
    out = np.empty((2, 2), np.float32)
    get_kernel("nn.gemm").fn(x, w, out=out, activation=["clip", -1.0, None])   # as JSON hands it back
    np.testing.assert_array_equal(out, -np.ones((2, 2)))
    with pytest.raises(UnsupportedOpError, match="unknown activation 'swish'"):
        get_kernel("nn.gemm").fn(x, w, out=out, activation="swish")


def test_fused_ops_survive_an_archive(tmp_path):
    mod = parse('''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 2, 6, 6), "float32"), v: R.Tensor((27, 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        lv = R.nn.conv_bias_act(x, R.const(np.ones((3, 2, 3, 3)), "float32"), R.const([1.0, -20.0, 0.5], "float32"), padding=1, activation=("leakyrelu", 0.1))
        lv1 = R.nn.max_pool(lv, pool_size=2, strides=2)
        lv2 = R.reshape(lv1, R.shape([n, 27]))
        lv3 = R.nn.gemm(lv2, v, R.const([0.0, 1.0, 2.0, 3.0], "float32"), activation=("clip", None, 2.5))
        return lv3
'''.replace("np.ones((3, 2, 3, 3))", str(np.ones((3, 2, 3, 3)).tolist())))
    exe = relaxpack.build(mod)
    assert exe.kernel_call_count() == 3        # conv, pool, gemm: the reshape is a view of the pool's result
    exe.save(tmp_path / "m.rpk")
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((3, 2, 6, 6)).astype(np.float32),
             "v": rng.standard_normal((27, 4)).astype(np.float32)}
    np.testing.assert_array_equal(VirtualMachine(load(tmp_path / "m.rpk")).run(feeds)["lv3"],
                                  VirtualMachine(exe).run(feeds)["lv3"])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("data, weight, attrs", CONV_CASES, ids=str)
def test_conv_bias_act_hard_swish6_is_six_hard_swishes(dtype, data, weight, attrs):
    """``"hard_swish6"`` (``passes/fold_activation_scales.py``) is ``y * clip(y + 3, 0, 6)`` of the
    conv plus bias ``y``: those three numpy calls on ``y`` bit for bit (float16 in float32, rounded
    once), and six times the HardSwish of ``y`` within two roundings of float64's."""
    rng = np.random.default_rng(5)
    x, w, b = rand(rng, data, dtype), rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    y = unfused(run_kernel("nn.conv", x, w, **attrs), b.reshape((1, -1) + (1,) * (len(data) - 2)), None)
    got = run_kernel("nn.conv_bias_act", x, w, b, activation="hard_swish6", **attrs)
    work = y.astype(np.float32) if dtype == "float16" else y
    want = (work * np.clip(work + work.dtype.type(3), 0, 6)).astype(dtype)
    assert_same(got, want)
    y64 = y.astype(np.float64)
    six = 6 * (y64 * np.clip(y64 / 6 + 0.5, 0, 1))
    work_eps, out_eps = np.finfo(work.dtype).eps, np.finfo(dtype).eps
    bound = 3 * work_eps * 6 * np.abs(y64) + out_eps / 2 * np.abs(six)     # (the gate is at most 6)
    assert np.all(np.abs(got.astype(np.float64) - six) <= bound)


def test_hard_swish6_at_its_edges():
    """At and beyond -3 and 3, NaN and the infinities: ``x * clip(x + 3, 0, 6)``."""
    from relaxpack.runtime.kernels.activation import hard_swish6_in_place, hard_swish6_in_place_fn
    x = np.array([-np.inf, -4.0, -3.0, -2.5, -0.0, 0.0, 1.0, 3.0, 3.5, np.inf, np.nan], np.float32)
    want = np.array([np.nan, -0.0, -0.0, -1.25, -0.0, 0.0, 4.0, 18.0, 21.0, np.inf, np.nan], np.float32)
    for fn in (hard_swish6_in_place, hard_swish6_in_place_fn(np.float32)):
        buf = x.copy()
        with np.errstate(invalid="ignore"):
            fn(buf)
        np.testing.assert_array_equal(buf, want)
        finite = ~np.isnan(want)
        assert np.array_equal(np.signbit(buf[finite]), np.signbit(want[finite]))       # -0.0 below -3
    scalar = np.array(2.0, np.float16)
    hard_swish6_in_place(scalar)
    assert scalar == 10.0
