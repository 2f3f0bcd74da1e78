"""SimplifyShapes: dims simplified with the ranges, casts that hold removed,
shape arithmetic evaluated symbolically, Gather index normalization of
never-negative indices dropped."""

from pathlib import Path

import relaxpack
from relaxpack.ir.dims import DimAnalyzer
from relaxpack.passes import Sequential
from relaxpack.passes.simplify_shapes import _Dims, simplify_shapes, unify_cast

from .helpers import (
    assert_rewrites, assert_same_results, assert_unchanged, count_bindings, ops_used,
)

MODELS = Path(__file__).resolve().parents[1] / "models"


def test_dims_simplify_with_the_ranges():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("seq", 8), "float32")) -> R.Tensor(("min(seq, 512)", 2, 4), "float32"):
        seq = T.int64(lower=1, upper=512)
        y = R.reshape(x, R.shape([min(seq, 512), 2, 4]))
        z = R.reshape(y, R.shape([seq // 1024 + seq, 8]))
        w = R.reshape(z, R.shape([min(seq, 512), 2, 4]))
        return w
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("seq", 8), "float32")) -> R.Tensor(("seq", 2, 4), "float32"):
        seq = T.int64(lower=1, upper=512)
        y = R.reshape(x, R.shape([seq, 2, 4]))
        z = R.reshape(y, R.shape([seq, 8]))
        w = R.reshape(z, R.shape([seq, 2, 4]))
        return w
"""
    mod, out = assert_rewrites(simplify_shapes, before, expected)
    assert_same_results(mod, out, [{"seq": 1}, {"seq": 100}])


def test_a_cast_that_only_renames_dims_unifies_them():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("m", 2, 2), "float32"):
        n = T.int64(lower=1, upper=8)
        m = T.int64(lower=1, upper=16)
        a = R.match_cast(x, R.Tensor(("m", 4), "float32"))
        b = R.exp(a)
        c = R.reshape(b, R.shape([m, 2, 2]))
        r = R.range(R.prim_value(0), R.prim_value(m), R.prim_value(1), dtype="int64")
        return c
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 2, 2), "float32"):
        n = T.int64(lower=1, upper=8)
        a = x
        b = R.exp(a)
        c = R.reshape(b, R.shape([n, 2, 2]))
        r = R.range(R.prim_value(0), R.prim_value(n), R.prim_value(1), dtype="int64")
        return c
"""
    mod, out = assert_rewrites(simplify_shapes, before, expected)
    assert out["main"].attrs["dim_ranges"] == (("n", 1, 8),)
    assert_same_results(mod, out, [{"n": 1}, {"n": 8}])


def test_a_cast_after_an_if_whose_branches_agree_goes():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), c: R.Tensor((), "bool")) -> R.Tensor(("d0", "d1"), "float32"):
        n = T.int64()
        d0 = T.int64()
        d1 = T.int64()
        if c:
            t = R.exp(x)
            r = t
        else:
            e = R.negative(x)
            r = e
        out = R.match_cast(r, R.Tensor(("d0", "d1"), "float32"))
        y = R.sigmoid(out)
        return y
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), c: R.Tensor((), "bool")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        if c:
            t = R.exp(x)
            r = t
        else:
            e = R.negative(x)
            r = e
        out = r
        y = R.sigmoid(out)
        return y
"""
    mod, out = assert_rewrites(simplify_shapes, before, expected)
    assert_same_results(mod, out, [{"n": 2}, {"n": 3}])


def test_shape_arithmetic_is_evaluated_symbolically():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("batch", "seq", 8), "float32")) -> R.Tensor((3,), "int64"):
        batch = T.int64()
        seq = T.int64()
        s = R.shape_to_tensor(R.shape([batch, seq, 8]), scalar=False)
        one = R.add(s, R.const(1, "int64"))
        two = R.multiply(one, R.const([2, 2, 1], "int64"))
        part = R.take(two, R.const([1], "int64"), axis=0)
        whole = R.concat((part, R.const([4, 4], "int64")), axis=0)
        back = R.subtract(whole, R.shape_to_tensor(R.shape([2 * seq + 1, 4, 3]), scalar=False))
        return whole
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("batch", "seq", 8), "float32")) -> R.Tensor((3,), "int64"):
        batch = T.int64()
        seq = T.int64()
        s = R.shape_to_tensor(R.shape([batch, seq, 8]), scalar=False)
        one = R.shape_to_tensor(R.shape([batch + 1, seq + 1, 9]), scalar=False)
        two = R.shape_to_tensor(R.shape([2 * batch + 2, 2 * seq + 2, 9]), scalar=False)
        part = R.shape_to_tensor(R.shape([2 * seq + 2]), scalar=False)
        whole = R.shape_to_tensor(R.shape([2 * seq + 2, 4, 4]), scalar=False)
        lv = R.shape_to_tensor(R.shape([2 * seq + 1, 4, 3]), scalar=False)
        back = R.const([1, 0, 1], "int64")
        return whole
"""
    mod, out = assert_rewrites(simplify_shapes, before, expected)
    assert_same_results(mod, out, [{"batch": 1, "seq": 3}, {"batch": 4, "seq": 10}])


