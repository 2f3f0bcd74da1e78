"""CanonicalizeBindings: aliases, trivial tuples, redundant match casts."""

from relaxpack.ir import parse
from relaxpack.passes.core.rules import reasons as rule_reasons
from relaxpack.passes.canonicalize_bindings import (
    RULES, _Env, canonicalize_bindings, match_cast_is_redundant,
)

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, run_pass


def test_var_chains_collapse_and_the_output_keeps_its_name():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        a = R.exp(x)
        b = a
        c = b
        d = R.add(c, b)
        out = d
        return out
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        a = R.exp(x)
        out = R.add(a, a)
        return out
"""
    mod, out = assert_rewrites(canonicalize_bindings, before, expected)
    assert out["main"].body.body.name_hint == "out"
    assert_same_results(mod, out, [{"n": 1}, {"n": 5}])


def test_bindings_of_constants_shapes_and_prim_values_are_inlined():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2, 3), "float32")) -> R.Tuple(R.Tensor((3, 2), "float32"), R.Tensor((2,), "float32")):
        c = R.const([1.0, 2.0], "float32")
        s = R.shape([3, 2])
        p = R.prim_value(2)
        y = R.reshape(x, s)
        r = R.range(R.prim_value(0), p, R.prim_value(1), dtype="float32")
        z = R.add(y, r)
        kept = c
        return (z, kept)
"""
    # the returned alias keeps its name: the constant's binding takes it over
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2, 3), "float32")) -> R.Tuple(R.Tensor((3, 2), "float32"), R.Tensor((2,), "float32")):
        kept = R.const([1.0, 2.0], "float32")
        y = R.reshape(x, R.shape([3, 2]))
        r = R.range(R.prim_value(0), R.prim_value(2), R.prim_value(1), dtype="float32")
        z = R.add(y, r)
        return (z, kept)
"""
    mod, out = assert_rewrites(canonicalize_bindings, before, expected)
    assert_same_results(mod, out, [{}])


def test_dataflow_output_alias_takes_over_the_dataflow_var():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        with R.dataflow():
            lv = R.exp(x)
            lv1 = R.negative(lv)
            gv = lv1
            y = R.multiply(lv, gv)
            R.output(gv, y)
        z = R.add(gv, y)
        return z
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        with R.dataflow():
            lv = R.exp(x)
            gv = R.negative(lv)
            y = R.multiply(lv, gv)
            R.output(gv, y)
        z = R.add(gv, y)
        return z
"""
    mod, out = assert_rewrites(canonicalize_bindings, before, expected)
    assert_same_results(mod, out, [{"n": 2}, {"n": 7}])


def test_tuple_literals_are_indexed_at_compile_time():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), y: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        t = (x, y)
        a = t[1]
        b = R.exp(a)
        u = (b, t)
        c = u[1]
        d = c[0]
        f = u[0]
        e = R.subtract(d, f)
        return e
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), y: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        t = (x, y)
        b = R.exp(y)
        u = (b, t)
        e = R.subtract(x, b)
        return e
"""
    mod, out = assert_rewrites(canonicalize_bindings, before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}])


def test_an_item_of_a_tuple_literal_passed_directly_to_a_call():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2,), "float32"), y: R.Tensor((2,), "float32")) -> R.Tensor((2,), "float32"):
        t = (x, y)
        z = R.add(x, t[1])
        return z
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2,), "float32"), y: R.Tensor((2,), "float32")) -> R.Tensor((2,), "float32"):
        t = (x, y)
        z = R.add(x, y)
        return z
"""
    assert_rewrites(canonicalize_bindings, before, expected)


def test_a_tuple_rebuilt_from_all_its_items_is_the_tuple():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 6), "float32")) -> R.Tuple(R.Tensor(("n", 3), "float32"), R.Tensor(("n", 3), "float32")):
        n = T.int64()
        s = R.split(x, indices_or_sections=2, axis=1)
        a = s[0]
        b = s[1]
        t = (a, b)
        return t
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 6), "float32")) -> R.Tuple(R.Tensor(("n", 3), "float32"), R.Tensor(("n", 3), "float32")):
        n = T.int64()
        t = R.split(x, indices_or_sections=2, axis=1)
        a = t[0]
        b = t[1]
        return t
"""
    mod, out = assert_rewrites(canonicalize_bindings, before, expected)
    assert_same_results(mod, out, [{"n": 2}, {"n": 4}])


def test_a_match_cast_that_provably_holds_becomes_an_alias():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor("float32", ndim=2):
        n = T.int64(lower=1, upper=16)
        a = R.match_cast(x, R.Tensor(("n", 4), "float32"))
        b = R.match_cast(a, R.Tensor(("n", 4), "float32"))
        c = R.add(a, b)
        d = R.match_cast(c, R.Tensor("float32", ndim=2))
        return d
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor("float32", ndim=2):
        n = T.int64(lower=1, upper=16)
        d = R.add(x, x)
        return d
"""
    mod, out = assert_rewrites(canonicalize_bindings, before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 16}])


# ---------------------------------------------------------------- what must not change
def test_casts_that_may_fail_or_bind_new_dims_stay():
    text = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor("float32", ndim=2), y: R.Tensor(("n", 4), "float32")) -> R.Tensor(("m", 4), "float32"):
        n = T.int64()
        m = T.int64()
        a = R.match_cast(x, R.Tensor(("m", 4), "float32"))
        b = R.match_cast(y, R.Tensor(("n", 4), "int32"))
        c = R.match_cast(y, R.Tensor((3, 4), "float32"))
        return a
"""
    mod = assert_unchanged(canonicalize_bindings, text)
    cast = mod["main"].body.blocks[0].bindings[0]
    assert "defines the dim(s) ['m']" in match_cast_is_redundant(cast, None, {"n"})


def test_returned_alias_of_a_parameter_and_impure_calls_stay():
    text = """
@I.ir_module
class Module:
    @R.function(pure=False)
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tuple(R.Tensor(("n", 4), "float32"), R.Tensor("float32", ndim=2)):
        n = T.int64()
        out = x
        p = R.call_packed("my.print", x, kernel_attrs=None, sinfo_args=R.Tensor("float32", ndim=2))
        q = R.call_packed("my.print", x, kernel_attrs=None, sinfo_args=R.Tensor("float32", ndim=2))
        return (out, q)
"""
    assert_unchanged(canonicalize_bindings, text)


def test_aliases_inside_if_branches():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), c: R.Tensor((), "bool")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        a = x
        if c:
            t = R.exp(a)
            t2 = t
            r = t2
        else:
            e = a
            r = e
        y = R.negative(r)
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
            r = x
        y = R.negative(r)
        return y
"""
    mod, out = assert_rewrites(canonicalize_bindings, before, expected)
    assert_same_results(mod, out, [{"n": 3}])


def test_explain_names_the_rule_that_did_not_apply():
    mod = parse("""
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 6), "float32")) -> R.Tensor(("n", 3), "float32"):
        n = T.int64()
        s = R.split(x, indices_or_sections=2, axis=1)
        a = s[0]
        return a
""")
    item = mod["main"].body.blocks[0].bindings[1].value
    reasons = rule_reasons(RULES, item, _Env())
    assert reasons == {"TupleGetItemOfTupleLiteral": "the tuple is not a tuple literal"}
    assert run_pass(canonicalize_bindings, mod)["main"].body.blocks[0].bindings[1].value is item
