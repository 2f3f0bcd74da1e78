"""FuseDynamicQuantize (passes/fuse_dynamic_quantize.py): DynamicQuantizeLinear's scalars and the
quantizer chain an integer product reads (its zero point taken off) become one dynamic_quantize,
whose items replace the scalars and the chain's end; lookalikes (a step read twice, other bounds,
another operand, NaN kept) stay. Each is run before and after: the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes import Sequential
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.fuse_dynamic_quantize import fuse_dynamic_quantize
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, ops_of, program, run_pass

PASS = Sequential([fuse_dynamic_quantize, dead_code_elimination], name="FuseDynamicQuantize+DCE")
PARAMS = 'x: R.Tensor(("n", 3), "float32")'
RETURN = 'R.Tuple(R.Tensor(("n", 3), "float32"), R.Tensor((), "float32"), R.Tensor((), "uint8"))'


def _chain(clip="min=0.0, max=255.0, saturate_nan=True", divided="x", tail="") -> str:
    return program(PARAMS, RETURN, f"""
lv = R.dynamic_quantize_params(x)
s = lv[0]
z = lv[1]
zp = R.astype(z, dtype="uint8")
lv1 = R.divide({divided}, s)
lv2 = R.round(lv1)
lv3 = R.add(lv2, z)
lv4 = R.clip(lv3, {clip})
lv5 = R.astype(zp, dtype="float32")
lv6 = R.subtract(lv4, lv5)
{tail}
lv7 = R.multiply(s, R.const(0.5, "float32"))
return (lv6, lv7, zp)
""").replace('-> R.Tensor(R.Tuple', '-> R.Tuple').replace('), "float32"):', '):', 1)


def _run(mod, x):
    result = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    return [np.asarray(v) for v in result.values()]


def _assert_same_bits(before, after):
    rng = np.random.default_rng(5)
    for x in (rng.normal(0, 3, (7, 3)).astype(np.float32), np.zeros((2, 3), np.float32), np.zeros((0, 3), np.float32),
              np.array([[np.nan, 1.0, -2.0], [0.5, -0.0, 3.5]], np.float32),
              np.array([[np.inf, 1.0, -2.0]], np.float32), np.array([[-0.5, 0.5, 254.5]], np.float32)):
        for want, got in zip(_run(before, x), _run(after, x), strict=True):
            assert want.dtype == got.dtype and want.shape == got.shape
            assert got.tobytes() == want.tobytes()


def test_the_chain_becomes_one_call():
    """The chain and the scale's product by a constant (a weight's scale) are items of one call."""
    before = _chain()
    expected = program(PARAMS, RETURN, """
lv = R.dynamic_quantize(x, scales=(0.5,))
z = lv[1]
zp = R.astype(z, dtype="uint8")
lv6 = lv[2]
lv7 = lv[3]
return (lv6, lv7, zp)
""").replace('-> R.Tensor(R.Tuple', '-> R.Tuple').replace('), "float32"):', '):', 1)
    mod, out = assert_rewrites(PASS, before, expected)
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, kwargs", [
    ("NaN kept", dict(clip="min=0.0, max=255.0, saturate_nan=False")),
    ("int8 bounds", dict(clip="min=-128.0, max=127.0, saturate_nan=True")),
    ("another operand divided", dict(divided="lv0", tail="")),
    ("the rounded value read twice", dict(tail="lv8 = R.add(lv2, lv2)")),
])
def test_lookalikes_stay(case, kwargs):
    text = _chain(**kwargs)
    if kwargs.get("divided") == "lv0":
        text = text.replace("lv = R.dynamic_quantize_params(x)",
                            'lv0 = R.multiply(x, R.const(2.0, "float32"))\n        lv = R.dynamic_quantize_params(x)')
    mod = parse(text)
    out = run_pass(PASS, mod)
    assert "dynamic_quantize" not in ops_of(out), case
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, product", [
    ("the zero point's product", 'R.multiply(z, R.const(0.5, "float32"))'),
    ("a product by a vector", 'R.multiply(s, R.const([0.5, 0.25, 2.0], "float32"))'),
    ("a product by a run-time value", "R.multiply(s, x)"),
])
def test_other_products_stay_multiplies(case, product):
    """Only the scale's products by float32 scalars become items."""
    text = _chain(tail=f"lv8 = {product}").replace("return (lv6, lv7, zp)", "return (lv6, lv7, zp, lv8)")
    shape = '("n", 3)' if "x)" in product else "(3,)" if "[" in product else "()"
    text = text.replace('R.Tensor((), "uint8")):', f'R.Tensor((), "uint8"), R.Tensor({shape}, "float32")):')
    mod = parse(text)
    out = run_pass(PASS, mod)
    assert "dynamic_quantize" in ops_of(out) and ops_of(out).count("multiply") == 1, case
    _assert_same_bits(mod, out)


def _product(tail: str) -> str:
    """The chain read by an exact integer product ``g`` (MatMulInteger's float32 ``nn.gemm``), then
    ``tail``, which returns."""
    return program('x: R.Tensor(("n", 3), "float32")', '("n", 2)', f"""
lv = R.dynamic_quantize_params(x)
s = lv[0]
z = lv[1]
zp = R.astype(z, dtype="uint8")
lv1 = R.divide(x, s)
lv2 = R.round(lv1)
lv3 = R.add(lv2, z)
lv4 = R.clip(lv3, min=0.0, max=255.0, saturate_nan=True)
lv5 = R.astype(zp, dtype="float32")
lv6 = R.subtract(lv4, lv5)
g = R.nn.gemm(lv6, R.const([[1.0, -2.0], [0.0, 3.0], [-1.0, 1.0]], "float32"))
{tail}
""", dtype="int32" if "int32" in tail else "float32")


@pytest.mark.parametrize("tail, free", [
    ('r = R.astype(g, dtype="int32")\nreturn r', True),                 # MatMulInteger's int32 result
    ('r = R.add(g, R.const(0.0, "float32"))\nreturn r', True),          # the round trip kept as + 0.0
    ('r = R.multiply(g, R.const(0.5, "float32"))\nreturn r', False),    # a zero's sign reaches the output
    ('r = R.divide(R.const(1.0, "float32"), g)\nreturn r', False),      # a divisor: 1 / -0.0 is -inf
])
def test_any_zero_sign_where_nothing_reads_it(tail, free):
    """``any_zero_sign`` is set where the product's zeros reach no sign reader (a cast to int32, a sum
    with +0.0) and not where they reach an output or a divisor; the results are the same bits."""
    mod = parse(_product(tail))
    out = run_pass(PASS, mod)
    calls = [c for c in _calls(out) if c.op.name == "dynamic_quantize"]
    assert len(calls) == 1 and calls[0].attrs["any_zero_sign"] is free
    _assert_same_bits(mod, out)
    x = np.array([[-0.3, 0.0, 2.0], [-0.01, 0.001, 1.0]], np.float32)     # round(-0.3 / s) is -0.0
    for want, got in zip(_run(mod, x), _run(out, x), strict=True):
        assert got.tobytes() == want.tobytes()


def _calls(mod):
    from relaxpack.ir.expr import Call
    return [b.value for block in mod["main"].body.blocks for b in block.bindings if isinstance(b.value, Call)]
