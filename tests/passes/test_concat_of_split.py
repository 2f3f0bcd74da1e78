"""ConcatOfSplit: a concat of all of a split's pieces in order reads the split's input, and a
split read through one piece is a slice (before/after texts, the same results), and the
places it must not fire."""

from __future__ import annotations

import pytest

from relaxpack.passes.concat_of_split import concat_of_split_pass

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, ops_of, run_pass
from .test_convert_layout import program

X = 'x: R.Tensor(("n", 8, 5, 7), "float32")'
Y = 'x: R.Tensor(("n", 8, 5, 7), "float32"), y: R.Tensor(("n", 4, 5, 7), "float32")'

CASES = {
    # YOLOv8's C2f: both halves and the bottleneck on the second half joined
    "c2f": ((Y, '("n", 12, 5, 7)'), """
lv = R.split(x, indices_or_sections=2, axis=1)
a = lv[0]
b = lv[1]
lv1 = R.add(b, y)
lv2 = R.concat((a, b, lv1), axis=1)
return lv2
""", """
b = R.strided_slice(x, axes=(1,), begin=(4,), end=(8,))
lv1 = R.add(b, y)
lv2 = R.concat((x, lv1), axis=1)
return lv2
"""),
    # the pieces after another part, the axis negative, three uneven sections (8 -> 3, 3, 2)
    "after_a_part": ((Y, '("n", 12, 5, 7)'), """
lv = R.split(x, indices_or_sections=3, axis=1)
a = lv[0]
b = lv[1]
c = lv[2]
lv2 = R.concat((y, a, b, c), axis=-3)
return lv2
""", """
lv2 = R.concat((y, x), axis=-3)
return lv2
"""),
    # split at indices, the first piece read alone
    "first_piece": ((X, '("n", 2, 5, 7)'), """
lv = R.split(x, indices_or_sections=(2, 5), axis=1)
a = lv[0]
lv1 = R.multiply(a, a)
return lv1
""", """
a = R.strided_slice(x, axes=(1,), begin=(0,), end=(2,))
lv1 = R.multiply(a, a)
return lv1
"""),
}


@pytest.mark.parametrize("name", CASES)
def test_concat_of_split(name):
    (params, ret), before, expected = CASES[name]
    mod, out = assert_rewrites(concat_of_split_pass, program(params, ret, before), program(params, ret, expected))
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}, {"n": 0}], rtol=0, atol=0)


UNCHANGED = {
    # the pieces out of order, a piece left out, another axis, a split the concat does not join whole
    "out_of_order": (Y, '("n", 12, 5, 7)', """
lv = R.split(x, indices_or_sections=2, axis=1)
a = lv[0]
b = lv[1]
lv2 = R.concat((b, a, y), axis=1)
return lv2"""),
    "piece_left_out": (Y, '("n", 8, 5, 7)', """
lv = R.split(x, indices_or_sections=2, axis=1)
a = lv[0]
b = lv[1]
lv2 = R.concat((a, y), axis=1)
lv3 = R.add(lv2, R.concat((b, b), axis=1))
return lv3"""),
    "other_axis": ('x: R.Tensor(("n", 8, 4, 7), "float32")', '("n", 4, 8, 7)', """
lv = R.split(x, indices_or_sections=2, axis=1)
a = lv[0]
b = lv[1]
lv2 = R.concat((a, b), axis=2)
return lv2"""),
    # the pieces alone: the concat is the split's input (a copy either way)
    "pieces_alone": (X, '("n", 8, 5, 7)', """
lv = R.split(x, indices_or_sections=2, axis=1)
a = lv[0]
b = lv[1]
lv2 = R.concat((a, b), axis=1)
return lv2"""),
    # both pieces read: a split
    "both_read": (X, '("n", 4, 5, 7)', """
lv = R.split(x, indices_or_sections=2, axis=1)
a = lv[0]
b = lv[1]
lv2 = R.add(a, b)
return lv2"""),
    # the split axis's length unknown: no slice bounds
    "unknown_length": ('x: R.Tensor(("n", 8, 5, 7), "float32")', '("(n + 1) // 2", 8, 5, 7)', """
lv = R.split(x, indices_or_sections=2, axis=0)
a = lv[0]
lv1 = R.add(a, a)
return lv1"""),
}


@pytest.mark.parametrize("name", UNCHANGED)
def test_concat_of_split_leaves_alone(name):
    params, ret, body = UNCHANGED[name]
    assert_unchanged(concat_of_split_pass, program(params, ret, body))


def test_the_pipeline_runs_it():
    """At -O2 the C2f pattern's split and three-part concat are gone."""
    from relaxpack.ir import parse
    from relaxpack.passes.pipeline import optimize_pipeline
    (params, ret), before, _ = CASES["c2f"]
    out = run_pass(optimize_pipeline(), parse(program(params, ret, before)))
    assert "split" not in ops_of(out) and "strided_slice" in ops_of(out)
