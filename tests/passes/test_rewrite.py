"""The rewrite-rule infrastructure (relaxpack.passes.core.rules), on toy rule tables."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import PassError
from relaxpack.ir import BlockBuilder, Var, parse, sym
from relaxpack.ir.expr import Constant
from relaxpack.ir.struct_info import TensorStructInfo
from relaxpack.ir.well_formed import check_well_formed
from relaxpack.ops import make_call
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.core.rules import (
    Rule, RewriteTable, all_of, any_of, apply_rules, const, explain, find_rule, first_applicable, is_op,
    live_use_counts, reasons,
    printed_names, same_type_as_output, used_once, wildcard,
)
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, ops_of, random_inputs, with_dce

# ---------------------------------------------------------------- a toy table

def _neg_neg(m):
    """negative(negative(x)) -> x."""
    return m["x"]


def _gemm(m):
    """matmul(x, w) + b -> nn.gemm(x, w, b)."""
    return make_call("nn.gemm", m["x"], m["w"], m["b"])


def _to_half(m):
    """exp(x) -> astype(x, float16): changes the dtype, so it must be refused."""
    return make_call("astype", m["x"], dtype="float16")


def _mul_one(m):
    """x * 1 -> x."""
    return m["x"]


TOY = RewriteTable("Toy", [
    Rule("toy_neg_neg", is_op("negative")(is_op("negative")(wildcard("x"), what="operand")), None, _neg_neg),
    Rule("toy_gemm",
         is_op("add")(is_op("matmul")(wildcard("x"), wildcard("w"), name="mm", what="operand"),
                      wildcard("b"), commutative=True),
         used_once("mm", "the matmul output"), _gemm),
    Rule("toy_to_half", is_op("exp")(wildcard("x")), None, _to_half),
    Rule("toy_mul_one", is_op("multiply")(wildcard("x"), const("c", "the factor"), commutative=True),
         all_of(lambda m: None if np.all(m.data("c") == 1) else "the factor is not 1", same_type_as_output("x")),
         _mul_one),
])
toy_pass = TOY.as_pass("ToyPass")

HEAD = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 3), "float32"), b: R.Tensor((3,), "float32")) -> R.Tensor(("n", 3), "float32"):
        n = T.int64()
'''


def toy(body: str) -> str:
    return HEAD + "\n".join("        " + line for line in body.strip().splitlines()) + "\n"


def test_rules_match_through_vars_in_either_order_and_fire_to_a_fixed_point():
    before = toy("""
lv = R.negative(x)
lv1 = R.negative(lv)
lv2 = R.negative(lv1)
lv3 = R.negative(lv2)
lv4 = R.matmul(lv3, w)  # span: /MatMul
lv5 = R.add(b, lv4)  # span: /Add
return lv5
""")
    expected = toy("""
lv = R.nn.gemm(x, w, b)
return lv
""")
    mod, out = assert_rewrites(with_dce(toy_pass), before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 6}])
    # the fused binding records what it was made from
    assert out["main"].body.blocks[0].bindings[-1].span.sources == ("/MatMul", "/Add")


def test_a_value_used_elsewhere_is_kept_and_the_reason_is_explained():
    before = toy("""
lv = R.matmul(x, w)
lv1 = R.add(lv, b)
lv2 = R.add(lv1, lv)
return lv2
""")
    mod = parse(before)
    assert_unchanged(toy_pass, before)
    assert explain(mod, "toy_gemm") == [
        ("lv1", "the matmul output lv is used twice"),
        ("lv2", "the matmul output lv is used twice"),       # matched with the operands swapped
    ]


def test_use_counts_follow_earlier_rewrites():
    # lv has one use before x*1 -> x; afterwards lv is used twice (by the add
    # and the relu), so fusing the matmul into the add would compute it twice
    before = toy("""
lv = R.matmul(x, w)
lv1 = R.multiply(lv, R.const(1.0, "float32"))
lv2 = R.add(lv1, b)
lv3 = R.nn.relu(lv1)
lv4 = R.add(lv2, lv3)
return lv4
""")
    expected = toy("""
