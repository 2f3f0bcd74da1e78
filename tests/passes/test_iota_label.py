"""SimplifyAlgebra's label_of_iota_table: skl2onnx's label, ``take(arange(n), argmax)`` reshaped and
cast back to int64, is the argmax reshaped."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, assert_unchanged, program, with_dce

PARAMS = 'p: R.Tensor(("n", 3), "float32")'


def _label(table: str = 'R.const([0, 1, 2], "int32")', reduce: str = "argmax", to: str = "int64") -> str:
    """skl2onnx's ArgMax, ArrayFeatureExtractor(classes, index), Reshape and Cast."""
    return f"""
a = R.{reduce}(p, axis=1, keepdims=True)
idx = R.reshape(a, R.shape([n]))
f = R.take({table}, idx, axis=0)
e = R.expand_dims(f, axis=(0,))
r = R.reshape(e, R.shape([-1]))
label = R.astype(r, dtype="{to}")
return label
"""


def _expected(reduce: str = "argmax") -> str:
    return program(PARAMS, '("n",)', f"""
a = R.{reduce}(p, axis=1, keepdims=True)
idx = R.reshape(a, R.shape([n]))
return idx
""", dtype="int64")


def _exactly_equal(before, after, feeds):
    """The label arrays equal value for value, of the same dtype and shape (built at -O0)."""
    vm_before, vm_after = (VirtualMachine(relaxpack.build(m, opt_level=0)) for m in (before, after))
    for x in feeds:
        want, got = vm_before.run({"p": x}), vm_after.run({"p": x})
        (w,), (g,) = want.values(), got.values()
        assert w.dtype == g.dtype == np.int64 and w.shape == g.shape == (x.shape[0],)
        assert np.array_equal(w, g)


def _feeds(columns: int = 3):
    rng = np.random.default_rng(0)
    tied = np.array([[1, 1, 0], [0, 2, 2], [5, 5, 5], [-0.0, 0.0, -1], [np.nan, 1, 2], [1, np.nan, np.nan]],
                    np.float32)[:, :columns]
    return [rng.standard_normal((n, columns)).astype(np.float32) for n in (0, 1, 7, 64)] + [tied]


@pytest.mark.parametrize("reduce", ["argmax", "argmin"])
def test_the_label_of_an_iota_table_is_the_index(reduce):
    before = program(PARAMS, '("n",)', _label(reduce=reduce), dtype="int64")
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, _expected(reduce))
    _exactly_equal(mod, out, _feeds())


def test_a_table_longer_than_the_axis():
    """Indices below 3 read a table 0..4 (int32 or uint8) as they are."""
    for table in ('R.const([0, 1, 2, 3, 4], "int32")', 'R.const([0, 1, 2], "uint8")'):
        before = program(PARAMS, '("n",)', _label(table), dtype="int64")
        mod, out = assert_rewrites(with_dce(simplify_algebra), before, _expected())
        _exactly_equal(mod, out, _feeds())


def test_a_table_of_the_index_type_needs_no_cast():
    """An int64 table: the cast is an identity (removed first) and the take alone is the index."""
    before = program(PARAMS, '("n",)', _label('R.const([0, 1, 2], "int64")'), dtype="int64")
    expected = program(PARAMS, '("n",)', """
a = R.argmax(p, axis=1, keepdims=True)
f = R.reshape(a, R.shape([n]))
e = R.expand_dims(f, axis=(0,))
r = R.reshape(e, R.shape([-1]))
label = r
return label
""", dtype="int64")
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    _exactly_equal(mod, out, _feeds())


@pytest.mark.parametrize("table, why", [
    ('R.const([0, 2, 1], "int32")', "the take's data is not a constant 0, 1, ..., n-1"),
    ('R.const([1, 2, 3], "int32")', "the take's data is not a constant 0, 1, ..., n-1"),
    ('R.const([0.0, 1.0, 2.0], "float32")', "the take's data is not a constant 0, 1, ..., n-1"),
    ('R.const([0, 1], "int32")',
     "the index is not an argmax/argmin over a known axis of at most n values"),
])
def test_other_tables_stay(table, why):
    """A permuted or shifted table (other labels), a float table, one shorter than the axis (the
    take would fail on index 2): the cast stays, and why."""
    before = program(PARAMS, '("n",)', _label(table), dtype="int64")
    assert_unchanged(simplify_algebra, before)
    assert dict(explain(parse(before), "label_of_iota_table")) == {"label": why}


def test_other_casts_and_indices_stay():
    """A label cast to another type than the index's; an index that is not an argmax (which
    SimplifyAlgebra's quantize rules then cast in the table: only this rule's reason is asserted)."""
    to_float = program(PARAMS, '("n",)', _label(to="float32"), dtype="float32")
    assert_unchanged(simplify_algebra, to_float)
    assert dict(explain(parse(to_float), "label_of_iota_table")) == {
        "label": "the cast does not restore the index's dtype"}
    given = program('i: R.Tensor(("n",), "int64")', '("n",)', """
f = R.take(R.const([0, 1, 2], "int32"), i, axis=0)
label = R.astype(f, dtype="int64")
return label
""", dtype="int64")
    assert dict(explain(parse(given), "label_of_iota_table")) == {
        "label": "the index is not an argmax/argmin over a known axis of at most n values"}
