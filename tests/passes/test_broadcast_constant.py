"""SimplifyAlgebra's constant_not_broadcast: op(x, broadcast_to(c, s)) -> op(x, c) when x has the
result's shape (torch.onnx dynamo's zeros_like / full_like of symbolic shapes)."""

from __future__ import annotations

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce

X = 'x: R.Tensor(("n", 3), "int64")'


def test_the_broadcast_constant_stays_a_scalar_in_either_operand_order():
    """7 - x keeps its order; minimum(x, zeros_like(x)) takes the scalar."""
    before = program(X, '("n", 3)', """
full = R.broadcast_to(R.const(7, "int64"), R.shape([n, 3]))
d = R.subtract(full, x)
zeros = R.broadcast_to(R.const(0, "int64"), R.shape([n, 3]))
out = R.minimum(d, zeros)
return out
""", dtype="int64")
    expected = program(X, '("n", 3)', """
d = R.subtract(R.const(7, "int64"), x)
out = R.minimum(d, R.const(0, "int64"))
return out
""", dtype="int64")
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"n": 2}, {"n": 1}, {"n": 0}])


def test_adding_broadcast_zeros_is_nothing_and_comparisons_keep_their_type():
    params = 'x: R.Tensor(("n", 3), "float32")'
    before = program(params, '("n", 3)', """
zeros = R.broadcast_to(R.const(0.0, "float32"), R.shape([1, 3]))
out = R.add(x, zeros)
return out
""")
    expected = program(params, '("n", 3)', "out = x\nreturn out")
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"n": 2}])
    compare = program(params, '("n", 3)', """
half = R.broadcast_to(R.const(0.5, "float32"), R.shape([n, 3]))
out = R.less(half, x)
return out
""", dtype="bool")
    expected = program(params, '("n", 3)', """
out = R.less(R.const(0.5, "float32"), x)
return out
""", dtype="bool")
    mod, out = assert_rewrites(with_dce(simplify_algebra), compare, expected)
    assert_same_results(mod, out, [{"n": 4}])


def test_a_broadcast_that_shapes_the_result_stays():
    params = 'x: R.Tensor((3,), "float32"), y: R.Tensor(("n", 3), "float32")'
    grows = program(params, '("n", 3)', """
ones = R.broadcast_to(R.const(2.0, "float32"), R.shape([n, 3]))
out = R.multiply(x, ones)
return out
""")
    assert_unchanged(simplify_algebra, grows)
    assert dict(explain(parse(grows), "constant_not_broadcast")) == {"out": "x does not have the result's shape"}
