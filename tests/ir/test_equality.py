import numpy as np
import pytest

from relaxpack.ir import BlockBuilder, Constant, TensorStructInfo, Var, sym
from relaxpack.ir.equality import assert_structural_equal, structural_equal, structural_hash
from relaxpack.ops import make_call

n = sym("n")


def module(op="exp", const=1.0, name="x", dtype="float32"):
    x = Var(name, TensorStructInfo((n, 4), dtype))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            lv = bb.emit(make_call(op, x), name_hint="renamed" if name != "x" else "lv")
            c = Constant(np.full((4,), const, dtype))
            gv = bb.emit_output(make_call("add", lv, c))
        bb.emit_func_output(gv)
    return bb.get()


def test_equal_up_to_renaming():
    a, b = module(), module(name="y")
    assert a is not b
    assert structural_equal(a, b)
    assert structural_hash(a) == structural_hash(b)
    assert_structural_equal(a, b)


@pytest.mark.parametrize("change", [dict(op="negative"), dict(const=2.0), dict(dtype="float16")])
def test_differences_are_seen(change):
    a, b = module(), module(**change)
    assert not structural_equal(a, b)
    with pytest.raises(AssertionError, match="not structurally equal"):
        assert_structural_equal(b, a)


def test_free_vars_compare_by_identity_unless_mapped():
    x, y = Var("x", TensorStructInfo((2,), "float32")), Var("x", TensorStructInfo((2,), "float32"))
    ex, ey = make_call("exp", x), make_call("exp", y)
    assert not structural_equal(ex, ey)
    assert structural_equal(ex, make_call("exp", x))
    assert structural_equal(ex, ey, map_free_vars=True)


def test_constants_compare_by_content_including_nan():
    a = Constant(np.array([np.nan, 1.0], np.float32))
    b = Constant(np.array([np.nan, 1.0], np.float32))
    c = Constant(np.array([np.nan, 1.0], np.float64))
    assert structural_equal(a, b)
    assert not structural_equal(a, c)


def test_binding_order_matters_for_var_identity():
    # the same ops, but the output uses the other intermediate
    x = Var("x", TensorStructInfo((2,), "float32"))

    def build(use_first):
        bb = BlockBuilder()
        with bb.function("main", [x]):
            with bb.dataflow():
                a = bb.emit(make_call("exp", x))
                b = bb.emit(make_call("exp", x))
                gv = bb.emit_output(make_call("negative", a if use_first else b))
            bb.emit_func_output(gv)
        return bb.get()

    assert structural_equal(build(True), build(True))
    assert not structural_equal(build(True), build(False))
