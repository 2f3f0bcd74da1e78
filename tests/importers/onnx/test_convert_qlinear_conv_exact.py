"""QLinearConv as an exact float32 conv (importers/onnx/converters/quantize.py): with a constant
weight whose sums bound the conv within float32's exact integers, the IR conv is float32 and
``exact`` (no Winograd, nothing folded into its weight), and the outputs are the integer
semantics' bit for bit (onnx's reference evaluator, and a Python-int conv with the requantization
formula at the bound), at -O0 and -O2: uint8 and int8, per-tensor and per-channel zero points,
bias, groups and depthwise, strides and padding, a Winograd geometry, odd sizes, an empty batch;
one past the bound the int32 conv runs, with the same results."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir.expr import Call
from relaxpack.ir.visitor import ExprVisitor
from relaxpack.runtime import VirtualMachine

from ...passes.helpers import products_of
from .test_convert_elementwise import inp, model, node, rand, reference_outputs


def _qconv(dtype, w, w_zp, bias, channels, x_zp=3, y_zp=-4, w_scale=None, y_scale=0.4, **attrs):
    inits = {"xs": np.float32(0.05), "xzp": np.array(x_zp, dtype), "w": w, "ws": w_scale if w_scale is not None
             else np.float32(0.02), "wzp": w_zp, "ys": np.float32(y_scale),
             "yzp": np.array(y_zp if dtype == "int8" else abs(y_zp) * 30, dtype)}
    names = ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"]
    if bias is not None:
        names.append("B")
        inits["B"] = bias
    return model(node("QLinearConv", names, **attrs), [inp("x", dtype, ["n", channels, "h", "w"])], opset=10,
                 initializers=inits)


def _convs(m):
    """(dtype, exact) of every conv in the imported module's IR."""
    found = []

    class Convs(ExprVisitor):
        def visit_call_(self, call: Call):
            if getattr(call.op, "name", None) == "nn.conv":
                found.append((call.struct_info.dtype, call.attrs["exact"]))
            super().visit_call_(call)

    Convs().visit_expr(relaxpack.from_onnx(m)["main"])
    return found


