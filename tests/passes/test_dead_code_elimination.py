"""DeadCodeElimination: unused pure bindings and unreachable functions go."""

from pathlib import Path

import relaxpack
from relaxpack.passes import Sequential
from relaxpack.passes.dead_code_elimination import dead_code_elimination, removable
from relaxpack.passes.eliminate_common_subexpr import eliminate_common_subexpr

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, run_pass


def test_unused_chains_go_in_one_run():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        with R.dataflow():
            a = R.exp(x)
            b = R.negative(a)
            c = R.add(b, a)
            t = (c, a)
            d = t[0]
            y = R.sigmoid(x)
            R.output(y)
        unused = R.multiply(y, y)
        return y
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        with R.dataflow():
            y = R.sigmoid(x)
            R.output(y)
        return y
"""
    mod, out = assert_rewrites(dead_code_elimination, before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 9}])


def test_if_branches_are_swept_and_a_dead_if_goes():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), c: R.Tensor((), "bool")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        if c:
            t = R.exp(x)
            dead = R.negative(t)
            r = t
        else:
            e = R.negative(x)
            r = x
        if c:
            u = R.exp(x)
            q = u
        else:
            q = x
        y = R.add(r, x)
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
        y = R.add(r, x)
        return y
"""
    mod, out = assert_rewrites(dead_code_elimination, before, expected)
    assert_same_results(mod, out, [{"n": 2}, {"n": 5}])


def test_functions_main_does_not_reach_go():
    before = """
@I.ir_module
class Module:
    @R.function
    def helper(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = R.exp(x)
        return y

    @R.function
    def twice(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = cls.helper(x)
        z = cls.helper(y)
        return z

    @R.function
    def orphan(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = R.negative(x)
        return y

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = cls.twice(x)
        return y
"""
    expected = before.replace('''    @R.function
    def orphan(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = R.negative(x)
        return y

''', "")
    mod, out = assert_rewrites(dead_code_elimination, before, expected)
    assert sorted(out.functions) == ["helper", "main", "twice"]
    assert_same_results(mod, out, [{}])


def test_a_function_called_only_from_dead_code_goes_in_the_same_run():
    before = """
@I.ir_module
class Module:
    @R.function
    def helper(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = R.exp(x)
        return y

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        unused = cls.helper(x)
        y = R.negative(x)
        return y
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y = R.negative(x)
        return y
"""
    assert_rewrites(dead_code_elimination, before, expected)


def test_a_module_without_main_keeps_its_functions():
    assert_unchanged(dead_code_elimination, """
@I.ir_module
class Module:
    @R.function
    def f(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        return x

    @R.function
    def g(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        return x
""")


# ---------------------------------------------------------------- what must stay
def test_impure_calls_casts_and_parameters_stay():
    text = """
@I.ir_module
class Module:
    @R.function(pure=False)
    def main(x: R.Tensor("float32", ndim=2), unused: R.Tensor((3,), "float32"), c: R.Tensor((), "bool")) -> R.Tensor("float32", ndim=2):
        m = T.int64()
        k = T.int64()
        p = R.call_packed("nonzero", x, kernel_attrs=None, sinfo_args=R.Tensor("int64", ndim=2))
        cast = R.match_cast(x, R.Tensor(("m", 4), "float32"))
        if c:
            q = R.call_packed("nonzero", x, kernel_attrs=None, sinfo_args=R.Tensor("int64", ndim=2))
            r = x
        else:
            r = x
        return x
"""
    mod = assert_unchanged(dead_code_elimination, text)
    bindings = mod["main"].body.blocks[0].bindings
    assert removable(bindings[0]) == "the value has side effects"
    assert removable(bindings[1]) == "a match_cast is a run-time check"
    assert removable(bindings[2]) == "the value has side effects"   # the If: its branch calls out


def test_idempotent_on_a_model_worth_of_leftovers():
    mod = relaxpack.from_onnx(str(Path(__file__).resolve().parents[1] / "models" / "gpt_small.onnx"))
    merged = Sequential([eliminate_common_subexpr])(mod)    # leaves the merged duplicates unused
    once = run_pass(dead_code_elimination, merged)
    assert once is not merged
    assert run_pass(dead_code_elimination, once) is once