lv = R.matmul(x, w)
lv2 = R.add(lv, b)
lv3 = R.nn.relu(lv)
lv4 = R.add(lv2, lv3)
return lv4
""")
    mod, out = assert_rewrites(with_dce(toy_pass), before, expected)
    assert ops_of(out).count("matmul") == 1
    assert ("lv2", "the matmul output lv is used twice") in explain(out, "toy_gemm")
    assert_same_results(mod, out, [{"n": 3}])


def test_results_keep_their_vars():
    # lv1 is what main returns (its name is the output's name): it is bound to x, not replaced
    def text(body):
        return toy(body).replace('-> R.Tensor(("n", 3)', '-> R.Tensor(("n", 4)')
    mod, out = assert_rewrites(with_dce(toy_pass), text("""
lv = R.negative(x)
lv1 = R.negative(lv)
return lv1
"""), text("""
lv1 = x
return lv1
"""))
    assert list(VirtualMachine(relaxpack.build(out, opt_level=0)).run(random_inputs(mod, {"n": 2}))) == ["lv1"]


def test_a_rewrite_that_changes_the_struct_info_is_refused():
    text = toy("""
lv = R.exp(x)
lv1 = R.matmul(lv, w)
return lv1
""")
    assert_unchanged(toy_pass, text)
    [(name, reason)] = explain(parse(text), "toy_to_half")
    assert name == "lv" and "would change the value's struct info" in reason and "float16" in reason


def test_dead_bindings_are_not_rewritten_and_say_so():
    mod = parse(toy("""
lv = R.negative(x)
lv1 = R.negative(lv)
lv2 = R.matmul(lv, w)
return lv2
"""))
    assert explain(mod, "toy_neg_neg") == [("lv", "operand x is a function parameter"),
                                           ("lv1", "the binding is dead (nothing uses its var)")]
    assert TOY.apply(mod["main"]) is mod["main"]


def test_constants_are_found_through_vars_and_remaps_respect_dataflow_outputs():
    # gv leaves the dataflow block, lv does not: gv = lv * 1 becomes gv = lv
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64()
        with R.dataflow():
            one = R.const(1.0, "float32")
            lv = R.exp(x)
            lv1 = R.multiply(one, lv)
            gv = R.multiply(lv1, one)
            R.output(gv)
        return gv
'''
    out = TOY.apply_module(parse(text).with_attrs())
    gv_binding = out["main"].body.blocks[0].bindings[-1]
    assert gv_binding.var.name_hint == "gv" and gv_binding.value.name_hint == "lv"
    check_well_formed(out)


def test_calls_in_another_dataflow_block_are_not_looked_through():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 3), "float32"), b: R.Tensor((3,), "float32")) -> R.Tensor(("n", 3), "float32"):
        n = T.int64()
        with R.dataflow():
            lv = R.negative(x)
            gv = R.matmul(lv, w)
            R.output(gv)
        with R.dataflow():
            gv1 = R.add(gv, b)
            R.output(gv1)
        return gv1
'''
    mod = parse(text)
    assert TOY.apply(mod["main"]) is mod["main"]
    assert explain(mod, "toy_gemm") == [
        ("gv1", "operand gv is bound in another dataflow block; and swapped: operand b is a function parameter")]


def test_match_cast_is_not_looked_through():
    text = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 3), "float32"), b: R.Tensor((3,), "float32")) -> R.Tensor(("n", 3), "float32"):
        n = T.int64()
        lv = R.matmul(x, w)
        lv1 = R.match_cast(lv, R.Tensor(("n", 3), "float32"))
        lv2 = R.add(lv1, b)
        return lv2
'''
    mod = parse(text)
    assert TOY.apply(mod["main"]) is mod["main"]
    assert "lv1 is bound by a match_cast" in explain(mod, "toy_gemm")[0][1]


def test_patterns_wildcards_alternatives_and_varargs():
    same = is_op("add")(wildcard("a"), wildcard("a"))
    positive = any_of(is_op("exp")(wildcard(), name="inner"), is_op("sigmoid")(wildcard(), name="inner"))
    any_gemm = is_op("nn.relu")(is_op("nn.gemm")(..., name="g"))
    table = RewriteTable("Patterns", [
        Rule("toy_double", same, None, lambda m: make_call("multiply", m["a"], Constant(np.float32(2)))),
        Rule("toy_relu_of_positive", is_op("nn.relu")(positive), None, lambda m: m.var("inner")),
        Rule("toy_gemm_relu", any_gemm, None,
             lambda m: make_call("nn.gemm", *m["g"].args, activation="relu")),
    ])
    mod = parse(toy("""