def _int_conv(x, w, bias, strides, pads, group):
    """The conv in int64 (exact: the sums are far below 2**63), ONNX pads (begins, then ends)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = (x.shape[2] - kh) // strides[0] + 1, (x.shape[3] - kw) // strides[1] + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    per = o // group
    for oc in range(o):
        g = oc // per
        for i in range(kh):
            for j in range(kw):
                patch = x[:, g * cg:(g + 1) * cg, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1]]
                out[:, oc] += np.einsum("nchw,c->nhw", patch, w[oc, :, i, j])
    return out if bias is None else out + bias.reshape(1, -1, 1, 1)


def _semantics(m, x):
    """QLinearConv's integer semantics: the exact int64 conv of the zero-point-shifted operands, plus
    the bias, requantized as relaxpack documents it (float32 ``(x_scale * w_scale) / y_scale``, the
    product rounded half to even, the zero point added, saturated)."""
    from onnx import numpy_helper
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    attrs = {a.name: list(a.ints) if a.ints else a.i for a in m.graph.node[0].attribute}
    w = init["w"].astype(np.int64) - init["wzp"].astype(np.int64).reshape(-1, 1, 1, 1)
    acc = _int_conv(x.astype(np.int64) - int(init["xzp"]), w, init.get("B"), attrs.get("strides", [1, 1]),
                    attrs.get("pads", [0, 0, 0, 0]), attrs.get("group", 1))
    multiplier = (np.float32(init["xs"]) * init["ws"].astype(np.float32)) / np.float32(init["ys"])
    scaled = acc.astype(np.float32) * multiplier.reshape(-1, 1, 1) if multiplier.ndim else \
        acc.astype(np.float32) * multiplier
    info = np.iinfo(init["yzp"].dtype)
    return np.clip(np.rint(scaled) + int(init["yzp"]), info.min, info.max).astype(init["yzp"].dtype)


def _check(m, feeds_list, reference=True):
    """Bit for bit the integer semantics at -O0 and -O2 (and onnx's reference evaluator where asked:
    with per-channel scales it computes the multiplier in another order, one step apart at ties)."""
    mod = relaxpack.from_onnx(m)
    vms = [VirtualMachine(relaxpack.build(mod, opt_level=level)) for level in (0, 2)]
    for feeds in feeds_list:
        want = _semantics(m, feeds["x"])
        if reference:
            np.testing.assert_array_equal(reference_outputs(m, feeds, "reference")[0], want)
        for vm in vms:
            got = vm.run(feeds)["y"]
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)


CASES = [  # (weight shape, group, attrs)
    ((4, 3, 3, 3), 1, {"pads": [1, 1, 1, 1]}),
    ((6, 2, 3, 2), 2, {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((5, 1, 3, 3), 5, {"pads": [1, 1, 1, 1]}),                       # depthwise
    ((3, 5, 1, 1), 1, {}),                                           # pointwise
    ((8, 16, 3, 3), 1, {"pads": [1, 1, 1, 1]}),                      # channels last at -O2: a Winograd geometry
    ((4, 3, 7, 7), 1, {"pads": [3, 3, 3, 3], "strides": [2, 2]}),    # a stem
]


@pytest.mark.parametrize("weight, group, attrs", CASES)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("per_channel, with_bias", [(False, False), (True, True), (False, True)])
def test_exact_float_conv_matches_the_reference(weight, group, attrs, dtype, per_channel, with_bias, rng):
    w_dtype = "int8" if per_channel else dtype
    w = rand(rng, weight, w_dtype, low=-128, high=255)
    w_zp = rand(rng, (weight[0],) if per_channel else (), w_dtype, low=-5, high=5)
    bias = rand(rng, (weight[0],), "int32", low=-3000, high=3000) if with_bias else None
    w_scale = np.linspace(0.01, 0.03, weight[0], dtype=np.float32) if per_channel else None
    m = _qconv(dtype, w, w_zp, bias, weight[1] * group, w_scale=w_scale, group=group, **attrs)
    assert _convs(m) == [("float32", True)]
    channels = weight[1] * group
    feeds = [{"x": rand(rng, (n, channels, h, wd), dtype, low=-128, high=255)}
             for n, h, wd in ((2, 9, 7), (1, 16, 12), (1, 7, 11))]
    _check(m, feeds, reference=not per_channel)
    empty = relaxpack.from_onnx(m)
    out = VirtualMachine(relaxpack.build(empty, opt_level=2)).run({"x": np.zeros((0, channels, 9, 7), dtype)})
    assert out["y"].shape[0] == 0


def _bound_model(bias_value: int):
    """A 1x1 conv of 519 channels: sum |w| = 518 * 127 + 7 = 65793, so 255 * 65793 + |bias| is 2**24
    with a bias of 1 and one past it with 2."""
    w = np.full((1, 519, 1, 1), 127, np.int8)
    w[0, -1] = 7
    # y_scale 70: the largest sum, 2**24, requantizes to 240 (no saturation hides a wrong sum)
    return _qconv("uint8", w, np.array(0, np.int8), np.array([bias_value], np.int32), 519, x_zp=0, y_zp=0,
                  y_scale=70.0), w


@pytest.mark.parametrize("bias_value, exact", [(1, True), (-1, True), (2, False)])
def test_the_bound_switches_to_the_int32_conv(bias_value, exact):
    m, _ = _bound_model(bias_value)
    assert _convs(m) == [("float32", True)] if exact else [("int32", False)]
    for x in (np.full((1, 519, 2, 3), 255, np.uint8), np.zeros((1, 519, 2, 3), np.uint8),
              np.random.default_rng(4).integers(0, 256, (2, 519, 3, 2)).astype(np.uint8)):
        assert _semantics(m, x).max() < 255
        _check(m, [{"x": x}])


def test_a_weight_computed_at_run_time_keeps_the_int32_conv(rng):
    w = rand(rng, (2, 3, 3, 3), "int8", low=-128, high=127)
    m = _qconv("uint8", w, np.array(0, np.int8), None, 3, pads=[1, 1, 1, 1])
    m.graph.initializer.remove(next(i for i in m.graph.initializer if i.name == "w"))
    m.graph.input.append(inp("w", "int8", [2, 3, 3, 3]))
    assert _convs(m) == [("int32", False)]


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# ---------------------------------------------------------------- QLinearMatMul


def _qmatmul(dtype, b, b_zp, b_scale, a_shape, y_scale=0.4):
    inits = {"as": np.float32(0.05), "azp": np.array(7 if dtype == "uint8" else -7, dtype), "b": b,
             "bs": b_scale, "bzp": b_zp, "ys": np.float32(y_scale), "yzp": np.array(3, dtype)}
    return model(node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"]),
                 [inp("a", dtype, a_shape)], opset=10, initializers=inits)


def _matmul_semantics(m, a):
    """The exact int64 product of the shifted operands, requantized in float32 as relaxpack does."""
    from onnx import numpy_helper
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    acc = (a.astype(np.int64) - int(init["azp"])) @ (init["b"].astype(np.int64) - init["bzp"].astype(np.int64))
    multiplier = (np.float32(init["as"]) * init["bs"].astype(np.float32)) / np.float32(init["ys"])
    info = np.iinfo(init["yzp"].dtype)
    return np.clip(np.rint(acc.astype(np.float32) * multiplier) + int(init["yzp"]), info.min,
                   info.max).astype(init["yzp"].dtype)


def _products(m):
    """The imported model's products (:func:`products_of` of its ``main``)."""
    return products_of(relaxpack.from_onnx(m)["main"])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("a_shape", [(5, 9), (2, 3, 9), (0, 9), (1, 9)])
