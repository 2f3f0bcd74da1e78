"""MergeQuantizedProducts (passes/merge_quantized_products.py): a dynamic quantizer's sibling integer
products, each scaled by its item of the quantizer, become one batched product scaled once, its parts
``take`` views (before/after texts, the same bits at several row counts and special inputs); lookalikes
(a fractional or too large weight, a product read twice, a bias, another input, a factor that is not a
float32 value, one member) stay."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes.merge_quantized_products import EXACT_LIMIT, QUANTIZED_MAX, merge_quantized_products
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, assert_unchanged, program, with_dce

RNG = np.random.default_rng(3)
K, N = 6, 4
WQ, WK, WV = (RNG.integers(-127, 128, (K, N)).astype(np.float32) for _ in range(3))
# (float32 values: the items hold y_scale times each)
CQ, CK, CV = 0.0004735149850603193, 0.0005588638014160097, 0.5

PARAMS = f'x: R.Tensor(("n", {K}), "float32")'
RET = f'R.Tuple(R.Tensor(("n", {N}), "float32"), R.Tensor(("n", {N}), "float32"), R.Tensor(("n", {N}), "float32"))'


def c(values) -> str:
    return f'R.const({np.asarray(values, np.float32).tolist()}, "float32")'


def _program(body: str) -> str:
    text = program(PARAMS, RET, body)
    return text.replace(f'-> R.Tensor({RET}, "float32"):', f"-> {RET}:")


def _before(wq=WQ, wk=WK, wv=WV, scales=(CQ, CK, CV), extra: str = "", ret: str = "(q, k, v)") -> str:
    return _program(f"""
dq = R.dynamic_quantize(x, any_zero_sign=True, scales={tuple(scales)!r})
y = dq[2]
sq = dq[3]
sk = dq[4]
sv = dq[5]
gq = R.nn.gemm(y, {c(wq)}, activation=None)
gk = R.nn.gemm(y, {c(wk)}, activation=None)
gv = R.nn.gemm(y, {c(wv)}, activation=None)
q = R.multiply(gq, sq)
k = R.multiply(gk, sk)
v = R.multiply(gv, sv)
{extra}
return {ret}
""")


def _after() -> str:
    stacked = np.stack([WQ, WK, WV])
    factors = np.array([CQ, CK, CV], np.float32).reshape(3, 1, 1)
    return _program(f"""