lv = R.add(x, x)
lv1 = R.add(lv, x)
lv2 = R.sigmoid(lv1)
lv3 = R.nn.relu(lv2)
lv4 = R.nn.gemm(lv3, w)
lv5 = R.nn.relu(lv4)
return lv5
"""))
    out = dead_code_elimination(table.apply_module(mod))
    assert ops_of(out) == ["multiply", "add", "sigmoid", "nn.gemm"]
    assert out["main"].body.blocks[0].bindings[-1].value.attrs["activation"] == "relu"
    assert explain(mod, "toy_double") == [("lv1", "a is lv in one place and x in another")]
    assert explain(mod, "toy_relu_of_positive") == [
        ("lv5", "operand lv4 is R.nn.gemm, not R.exp; or operand lv4 is R.nn.gemm, not R.sigmoid")]
    assert_same_results(mod, out, [{"n": 2}, {"n": 5}])


def test_reasons_name_args_by_their_printed_names():
    x = Var("x", TensorStructInfo((sym("n"), 4), "float32"))
    w = Var("w", TensorStructInfo((4, 3), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x, w]):
        lv = bb.emit(make_call("matmul", x, w), "lv")
        lv_second = bb.emit(make_call("nn.relu", lv), "lv")        # printed as lv_1
        out = bb.emit(make_call("add", lv_second, Constant(np.ones(3, np.float32))), "lv1")
        bb.emit_func_output(out)
    assert explain(bb.get(), "toy_gemm") == [
        ("lv1", "operand lv_1 is R.nn.relu, not R.matmul; and swapped: operand is a constant, not R.matmul")]


def test_live_use_counts_and_printed_names():
    mod = parse(toy("""
lv = R.matmul(x, w)
lv1 = R.nn.relu(lv)
lv_1 = R.add(lv, b)
return lv_1
"""))
    func = mod["main"]
    counts = {v.name_hint: n for v, n in live_use_counts(func).items()}
    assert counts["lv"] == 1          # the relu is dead: its use does not count
    assert counts["lv_1"] == 1 and counts["x"] == 1 and "lv1" not in counts
    names = printed_names(func)
    assert sorted(names.values()) == ["b", "lv", "lv1", "lv_1", "w", "x"]


def test_rules_describe_themselves_and_errors_name_the_problem():
    assert TOY.describe().splitlines()[0] == "toy_neg_neg: negative(negative(x)) -> x."
    assert "toy_gemm" in toy_pass.__doc__ and toy_pass.info.opt_level == 2
    assert find_rule("toy_gemm")[0] is TOY
    with pytest.raises(PassError, match="no rewrite rule named 'nope'"):
        explain(parse(toy("return x")).with_attrs(), "nope")
    with pytest.raises(PassError, match="in tables Toy and Other"):
        RewriteTable("Other", [TOY.rule("toy_neg_neg")])
    with pytest.raises(PassError, match="root must be a call pattern"):
        Rule("toy_bad", wildcard("x"), None, _neg_neg)


def test_one_rule_shape_serves_binding_rules_selected_by_predicate():
    """A Rule whose pattern is a predicate of the node is a binding rule:
    check and rewrite get the node and the pass's state; the first that
    applies rewrites, and the others that matched say why not."""
    small = Rule("small", lambda n: isinstance(n, int), lambda n, limit: None if n < limit else f"{n} >= {limit}",
                 lambda n, limit: n + 1)
    even = Rule("even", lambda n: isinstance(n, int), lambda n, limit: None if n % 2 == 0 else "odd",
                lambda n, limit: n // 2)
    text = Rule("text", lambda n: isinstance(n, str), None, str.upper)
    rules = (small, even, text)
    assert apply_rules(rules, 3, 10) == 4 and apply_rules(rules, 12, 10) == 6 and apply_rules(rules, 13, 10) is None
    assert first_applicable(rules, 12, 10) is even
    assert reasons(rules, 13, 10) == {"small": "13 >= 10", "even": "odd"}     # "text" does not match an int
    with pytest.raises(PassError, match="a table's rule needs a call pattern"):
        RewriteTable("Predicates", [small])
