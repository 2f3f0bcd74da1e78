"""SimplifyAlgebra's offset_range: range(0, n, 1) + shape_to_tensor(d) -> range(d, d + n, 1)."""

from __future__ import annotations

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce

PARAMS = 'past: R.Tensor(("p", 2), "float32"), new: R.Tensor(("s", 2), "float32")'


def test_positions_after_the_cache_are_one_range():
    before = program(PARAMS, '("s",)', """
r = R.range(R.prim_value(0), R.prim_value(s), R.prim_value(1), dtype="int64")
d = R.shape_to_tensor(R.shape([p]), scalar=True)
out = R.add(d, r)
return out
""", dtype="int64", dims=("p", "s"))
    expected = program(PARAMS, '("s",)', """
out = R.range(R.prim_value(p), R.prim_value(p + s), R.prim_value(1), dtype="int64")
return out
""", dtype="int64", dims=("p", "s"))
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"p": 0, "s": 3}, {"p": 5, "s": 1}, {"p": 2, "s": 0}])


def test_other_ranges_and_offsets_stay():
    stepped = program(PARAMS, '("s",)', """
r = R.range(R.prim_value(0), R.prim_value(2 * s), R.prim_value(2), dtype="int64")
d = R.shape_to_tensor(R.shape([p]), scalar=True)
out = R.add(r, d)
return out
""", dtype="int64", dims=("p", "s"))
    assert_unchanged(simplify_algebra, stepped)
    assert dict(explain(parse(stepped), "offset_range")) == {"out": "the range is not range(0, n, 1) of int64"}
    vector = program(PARAMS, '("s",)', """
r = R.range(R.prim_value(0), R.prim_value(s), R.prim_value(1), dtype="int64")
d = R.shape_to_tensor(R.shape([p]), scalar=False)
out = R.add(r, d)
return out
""", dtype="int64", dims=("p", "s"))
    assert dict(explain(parse(vector), "offset_range")) == {"out": "the other operand is not one dim as a scalar"}