dq = R.dynamic_quantize(x, any_zero_sign=True, scales=())
y = dq[2]
products = R.matmul(y, {c(stacked)}, out_dtype=None)
y_scale = dq[0]
scales = R.multiply(y_scale, {c(factors)})
products1 = R.multiply(products, scales)
q = R.take(products1, R.const(0, "int64"), axis=0)
k = R.take(products1, R.const(1, "int64"), axis=0)
v = R.take(products1, R.const(2, "int64"), axis=0)
return (q, k, v)
""")


def _run(mod, x):
    result = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    return [np.asarray(v) for v in result.values()]


INPUTS = [RNG.normal(0, 3, (7, K)).astype(np.float32), RNG.normal(0, 3, (1, K)).astype(np.float32),
          np.zeros((3, K), np.float32), np.zeros((0, K), np.float32),
          np.array([[np.nan, 1.0, -2.0, 0.5, -0.0, 3.5]], np.float32),
          np.array([[np.inf, 1.0, -2.0, 0.0, 1e-40, -1e30]], np.float32)]


def test_sibling_products_of_one_quantizer_merge():
    """The three products and scalings become one of each; the scale items, read by nothing else
    now, go from the quantizer (``scales=()``)."""
    mod, out = assert_rewrites(with_dce(merge_quantized_products), _before(), _after())
    for x in INPUTS:
        for want, got in zip(_run(mod, x), _run(out, x), strict=True):
            assert want.dtype == got.dtype and want.shape == got.shape
            assert got.tobytes() == want.tobytes()


def test_two_members_merge_and_the_third_product_stays():
    """A product whose weight is not of integers joins no group; the other two still merge."""
    fractional = WV + np.float32(0.5)
    out = with_dce(merge_quantized_products)(parse(_before(wv=fractional)))
    text = out.script(show_meta=False)
    assert text.count("R.nn.gemm") == 1 and text.count("R.matmul") == 1
    assert f"scales={(CQ, CK, CV)!r}" in text              # the third product still reads its item
    for x in INPUTS[:3]:
        for want, got in zip(_run(parse(_before(wv=fractional)), x), _run(out, x), strict=True):
            assert got.tobytes() == want.tobytes()


def test_the_exactness_bound_is_inclusive():
    """A column of ``255 * sum |W|`` up to ``2^24`` joins (65793 * 255 = 2^24 - 1); one step past it
    (65794 * 255 = 2^24 + 254) does not, and the other two still merge."""
    for column_sum, gemms in ((EXACT_LIMIT // QUANTIZED_MAX, 0), (EXACT_LIMIT // QUANTIZED_MAX + 1, 1)):
        w = np.zeros((K, N), np.float32)
        w[0, :], w[1, 1] = column_sum, -column_sum
        w[1, 0] = 0
        w[0, 1] = 0
        out = with_dce(merge_quantized_products)(parse(_before(wq=w)))
        text = out.script(show_meta=False)
        assert text.count("R.matmul") == 1 and text.count("R.nn.gemm") == gemms
        for x in INPUTS[:2]:
            for want, got in zip(_run(parse(_before(wq=w)), x), _run(out, x), strict=True):
                assert got.tobytes() == want.tobytes()


_PAST = np.full((K, N), 11000.0, np.float32)          # 255 * 6 * 11000 > 2^24

UNCHANGED = {
    # columns whose products may sum past 2^24: a batched product might round differently
    "past_the_bound": _before(wq=_PAST, wk=_PAST, wv=-_PAST),
    # weights of fractions: not integer products
    "fractional": _before(wq=WQ + 0.5, wk=WK + 0.25, wv=WV + 0.5),
    # factors that are not float32 values: the items are y_scale * c rounded from a double
    "double_factor": _before(scales=(0.1, 0.2, 0.3)),
    # two products read by something else too (the unscaled products would stay)
    "products_read_twice": _before(extra="k2 = R.add(gk, gq)\nv2 = R.add(v, k2)", ret="(q, k, v2)"),
}


@pytest.mark.parametrize("name", sorted(UNCHANGED))
def test_lookalikes_stay(name):
    assert_unchanged(merge_quantized_products, UNCHANGED[name])


def test_a_biased_product_or_another_input_stays():
    biased = _program(f"""
dq = R.dynamic_quantize(x, any_zero_sign=True, scales={(CQ, CK, CV)!r})
y = dq[2]
gq = R.nn.gemm(y, {c(WQ)}, {c(np.ones(N))}, activation=None)
gk = R.nn.gemm(y, {c(WK)}, {c(np.ones(N))}, activation=None)
q = R.multiply(gq, dq[3])
k = R.multiply(gk, dq[4])
return (q, k, q)
""")
    assert_unchanged(merge_quantized_products, biased)
    plain = _program(f"""
gq = R.nn.gemm(x, {c(WQ)}, activation=None)
gk = R.nn.gemm(x, {c(WK)}, activation=None)
q = R.multiply(gq, R.const(0.5, "float32"))
k = R.multiply(gk, R.const(0.5, "float32"))
return (q, k, q)
""")
    assert_unchanged(merge_quantized_products, plain)


def test_scale_items_read_elsewhere_stay():
    """A scale item also read by something else keeps the quantizer's scales (the items' indices
    with them); the products still merge."""
    text = _before(extra="v2 = R.add(v, sq)", ret="(q, k, v2)")
    out = with_dce(merge_quantized_products)(parse(text))
    printed = out.script(show_meta=False)
    assert printed.count("R.matmul") == 1 and f"scales={(CQ, CK, CV)!r}" in printed
    for x in INPUTS[:3]:
        for want, got in zip(_run(parse(text), x), _run(out, x), strict=True):
            assert got.tobytes() == want.tobytes()
