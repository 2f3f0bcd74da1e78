"""EliminateCommonSubexpr: the same pure value is computed once."""

import numpy as np

from relaxpack.ir import parse
from relaxpack.passes import Sequential
from relaxpack.passes.canonicalize_bindings import canonicalize_bindings
from relaxpack.passes.eliminate_common_subexpr import eliminate_common_subexpr

from .helpers import (
    assert_rewrites, assert_same_results, assert_unchanged, count_bindings, ops_used, run_pass,
)


def test_the_second_computation_becomes_an_alias():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        a = R.exp(x)
        b = R.exp(x)
        c = R.add(a, b)
        return c
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        a = R.exp(x)
        b = a
        c = R.add(a, b)
        return c
"""
    mod, out = assert_rewrites(eliminate_common_subexpr, before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 4}])


def test_a_repeated_subgraph_merges_in_one_run():
    # the causal mask a torch export computes once per attention block
    before = """
@I.ir_module
class Module:
    @R.function
    def main(s1: R.Tensor(("b", "seq", "seq"), "float32"), s2: R.Tensor(("b", "seq", "seq"), "float32")) -> R.Tensor(("b", "seq", "seq"), "float32"):
        b = T.int64()
        seq = T.int64()
        m1 = R.broadcast_to(R.const(True, "bool"), R.shape([seq, seq]))
        l1 = R.trilu(m1, k=0, upper=False)
        n1 = R.logical_not(l1)
        w1 = R.where(n1, R.const(-1.0, "float32"), s1)
        m2 = R.broadcast_to(R.const(True, "bool"), R.shape([seq, seq]))
        l2 = R.trilu(m2, k=0, upper=False)
        n2 = R.logical_not(l2)
        w2 = R.where(n2, R.const(-1.0, "float32"), s2)
        y = R.add(w1, w2)
        return y
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(s1: R.Tensor(("b", "seq", "seq"), "float32"), s2: R.Tensor(("b", "seq", "seq"), "float32")) -> R.Tensor(("b", "seq", "seq"), "float32"):
        b = T.int64()
        seq = T.int64()
        m1 = R.broadcast_to(R.const(True, "bool"), R.shape([seq, seq]))
        l1 = R.trilu(m1, k=0, upper=False)
        n1 = R.logical_not(l1)
        w1 = R.where(n1, R.const(-1.0, "float32"), s1)
        m2 = m1
        l2 = l1
        n2 = n1
        w2 = R.where(n2, R.const(-1.0, "float32"), s2)
        y = R.add(w1, w2)
        return y
"""
    mod, out = assert_rewrites(eliminate_common_subexpr, before, expected)
    assert_same_results(mod, out, [{"b": 1, "seq": 3}, {"b": 2, "seq": 6}])
    cleaned = Sequential([canonicalize_bindings])(out)
    assert ops_used(cleaned).count("trilu") == 1 and count_bindings(cleaned) == 6


def test_constants_equal_by_content_merge():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    before = parse("""
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        a = R.matmul(x, metadata["c0"], out_dtype=None)
        b = R.matmul(x, metadata["c1"], out_dtype=None)
        c = R.matmul(x, metadata["c2"], out_dtype=None)
        d = R.add(a, b)
        e = R.add(d, c)
        return e
""", metadata={"c0": w, "c1": w.copy(), "c2": w + 1})
    out = run_pass(eliminate_common_subexpr, before)
    bindings = out["main"].body.blocks[0].bindings
    assert bindings[1].value is bindings[0].var                  # b = a
    assert bindings[2].value.args[1].data[0, 0] == w[0, 0] + 1   # c is different
    assert_same_results(before, out, [{"n": 2}, {"n": 5}])
    assert run_pass(eliminate_common_subexpr, out) is out


# ---------------------------------------------------------------- what must not merge
def test_impure_calls_different_attrs_and_casts_do_not_merge():
    text = """
@I.ir_module
class Module:
    @R.function(pure=False)
    def main(x: R.Tensor("float32", ndim=2)) -> R.Tensor("float32", ndim=2):
        m = T.int64()
        k = T.int64()
        p = R.call_packed("nonzero", x, kernel_attrs=None, sinfo_args=R.Tensor("int64", ndim=2))
        q = R.call_packed("nonzero", x, kernel_attrs=None, sinfo_args=R.Tensor("int64", ndim=2))
        a = R.match_cast(x, R.Tensor(("m", 4), "float32"))
        b = R.match_cast(x, R.Tensor(("k", 4), "float32"))
        s1 = R.nn.softmax(a, axis=0)
        s2 = R.nn.softmax(a, axis=1)
        return x
"""
    assert_unchanged(eliminate_common_subexpr, text)


def test_values_do_not_leave_their_if_branch_or_dataflow_block():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), c: R.Tensor((), "bool")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        with R.dataflow():
            lv = R.exp(x)
            gv = R.add(lv, x)
            R.output(gv)
        w = R.negative(gv)
        if c:
            t = R.exp(x)
            w2 = R.negative(gv)
            u = R.multiply(w2, t)
            r = u
        else:
            e = R.sigmoid(x)
            r = e
        e2 = R.sigmoid(x)
        t2 = R.exp(x)
        y = R.add(r, e2)
        z = R.add(y, t2)
        return z
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), c: R.Tensor((), "bool")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        with R.dataflow():
            lv = R.exp(x)
            gv = R.add(lv, x)
            R.output(gv)
        w = R.negative(gv)
        if c:
            t = R.exp(x)
            w2 = w
            u = R.multiply(w2, t)
            r = u
        else:
            e = R.sigmoid(x)
            r = e
        e2 = R.sigmoid(x)
        t2 = R.exp(x)
        y = R.add(r, e2)
        z = R.add(y, t2)
        return z
"""
    mod, out = assert_rewrites(eliminate_common_subexpr, before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}])
