"""FoldConstant: calls on constants become constants, within a size guard."""

import numpy as np

from relaxpack.ir import parse
from relaxpack.passes.fold_constant import CONFIG_KEY, FOLD_MIN_ELEMENTS, fold_constant

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, ops_used, run_pass


def test_chains_fold_in_one_run_and_uses_see_the_constant():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        a = R.add(R.const([1.0, 2.0, 3.0, 4.0], "float32"), R.const(1.0, "float32"))
        b = R.multiply(a, a)
        c = R.negative(b)
        y = R.add(x, c)
        return y
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        a = R.const([2.0, 3.0, 4.0, 5.0], "float32")
        b = R.const([4.0, 9.0, 16.0, 25.0], "float32")
        c = R.const([-4.0, -9.0, -16.0, -25.0], "float32")
        y = R.add(x, R.const([-4.0, -9.0, -16.0, -25.0], "float32"))
        return y
"""
    mod, out = assert_rewrites(fold_constant, before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 6}])


def test_a_split_folds_to_a_tuple_of_constants():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 2), "float32")) -> R.Tensor(("n", 2), "float32"):
        n = T.int64()
        s = R.split(R.const([1.0, 2.0, 3.0, 4.0], "float32"), indices_or_sections=2, axis=0)
        a = s[0]
        b = s[1]
        c = R.subtract(b, a)
        y = R.multiply(x, c)
        return y
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 2), "float32")) -> R.Tensor(("n", 2), "float32"):
        n = T.int64()
        s = (R.const([1.0, 2.0], "float32"), R.const([3.0, 4.0], "float32"))
        a = R.const([1.0, 2.0], "float32")
        b = R.const([3.0, 4.0], "float32")
        c = R.const([2.0, 2.0], "float32")
        y = R.multiply(x, R.const([2.0, 2.0], "float32"))
        return y
"""
    mod, out = assert_rewrites(fold_constant, before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}])


def test_static_shapes_and_prim_values_are_constants_too():
    before = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((6,), "float32")) -> R.Tensor((2, 3), "float32"):
        s = R.shape([2, 3])
        t = R.shape_to_tensor(s, scalar=False)
        r = R.range(R.prim_value(0), R.prim_value(3), R.prim_value(1), dtype="float32")
        y = R.reshape(x, s)
        z = R.add(y, r)
        return z
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((6,), "float32")) -> R.Tensor((2, 3), "float32"):
        s = R.shape([2, 3])
        t = R.const([2, 3], "int64")
        r = R.const([0.0, 1.0, 2.0], "float32")
        y = R.reshape(x, R.shape([2, 3]))
        z = R.add(y, R.const([0.0, 1.0, 2.0], "float32"))
        return z
"""
    mod, out = assert_rewrites(fold_constant, before, expected)
    assert_same_results(mod, out, [{}])


def test_the_returned_var_stays_a_var():
    before = """
@I.ir_module
class Module:
    @R.function
    def main() -> R.Tuple(R.Tensor((2,), "float32"), R.Tensor((2,), "float32")):
        a = R.exp(R.const([0.0, 0.0], "float32"))
        b = R.add(a, a)
        return (a, b)
"""
    expected = """
@I.ir_module
class Module:
    @R.function
    def main() -> R.Tuple(R.Tensor((2,), "float32"), R.Tensor((2,), "float32")):
        a = R.const([1.0, 1.0], "float32")
        b = R.const([2.0, 2.0], "float32")
        return (a, b)
"""
    mod, out = assert_rewrites(fold_constant, before, expected)
    assert_same_results(mod, out, [{}])


# ---------------------------------------------------------------- the size guard
BROADCAST = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((64, 64), "float32")) -> R.Tensor((64, 64), "float32"):
        big = R.broadcast_to(R.const([1.0, 2.0], "float32"), R.shape([64, 32, 2]))
        flat = R.reshape(big, R.shape([64, 64]))
        y = R.add(x, flat)
        return y
"""


def test_a_small_constant_broadcast_into_a_big_one_is_not_folded():
    mod = assert_unchanged(fold_constant, BROADCAST)
    assert 64 * 64 > FOLD_MIN_ELEMENTS
    assert_same_results(mod, run_pass(fold_constant, mod), [{}])


def test_the_limit_is_a_pass_context_setting():
    out = run_pass(fold_constant, parse(BROADCAST), **{CONFIG_KEY: 64 * 64})
    assert ops_used(out) == ["add"]
    flat = out["main"].body.blocks[0].bindings[2].value.args[1]
    np.testing.assert_array_equal(flat.data, np.tile(np.array([1.0, 2.0], np.float32), (64, 32)))


def test_results_no_bigger_than_their_inputs_always_fold():
    weight = np.arange(40 * 64, dtype=np.float32).reshape(40, 64)
    mod = parse("""
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((64, 40), "float32")) -> R.Tensor((64, 40), "float32"):
        w = R.permute_dims(metadata["c0"], axes=(1, 0))
        y = R.add(x, w)
        return y
""", metadata={"c0": weight})
    out = run_pass(fold_constant, mod)
    assert ops_used(out) == ["add"]
    np.testing.assert_array_equal(out["main"].body.blocks[0].bindings[1].value.args[1].data, weight.T)
    assert_same_results(mod, out, [{}])


# ---------------------------------------------------------------- what must not fold
def test_symbolic_impure_and_failing_calls_do_not_fold():
    text = """
@I.ir_module
class Module:
    @R.function(pure=False)
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        a = R.broadcast_to(R.const([1.0, 2.0, 3.0, 4.0], "float32"), R.shape([n, 4]))
        b = R.call_packed("nonzero", R.const([1.0, 0.0], "float32"), kernel_attrs=None, sinfo_args=R.Tensor("int64", ndim=2))
        c = R.take(R.const([1.0, 2.0], "float32"), R.const([5], "int64"), axis=0)
        d = R.range(R.prim_value(0), R.prim_value(n), R.prim_value(1), dtype="int64")
        e = R.tile(R.const([1.0, 2.0], "float32"), repeats=(2048,))
        y = R.add(x, a)
        return y
"""
    assert_unchanged(fold_constant, text)
