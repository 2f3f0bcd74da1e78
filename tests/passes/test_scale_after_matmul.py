"""SimplifyAlgebra's scale_after_matmul: a scalar factor on a matmul's operand moves to the product."""

from __future__ import annotations

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce

QK = 'q: R.Tensor(("b", 2, "s", 16), "float32"), k: R.Tensor(("b", 2, 16, "t"), "float32")'
DIMS = ("b", "s", "t")
SIZES = [{"b": 1, "s": 1, "t": 3}, {"b": 2, "s": 5, "t": 5}, {"b": 1, "s": 0, "t": 2}]


def test_both_attention_scales_become_one_after_the_product():
    """(q * 0.5) @ (k * 0.5) -> (q @ k) * 0.25: powers of two, so bit for bit."""
    before = program(QK, '("b", 2, "s", "t")', """
qs = R.multiply(q, R.const(0.5, "float32"))
ks = R.multiply(R.const(0.5, "float32"), k)
out = R.matmul(qs, ks)
return out
""", dims=DIMS)
    expected = program(QK, '("b", 2, "s", "t")', """
lv = R.matmul(q, k, out_dtype=None)
out = R.multiply(lv, R.const(0.25, "float32"))
return out
""", dims=DIMS)
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, SIZES)


def test_one_scaled_operand_and_a_non_power_of_two():
    before = program(QK, '("b", 2, "s", "t")', """
ks = R.multiply(k, R.const(0.3535533905932738, "float32"))
out = R.matmul(q, ks)
return out
""", dims=DIMS)
    expected = program(QK, '("b", 2, "s", "t")', """
lv = R.matmul(q, k, out_dtype=None)
out = R.multiply(lv, R.const(0.3535533905932738, "float32"))
return out
""", dims=DIMS)
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, SIZES)      # within the tolerance of a reassociation


def test_factors_that_do_not_move():
    """A factor of several values, one that broadcasts the operand, a scaled operand used
    elsewhere, an integer product: unchanged, and why."""
    vector = program(QK + ', w: R.Tensor((16,), "float32")', '("b", 2, "s", "t")', """
qs = R.multiply(q, w)
out = R.matmul(qs, k)
return out
""", dims=DIMS)
    assert_unchanged(simplify_algebra, vector)
    assert dict(explain(parse(vector), "scale_after_matmul"))["out"] == \
        "neither operand is a scalar multiple used only here"
    broadcast = program('q: R.Tensor((3, 16), "float32"), k: R.Tensor((16, 4), "float32")', "(2, 3, 4)", """
qs = R.multiply(q, R.const([[[0.5]], [[0.5]]], "float32"))
out = R.matmul(qs, k)
return out
""", dims=())
    assert_unchanged(simplify_algebra, broadcast)
    shared = program(QK, '("b", 2, "s", "t")', """
qs = R.multiply(q, R.const(0.5, "float32"))
p = R.matmul(qs, k)
out = R.matmul(qs, k)
both = R.add(p, out)
return both
""", dims=DIMS)
    assert dict(explain(parse(shared), "scale_after_matmul"))["out"] == \
        "neither operand is a scalar multiple used only here"
    ints = program('q: R.Tensor((3, 4), "int32"), k: R.Tensor((4, 2), "int32")', "(3, 2)", """
qs = R.multiply(q, R.const(2, "int32"))
out = R.matmul(qs, k)
return out
""", dtype="int32", dims=())
    assert_unchanged(simplify_algebra, ints)


QK16 = QK.replace('"float32"', '"float16"')


def test_float16_powers_of_two_move_after_the_product():
    """GPT-2 float16's (q * 0.5) @ (k * 0.5): powers of two move (the same values but where q * 0.5
    was a float16 subnormal); a float16 factor that is no power of two stays (rounding q * c in
    float16 first is the model's value), and why."""
    before = program(QK16, '("b", 2, "s", "t")', """
qs = R.multiply(q, R.const(0.5, "float16"))
ks = R.multiply(R.const(0.5, "float16"), k)
out = R.matmul(qs, ks)
return out
""", "float16", dims=DIMS)
    expected = program(QK16, '("b", 2, "s", "t")', """
lv = R.matmul(q, k, out_dtype=None)
out = R.multiply(lv, R.const(0.25, "float16"))
return out
""", "float16", dims=DIMS)
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, SIZES)
    other = program(QK16, '("b", 2, "s", "t")', """
ks = R.multiply(k, R.const(0.3535, "float16"))
out = R.matmul(q, ks)
return out
""", "float16", dims=DIMS)
    assert_unchanged(simplify_algebra, other)
    assert dict(explain(parse(other), "scale_after_matmul"))["out"] == \
        "neither operand is a scalar multiple used only here (a power of two in float16)"