def test_qlinear_matmul_exact_float(dtype, per_column, a_shape, rng):
    b_dtype = "int8" if per_column else dtype
    b = rand(rng, (9, 4), b_dtype, low=-128, high=255)
    b_zp = rand(rng, (4,) if per_column else (), b_dtype, low=-3, high=3)
    b_scale = np.linspace(0.01, 0.05, 4, dtype=np.float32) if per_column else np.float32(0.02)
    m = _qmatmul(dtype, b, b_zp, b_scale, list(a_shape))
    assert _products(m) == [("nn.gemm", "float32")]
    mod = relaxpack.from_onnx(m)
    vms = [VirtualMachine(relaxpack.build(mod, opt_level=level)) for level in (0, 2)]
    for seed in range(3):
        a = rand(np.random.default_rng(seed), a_shape, dtype, low=-128, high=255)
        want = _matmul_semantics(m, a)
        if not per_column:
            np.testing.assert_array_equal(reference_outputs(m, {"a": a}, "reference")[0], want)
        for vm in vms:
            got = vm.run({"a": a})["y"]
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("column_sum, product", [(65793, "nn.gemm"), (65794, "matmul")])
def test_qlinear_matmul_bound(column_sum, product):
    """255 * max_j sum_k |b[k, j]| at 2**24 - 255 (the largest multiple of 255 within 2**24) is float32,
    one step past it the int32 matmul; the same results."""
    b = np.full((519, 2), 127, np.int8)
    b[-1] = column_sum - 518 * 127
    m = _qmatmul("uint8", b, np.array(0, np.int8), np.float32(0.02), [3, 519], y_scale=70.0)
    assert _products(m) == [(product, "float32" if product == "nn.gemm" else "int32")]
    mod = relaxpack.from_onnx(m)
    for a in (np.full((3, 519), 255, np.uint8), np.full((3, 519), 7, np.uint8),
              np.random.default_rng(1).integers(0, 256, (3, 519)).astype(np.uint8)):
        want = _matmul_semantics(m, a)
        assert want.max() < 255
        for level in (0, 2):
            np.testing.assert_array_equal(VirtualMachine(relaxpack.build(mod, opt_level=level)).run({"a": a})["y"],
                                          want)


# ---------------------------------------------------------------- MatMulInteger


CASES_MMI = [  # (b zero point, the largest column sum of |b - zp| or None for a small random b)
    (None, None), (np.array(3, np.int8), None), (np.array([1, -2, 0, 5], np.int8), None),
    (None, 65793), (None, 65794),
]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("b_zp, column_sum", CASES_MMI)
def test_matmul_integer_exact_float(dtype, b_zp, column_sum, rng):
    """A run-time a_zero_point (DynamicQuantizeLinear's), a constant B: int32 results of the float32
    product, equal to the int64 product, at the bound (255 * 65793 <= 2**24) and one step past it."""
    k = 9 if column_sum is None else 519
    if column_sum is None:
        b = rand(rng, (k, 4), "int8", low=-128, high=127)
    else:
        b = np.full((k, 4), 127, np.int8)
        b[-1] = column_sum - (k - 1) * 127
    names = ["a", "b", "azp"] + (["bzp"] if b_zp is not None else [])
    inits = {"b": b} | ({"bzp": b_zp} if b_zp is not None else {})
    m = model(node("MatMulInteger", names), [inp("a", dtype, ["n", k]), inp("azp", dtype, [])], opset=10,
              initializers=inits)
    exact = column_sum is None or column_sum == 65793
    assert _products(m) == [("nn.gemm", "float32") if exact else ("matmul", "int32")]
    shift = 0 if b_zp is None else b_zp.astype(np.int64)
    mod = relaxpack.from_onnx(m)
    for seed in range(3):
        r = np.random.default_rng(seed)
        a = rand(r, (4, k), dtype, low=-128, high=255)
        if seed == 0:
            a[:] = 255 if dtype == "uint8" else -128        # the largest |a - a_zero_point| below
        azp = np.array(0 if dtype == "uint8" else 127, dtype) if seed == 0 else \
            np.array(rand(r, (), dtype, low=-128, high=255), dtype)
        want = (a.astype(np.int64) - int(azp)) @ (b.astype(np.int64) - shift)
        np.testing.assert_array_equal(reference_outputs(m, {"a": a, "azp": azp}, "reference")[0], want)
        for level in (0, 2):
            got = VirtualMachine(relaxpack.build(mod, opt_level=level)).run({"a": a, "azp": azp})["y"]
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, want)