def test_truncating_divide_of_shapes_where_the_sign_allows():
    """ONNX Div truncates: seq - 1 (>= -1) by 2 is max(seq - 1, 0) // 2 (0 at seq = 0, where
    floor division gives -1); seq - 3 (may be -3) by 2 stays a run-time divide."""
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("seq", 8), "float32")) -> R.Tensor((2,), "int64"):
        seq = T.int64()
        s = R.shape_to_tensor(R.shape([seq - 1]), scalar=False)
        h = R.divide(s, R.const(2, "int64"))
        t = R.shape_to_tensor(R.shape([seq - 3]), scalar=False)
        k = R.divide(t, R.const(2, "int64"))
        both = R.concat((h, k), axis=0)
        return both
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("seq", 8), "float32")) -> R.Tensor((2,), "int64"):
        seq = T.int64()
        s = R.shape_to_tensor(R.shape([seq - 1]), scalar=False)
        h = R.shape_to_tensor(R.shape([max(seq - 1, 0) // 2]), scalar=False)
        t = R.shape_to_tensor(R.shape([seq - 3]), scalar=False)
        k = R.divide(t, R.const(2, "int64"))
        both = R.concat((h, k), axis=0)
        return both
"""
    mod, out = assert_rewrites(simplify_shapes, before, expected)
    assert_same_results(mod, out, [{"seq": 0}, {"seq": 1}, {"seq": 2}, {"seq": 7}])


def test_gather_index_normalization_of_a_range_goes():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(table: R.Tensor((128, 8), "float32"), x: R.Tensor(("seq", 8), "float32")) -> R.Tensor(("seq", 8), "float32"):
        seq = T.int64(lower=1, upper=128)
        r = R.range(R.prim_value(0), R.prim_value(seq), R.prim_value(1), dtype="int64")
        neg = R.less(r, R.const(0, "int64"))
        idx = R.add(r, R.const(128, "int64"))
        i = R.where(neg, idx, r)
        e = R.take(table, i, axis=0)
        y = R.add(e, x)
        return y
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(table: R.Tensor((128, 8), "float32"), x: R.Tensor(("seq", 8), "float32")) -> R.Tensor(("seq", 8), "float32"):
        seq = T.int64(lower=1, upper=128)
        r = R.range(R.prim_value(0), R.prim_value(seq), R.prim_value(1), dtype="int64")
        neg = R.less(r, R.const(0, "int64"))
        idx = R.add(r, R.const(128, "int64"))
        i = r
        e = R.take(table, i, axis=0)
        y = R.add(e, x)
        return y
"""
    mod, out = assert_rewrites(simplify_shapes, before, expected)
    assert_same_results(mod, out, [{"seq": 1}, {"seq": 128}])


def test_a_dim_with_a_single_value_becomes_that_value():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", "k"), "float32")) -> R.Tensor(("n * k",), "float32"):
        n = T.int64()
        k = T.int64(lower=4, upper=4)
        y = R.reshape(x, R.shape([n * k]))
        return y
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("4 * n",), "float32"):
        n = T.int64()
        y = R.reshape(x, R.shape([4 * n]))
        return y
"""
    mod, out = assert_rewrites(simplify_shapes, before, expected)
    assert_same_results(mod, out, [{"n": 2, "k": 4}, {"n": 5, "k": 4}])


# ---------------------------------------------------------------- what must stay
def test_casts_that_may_fail_stay():
    text = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor("float32", ndim=2), y: R.Tensor(("n", 4), "float32"), z: R.Tensor(("n", 4), "float32")) -> R.Tensor(("m", 4), "float32"):
        n = T.int64()
        m = T.int64()
        k = T.int64(lower=1, upper=8)
        j = T.int64()
        a = R.match_cast(x, R.Tensor(("m", 4), "float32"))
        b = R.match_cast(y, R.Tensor(("k", 4), "float32"))
        c = R.match_cast(z, R.Tensor(("2 * j", 4), "float32"))
        d = R.match_cast(y, R.Tensor(("n", 4), "int32"))
        return a
"""
    mod = assert_unchanged(simplify_shapes, text)
    dims = _Dims(DimAnalyzer({"k": (1, 8)}))
    bindings = mod["main"].body.blocks[0].bindings
    reasons = [unify_cast(b.struct_info, b.value.struct_info, {"n"}, dims) for b in bindings]
    assert reasons == ["the value's dims are only known at run time",
                       "n may be outside the range [1, 8] of the new dim k",
                       "the dim 2 * j uses a new name that is not a plain dim",
                       "dtype float32 is not provably int32"]


def test_an_undecided_condition_and_a_broadcasting_where_stay():
    text = """
@I.ir_module
class Module:
    @R.function
    def main(ids: R.Tensor(("seq",), "int64"), big: R.Tensor((4, "seq"), "int64")) -> R.Tensor((4, "seq"), "int64"):
        seq = T.int64()
        neg = R.less(ids, R.const(0, "int64"))
        idx = R.add(ids, R.const(128, "int64"))
        i = R.where(neg, idx, ids)
        r = R.range(R.prim_value(0), R.prim_value(seq), R.prim_value(1), dtype="int64")
        never = R.less(r, R.const(0, "int64"))
        j = R.where(never, big, r)
        return j
"""
    mod = assert_unchanged(simplify_shapes, text)
    assert_same_results(mod, Sequential([simplify_shapes])(mod), [{"seq": 3}])


def test_gpt_small_keeps_symbolic_reshapes_and_gathers_positions_by_the_range():
    mod = relaxpack.from_onnx(str(MODELS / "gpt_small.onnx"))
    out = Sequential([simplify_shapes])(mod)
    text = out.script(show_meta=False)
    assert "shape_to_tensor" not in text
    assert text.count("R.reshape(") == 8 and text.count("R.shape([batch, seq, 4, 8])") == 6
    # run-time Gather indices reach the kernel as they are (it checks [-n, n)): no index arithmetic
    assert 'R.take(metadata["c1"], lv_1, axis=0, in_bounds=False)' in text
    assert 'R.take(metadata["c0"], ids, axis=0, in_bounds=False)' in text
    assert count_bindings(out) == count_bindings(mod)
    assert ops_used(out).count("where") == ops_used(mod).count("where") == 2   # the attention masks
