"""QLinearMatMul and MatMulInteger with B computed at run time (attention's ``q @ k^T``) as a float32
``matmul`` (importers/onnx/converters/quantize.py: ``_exact_float_product``): a zero point has its
operand's type, so both shifted operands are within 255 and, with a static ``K <= 258``, every
partial sum is within 2**24. Judged by the integer semantics (the int64 product, the float32
requantization as relaxpack computes it) and onnx's reference evaluator, bit for bit, at -O0 and
-O2: uint8 and int8, per-tensor and per-row / per-column zero points given at run time, batched
operands, an empty one, the largest ``|a - zp| * |b - zp|`` at ``K = 258``; ``K = 259`` and a
symbolic ``K`` keep the int32 matmul, with the same results."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.runtime import VirtualMachine

from .test_convert_elementwise import inp, model, node, rand, reference_outputs
from .test_convert_qlinear_conv_exact import _products


def _qmatmul(dtype, a_shape, b_shape, zp_shapes=((), ()), y_scale=0.4, scales=(0.05, 0.02)):
    """QLinearMatMul of two inputs with their zero points as inputs too."""
    inits = {"as": np.float32(scales[0]), "bs": np.float32(scales[1]), "ys": np.float32(y_scale),
             "yzp": np.array(3, dtype)}
    return model(node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"]),
                 [inp("a", dtype, a_shape), inp("azp", dtype, list(zp_shapes[0])), inp("b", dtype, b_shape),
                  inp("bzp", dtype, list(zp_shapes[1]))], opset=10, initializers=inits)


def _semantics(m, feeds):
    """The int64 product of the shifted operands, requantized in float32 as relaxpack does."""
    from onnx import numpy_helper
    init = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    azp = feeds["azp"].astype(np.int64)
    azp = azp[:, None] if azp.ndim == 1 else azp                      # one per row of a
    acc = (feeds["a"].astype(np.int64) - azp) @ (feeds["b"].astype(np.int64) - feeds["bzp"].astype(np.int64))
    multiplier = (np.float32(init["as"]) * np.float32(init["bs"])) / np.float32(init["ys"])
    info = np.iinfo(init["yzp"].dtype)
    return np.clip(np.rint(acc.astype(np.float32) * multiplier) + int(init["yzp"]), info.min,
                   info.max).astype(init["yzp"].dtype)


def _check(m, feeds_list, reference=True):
    mod = relaxpack.from_onnx(m)
    vms = [VirtualMachine(relaxpack.build(mod, opt_level=level)) for level in (0, 2)]
    for feeds in feeds_list:
        want = _semantics(m, feeds)
        if reference:
            np.testing.assert_array_equal(reference_outputs(m, feeds, "reference")[0], want)
        for vm in vms:
            got = vm.run(feeds)["y"]
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


def _feeds(rng, dtype, a_shape, b_shape, zp_shapes=((), ())):
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    return {"a": rand(rng, a_shape, dtype, low=lo, high=hi), "azp": rand(rng, zp_shapes[0], dtype, low=lo, high=hi),
            "b": rand(rng, b_shape, dtype, low=lo, high=hi), "bzp": rand(rng, zp_shapes[1], dtype, low=lo, high=hi)}


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("a_shape, b_shape", [((5, 16), (16, 7)), ((2, 3, 5, 16), (2, 3, 16, 5)),
                                              ((3, 1, 4, 9), (1, 2, 9, 4)), ((0, 16), (16, 3)), ((1, 1), (1, 1))])
def test_run_time_b_is_a_float32_matmul(dtype, a_shape, b_shape):
    m = _qmatmul(dtype, list(a_shape), list(b_shape))
    assert _products(m) == [("matmul", "float32")]
    rng = np.random.default_rng(0)
    _check(m, [_feeds(rng, dtype, a_shape, b_shape) for _ in range(3)])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_zero_points_per_row_and_per_column(dtype):
    """A 1-D a_zero_point is one per row of a, a 1-D b_zero_point one per column of b (the reference
    evaluator reads them otherwise: judged by the semantics alone)."""
    m = _qmatmul(dtype, [6, 16], [16, 5], zp_shapes=((6,), (5,)))
    assert _products(m) == [("matmul", "float32")]
    rng = np.random.default_rng(1)
    _check(m, [_feeds(rng, dtype, (6, 16), (16, 5), ((6,), (5,))) for _ in range(3)], reference=False)


@pytest.mark.parametrize("k, product", [(258, ("matmul", "float32")), (259, ("matmul", "int32"))])
def test_the_bound_on_k(k, product):
    """255 * 255 * 258 <= 2**24 < 255 * 255 * 259: the largest shifted operands of one sign, and
    random ones, give the integer results on both sides of the bound."""
    m = _qmatmul("uint8", [2, k], [k, 3], y_scale=70000.0, scales=(1.0, 1.0))
    assert _products(m) == [product]
    rng = np.random.default_rng(2)
    largest = {"a": np.full((2, k), 255, np.uint8), "azp": np.array(0, np.uint8),
               "b": np.full((k, 3), 255, np.uint8), "bzp": np.array(0, np.uint8)}
    mixed = _feeds(rng, "uint8", (2, k), (k, 3))
    mixed["a"][0] = 255
    mixed["azp"], mixed["b"][:, 0], mixed["bzp"] = np.array(0, np.uint8), 255, np.array(0, np.uint8)
    want = _semantics(m, largest)
    assert 0 < want.min() and want.max() < 255       # 255 * 255 * k / 70000 + 3: not saturated
    _check(m, [largest, mixed], reference=False)


def test_a_symbolic_k_keeps_the_int32_matmul():
    m = _qmatmul("uint8", ["n", "k"], ["k", 3])
    assert _products(m) == [("matmul", "int32")]
    rng = np.random.default_rng(3)
    _check(m, [_feeds(rng, "uint8", (2, 7), (7, 3))])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_matmul_integer_run_time_b(dtype):
    """MatMulInteger's int32 output is the float32 product cast back: the int64 product's values."""
    m = model(node("MatMulInteger", ["a", "b", "azp", "bzp"]),
              [inp("a", dtype, ["n", 9]), inp("b", dtype, [9, 4]), inp("azp", dtype, []), inp("bzp", dtype, [])],
              opset=10)
    assert _products(m) == [("matmul", "float32")]
    mod = relaxpack.from_onnx(m)
    rng = np.random.default_rng(4)
    for seed in range(3):
        feeds = _feeds(rng, dtype, (4, 9), (9, 4))
        want = (feeds["a"].astype(np.int64) - int(feeds["azp"])) @ (feeds["b"].astype(np.int64) - int(feeds["bzp"]))
        np.testing.assert_array_equal(reference_outputs(m, feeds, "reference")[0], want)
        for level in (0, 2):
            got = VirtualMachine(relaxpack.build(mod, opt_level=level)).run(feeds)["y"]
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, want)
