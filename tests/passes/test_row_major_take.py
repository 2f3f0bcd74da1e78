"""SimplifyAlgebra's take_of_row_major_iotas: a take of rows ``b * S + s`` of ``B * S`` rows is a reshape."""

from __future__ import annotations

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce

PARAMS = 'mask: R.Tensor(("b", "s"), "int64")'


def _mask_take(factor: str = "R.shape_to_tensor(R.shape([s]), scalar=False)", rows: str = "b",
               inner_axes: str = "(0, 1, 2)", outer_axes: str = "(1, 2, 3)", sum_: str = "R.add(j1, ii)") -> str:
    """torch's export of transformers' padding mask: flatten(mask)[arange(b)[:, None, None, None] * s
    + arange(s)[None, None, None, :]]."""
    return f"""
flat = R.flatten(mask, axis=2)
i = R.range(R.prim_value(0), R.prim_value({rows}), R.prim_value(1), dtype="int64")
j = R.range(R.prim_value(0), R.prim_value(s), R.prim_value(1), dtype="int64")
i1 = R.expand_dims(i, axis={outer_axes})
j1 = R.expand_dims(j, axis={inner_axes})
f = {factor}
ii = R.multiply(i1, f)
idx = {sum_}
out = R.take(flat, idx, axis=0)
return out
"""


def test_the_padding_mask_take_is_a_reshape():
    before = program(PARAMS, '("b", 1, 1, "s", 1)', _mask_take(), dtype="int64", dims=("b", "s"))
    expected = program(PARAMS, '("b", 1, 1, "s", 1)', """
flat = R.flatten(mask, axis=2)
out = R.reshape(flat, R.shape([b, 1, 1, s, 1]))
return out
""", dtype="int64", dims=("b", "s"))
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"b": 1, "s": 5}, {"b": 3, "s": 1}, {"b": 2, "s": 7}, {"b": 0, "s": 3},
                                   {"b": 2, "s": 0}])


def test_a_constant_factor_and_the_product_on_either_side():
    """S a constant (static dims), the factor first in the multiply, the iotas' sum in either order."""
    params = 'mask: R.Tensor((3, 4), "int64")'
    body = _mask_take(factor='R.const([4], "int64")', rows="3", sum_="R.add(ii, j1)").replace(
        "R.prim_value(s)", "R.prim_value(4)").replace("R.multiply(i1, f)", "R.multiply(f, i1)")
    before = program(params, "(3, 1, 1, 4, 1)", body, dtype="int64", dims=())
    expected = program(params, "(3, 1, 1, 4, 1)", """
flat = R.flatten(mask, axis=2)
out = R.reshape(flat, R.shape([3, 1, 1, 4, 1]))
return out
""", dtype="int64", dims=())
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{}])


def test_takes_that_are_not_row_major_stay():
    """The iotas' axes swapped (a transpose), a factor that is not the column count, rows not b * s:
    the take stays, and why."""
    swapped = program(PARAMS, '("s", 1, 1, "b", 1)', _mask_take(inner_axes="(1, 2, 3)", outer_axes="(0, 1, 2)"),
                      dtype="int64", dims=("b", "s"))
    assert_unchanged(simplify_algebra, swapped)
    assert dict(explain(parse(swapped), "take_of_row_major_iotas")) == {
        "out": "the row iota does not vary along an earlier axis than the column iota"}
    wrong_factor = program(PARAMS, '("b", 1, 1, "s", 1)', _mask_take(
        factor="R.shape_to_tensor(R.shape([b]), scalar=False)"), dtype="int64", dims=("b", "s"))
    assert_unchanged(simplify_algebra, wrong_factor)
    assert dict(explain(parse(wrong_factor), "take_of_row_major_iotas")) == {
        "out": "the row iota's factor is not the column iota's length"}
    params = 'mask: R.Tensor(("b", "s"), "int64"), n: R.Tensor(("r",), "int64")'
    fewer_rows = program(params, '("r", 1, 1, "s", 1)', _mask_take(rows="r"), dtype="int64", dims=("b", "s", "r"))
    assert_unchanged(simplify_algebra, fewer_rows)
    assert dict(explain(parse(fewer_rows), "take_of_row_major_iotas")) == {
        "out": "the data's rows are not the two iotas' lengths multiplied"}
