"""ReorderBindings: independent bindings reordered to lower the peak of live bytes."""

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx
from relaxpack.ir import BlockBuilder, Constant, TensorStructInfo, Var, parse
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ir.expr import MatchCast
from relaxpack.ir.well_formed import check_well_formed
from relaxpack.ops import make_call
from relaxpack.passes import PassContext
from relaxpack.passes.pipeline import optimize_pipeline
from relaxpack.passes.reorder_bindings import peak_live_bytes, reorder_bindings
from relaxpack.runtime import VirtualMachine

from .helpers import assert_same_results

LIGHT = onnx.__path__[0] + "/backend/test/data/light"


def run(mod):
    with PassContext(opt_level=1, check_well_formed=True):
        return reorder_bindings(mod)


def names(mod, func="main"):
    return [b.var.name_hint for block in mod[func].body.blocks for b in block.bindings]


def build(mod):
    """Only legalized: the bytecode runs the bindings in the module's order."""
    return relaxpack.build(mod, opt_level=0)


def lower_bound(mod) -> int:
    return build(mod).metadata["memory_plan"]["lower_bound_bytes"]


def optimized(mod):
    """``mod`` after build's optimization passes: ReorderBindings runs after them,
    as fusion changes which bindings there are."""
    with PassContext(opt_level=2):
        return optimize_pipeline()(mod)


# ---------------------------------------------------------------- before / after texts
BRANCHY = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 256), "float32")) -> R.Tensor((1, 256), "float32"):
        a1: R.Tensor((4, 256), "float32") = R.add(x, R.const([[1.0], [2.0], [3.0], [4.0]], "float32"))
        b1: R.Tensor((8, 256), "float32") = R.multiply(x, R.const([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]], "float32"))
        a2: R.Tensor((1, 256), "float32") = R.sum(a1, axis=(0,), keepdims=True)
        b2: R.Tensor((1, 256), "float32") = R.max(b1, axis=(0,), keepdims=True)
        c: R.Tensor((1, 256), "float32") = R.add(a2, b2)
        return c
"""

# The larger branch first: while it runs, nothing else is live; the smaller
# branch then runs beside one row of the larger's result.
BRANCHY_EXPECTED = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 256), "float32")) -> R.Tensor((1, 256), "float32"):
        b1: R.Tensor((8, 256), "float32") = R.multiply(x, R.const([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]], "float32"))
        b2: R.Tensor((1, 256), "float32") = R.max(b1, axis=(0,), keepdims=True)
        a1: R.Tensor((4, 256), "float32") = R.add(x, R.const([[1.0], [2.0], [3.0], [4.0]], "float32"))
        a2: R.Tensor((1, 256), "float32") = R.sum(a1, axis=(0,), keepdims=True)
        c: R.Tensor((1, 256), "float32") = R.add(a2, b2)
        return c
"""


def test_a_branchy_block_runs_the_larger_branch_first():
    before = parse(BRANCHY)
    after = run(before)
    assert_structural_equal(after, parse(BRANCHY_EXPECTED))
    # a1 + b1 + a2 live together before; then b1 + b2, and the rest is smaller
    assert peak_live_bytes(before["main"]) == (4 + 8 + 1) * 1024
    assert peak_live_bytes(after["main"]) == (8 + 1) * 1024
    assert lower_bound(before) == 13 * 1024 and lower_bound(after) == 9 * 1024


def test_the_pass_is_idempotent_and_keeps_a_module_it_cannot_improve():
    once = run(parse(BRANCHY))
    assert run(once) is once
    chain = relaxpack.from_onnx(small_cnn(), dims={"batch": (1, 8)})
    assert run(chain) is chain


def test_numerics_are_unchanged():
    before = parse(BRANCHY)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1, 256)).astype(np.float32)} for _ in range(3)]
    assert_same_results(before, run(before), feeds=feeds, rtol=0, atol=0)


def test_the_debug_log_reports_the_peak(caplog):
    with caplog.at_level(logging.DEBUG, logger="relaxpack.passes.reorder_bindings"):
        run(parse(BRANCHY))
    assert f"peak live bytes {13 * 1024} -> {9 * 1024}" in caplog.text


BRANCHES = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 256), "float32"), flag: R.Tensor((), "bool")) -> R.Tensor((1, 256), "float32"):
        with R.dataflow():
            a1: R.Tensor((4, 256), "float32") = R.add(x, R.const([[1.0], [2.0], [3.0], [4.0]], "float32"))
            b1: R.Tensor((8, 256), "float32") = R.multiply(x, R.const([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]], "float32"))
            a2: R.Tensor((1, 256), "float32") = R.sum(a1, axis=(0,), keepdims=True)
            b2: R.Tensor((1, 256), "float32") = R.max(b1, axis=(0,), keepdims=True)
            c: R.Tensor((1, 256), "float32") = R.add(a2, b2)
            R.output(c)
        if flag:
            d1: R.Tensor((4, 256), "float32") = R.add(c, R.const([[1.0], [2.0], [3.0], [4.0]], "float32"))
            e1: R.Tensor((8, 256), "float32") = R.multiply(c, R.const([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]], "float32"))
            d2: R.Tensor((1, 256), "float32") = R.sum(d1, axis=(0,), keepdims=True)
            e2: R.Tensor((1, 256), "float32") = R.max(e1, axis=(0,), keepdims=True)
            r1: R.Tensor((1, 256), "float32") = R.add(d2, e2)
            r = r1
        else:
            r = c
        return r
"""


def test_dataflow_blocks_and_if_branches_are_reordered():
    mod = parse(BRANCHES)
    check_well_formed(mod)
    after = run(mod)
    assert names(after)[:5] == ["b1", "b2", "a1", "a2", "c"]
    branch = after["main"].body.blocks[1].bindings[0].value.true_branch
    assert [b.var.name_hint for b in branch.blocks[0].bindings] == ["e1", "e2", "d1", "d2", "r1"]
    x = np.random.default_rng(1).standard_normal((1, 256)).astype(np.float32)
    assert_same_results(mod, after, feeds=[{"x": x, "flag": np.array(v)} for v in (True, False)], rtol=0, atol=0)
    assert run(after) is after


# ---------------------------------------------------------------- what never moves
def test_impure_calls_are_barriers():
    impure = BRANCHY.replace("    @R.function\n", "    @R.function(pure=False)\n").replace(
        "        a2: R.Tensor",
        '        p: R.Tensor((1, 256), "float32") = R.call_packed("test.identity", x, kernel_attrs=None, '
        'sinfo_args=R.Tensor((1, 256), "float32"))\n        a2: R.Tensor')
    mod = parse(impure)
    check_well_formed(mod)
    # without the call, a2 would run before b1; with it, a1 and b1 both reach it
    assert run(mod) is mod
    assert names(run(parse(BRANCHY)))[:2] == ["b1", "b2"]


MATCH_CASTS = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 256), "float32")) -> R.Tensor((1, 256), "float32"):
        k = T.int64(lower=1, upper=4)
        m = T.int64(lower=1, upper=8)
        ta: R.Tensor((4, 256), "float32") = R.add(x, R.const([[1.0], [2.0], [3.0], [4.0]], "float32"))
        tb: R.Tensor((8, 256), "float32") = R.multiply(x, R.const([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]], "float32"))
        mb: R.Tensor(("m", 256), "float32") = R.match_cast(tb, R.Tensor(("m", 256), "float32"))
        ma: R.Tensor(("k", 256), "float32") = R.match_cast(ta, R.Tensor(("k", 256), "float32"))
        ra: R.Tensor((1, 256), "float32") = R.sum(ma, axis=(0,), keepdims=True)
        rb: R.Tensor((1, 256), "float32") = R.max(mb, axis=(0,), keepdims=True)
        c: R.Tensor((1, 256), "float32") = R.add(ra, rb)
        return c
"""

# The best order ignoring the casts runs branch a first (ta, ma, ra, ...),
# which would check ma before mb; keeping the casts in order, branch b goes first.
MATCH_CASTS_EXPECTED = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 256), "float32")) -> R.Tensor((1, 256), "float32"):
        k = T.int64(lower=1, upper=4)
        m = T.int64(lower=1, upper=8)
        tb: R.Tensor((8, 256), "float32") = R.multiply(x, R.const([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]], "float32"))
        mb: R.Tensor(("m", 256), "float32") = R.match_cast(tb, R.Tensor(("m", 256), "float32"))
        rb: R.Tensor((1, 256), "float32") = R.max(mb, axis=(0,), keepdims=True)
        ta: R.Tensor((4, 256), "float32") = R.add(x, R.const([[1.0], [2.0], [3.0], [4.0]], "float32"))
        ma: R.Tensor(("k", 256), "float32") = R.match_cast(ta, R.Tensor(("k", 256), "float32"))
        ra: R.Tensor((1, 256), "float32") = R.sum(ma, axis=(0,), keepdims=True)
        c: R.Tensor((1, 256), "float32") = R.add(ra, rb)
        return c
"""


def test_match_casts_keep_their_order():
    before = parse(MATCH_CASTS)
    after = run(before)
    assert_structural_equal(after, parse(MATCH_CASTS_EXPECTED))
    casts = [b.var.name_hint for b in after["main"].body.blocks[0].bindings if isinstance(b, MatchCast)]
    assert casts == ["mb", "ma"]
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((1, 256)).astype(np.float32)}]
    assert_same_results(before, after, feeds=feeds, rtol=0, atol=0)


DIM_USER = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((1, 256), "float32")) -> R.Tensor((1, 1), "float32"):
        k = T.int64(lower=1, upper=8)
        t: R.Tensor((8, 256), "float32") = R.multiply(x, R.const([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [8.0]], "float32"))
        m: R.Tensor(("k", 256), "float32") = R.match_cast(t, R.Tensor(("k", 256), "float32"))
        z: R.Tensor((SHAPE), "float32") = R.broadcast_to(x, R.shape([SHAPE]))
        zs: R.Tensor((1, 256), "float32") = R.sum(z, axis=(0,), keepdims=True)
        zc: R.Tensor((256, 1), "float32") = R.permute_dims(zs, axes=(1, 0))
        w: R.Tensor(("k", 1), "float32") = R.matmul(m, zc, out_dtype=None)
        r: R.Tensor((1, 1), "float32") = R.sum(w, axis=(0,), keepdims=True)
        return r
"""


def test_a_binding_naming_a_dim_stays_after_the_match_cast_binding_it():
    # z would best run first, before t is live; but its shape names k, which
    # the cast binds, so it cannot move before the cast
    with_dim = parse(DIM_USER.replace("SHAPE", "k, 256"))
    assert run(with_dim) is with_dim
    before = parse(DIM_USER.replace("SHAPE", "8, 256"))
    static = run(before)
    assert names(static) == ["z", "zs", "zc", "t", "m", "w", "r"]
    x = np.random.default_rng(3).standard_normal((1, 256)).astype(np.float32)
    assert_same_results(before, static, feeds=[{"x": x}], rtol=0, atol=0)


# ---------------------------------------------------------------- the search is exact on small blocks
def random_program(seed: int, size: int = 5):
    """Random branchy programs over (rows, 64) tensors: grow, shrink, combine."""
    rng = np.random.default_rng(seed)
    x = Var("x", TensorStructInfo((1, 64), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        values, used = [x], set()
        for _ in range(size - 1):
            kind = rng.integers(3)
            small = [v for v in values if v.struct_info.shape[0] == 1]
            if kind == 0 or len(values) == 1:
                src = small[rng.integers(len(small))]
                rows = int(rng.integers(2, 16))
                v = bb.emit(make_call("multiply", src, Constant(np.ones((rows, 1), np.float32))))
            elif kind == 1:
                src = values[rng.integers(len(values))]
                v = bb.emit(make_call("sum", src, axis=(0,), keepdims=True))
            else:
                a, b = (small[i] for i in rng.integers(len(small), size=2))
                src = a
                v = bb.emit(make_call("add", a, b))
                used.add(b)
            used.add(src)
            values.append(v)
        sinks = [bb.emit(make_call("sum", v, axis=(0,), keepdims=True)) for v in values[1:] if v not in used]
        out = sinks[0]
        for s in sinks[1:]:
            out = bb.emit(make_call("add", out, s))
        bb.emit_func_output(out)
    return bb.get()


def topological_orders(bindings):
    defined = {b.var for b in bindings}

    def uses(b):
        return {a for a in getattr(b.value, "args", ()) if a in defined}

    def rec(done, rest):
        if not rest:
            yield list(done)
            return
        for i, b in enumerate(rest):
            if uses(b) <= {d.var for d in done}:
                yield from rec(done + [b], rest[:i] + rest[i + 1:])
    yield from rec([], list(bindings))


@pytest.mark.parametrize("seed", range(12))
def test_small_blocks_get_an_order_of_smallest_peak(seed):
    mod = random_program(seed)
    func = mod["main"]
    block = func.body.blocks[0]
    best = min(peak_live_bytes(func.replace(body=func.body.replace(blocks=(block.replace(bindings=tuple(o)),))))
               for o in topological_orders(block.bindings))
    after = run(mod)
    assert peak_live_bytes(after["main"]) == best
    assert (after is mod) == (peak_live_bytes(func) == best)
    x = np.random.default_rng(seed).standard_normal((1, 64)).astype(np.float32)
    assert_same_results(mod, after, feeds=[{"x": x}], rtol=0, atol=0)


# ---------------------------------------------------------------- models
def inception_module(seed: int = 0) -> onnx.ModelProto:
    """An input feeding four branches (conv -> relu [-> conv]) of different widths,
    concatenated; the nodes interleaved across branches (all first convs, then
    all relus, then the second convs), as a breadth-first exporter writes them."""
    rng = np.random.default_rng(seed)
    inits = []

    def weight(name, *shape):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:])))
                                             .astype(np.float32), name))
        return name

    branches = [(1, 16, None), (1, 48, (3, 32)), (1, 64, (3, 16)), (3, 24, (1, 8))]
    first, relus, second, outs = [], [], [], []
    for i, (k1, c1, tail) in enumerate(branches):
        first.append(helper.make_node("Conv", ["x", weight(f"w{i}a", c1, 16, k1, k1), weight(f"b{i}a", c1)],
                                      [f"c{i}a"], pads=[k1 // 2] * 4, name=f"conv{i}a"))
        relus.append(helper.make_node("Relu", [f"c{i}a"], [f"r{i}"], name=f"relu{i}"))
        if tail is None:
            outs.append(f"r{i}")
            continue
        k2, c2 = tail
        second.append(helper.make_node("Conv", [f"r{i}", weight(f"w{i}b", c2, c1, k2, k2), weight(f"b{i}b", c2)],
                                       [f"c{i}b"], pads=[k2 // 2] * 4, name=f"conv{i}b"))
        outs.append(f"c{i}b")
    concat = helper.make_node("Concat", outs, ["y"], axis=1, name="concat")
    graph = helper.make_graph(first + relus + second + [concat], "inception_module",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 72, 28, 28])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("optimize", [False, True], ids=["imported", "optimized"])
def test_an_inception_module_needs_less_memory_and_computes_the_same(optimize):
    model = inception_module()
    before = relaxpack.from_onnx(model)
    before = optimized(before) if optimize else before
    after = run(before)
    exe_before, exe_after = build(before), build(after)
    lb_before = exe_before.metadata["memory_plan"]["lower_bound_bytes"]
    lb_after = exe_after.metadata["memory_plan"]["lower_bound_bytes"]
    assert lb_after < lb_before
    # the cost model is the planner's: its peak is the plan's lower bound
    assert peak_live_bytes(before["main"]) == lb_before and peak_live_bytes(after["main"]) == lb_after
    assert exe_after.metadata["memory_plan"]["arena_bytes"] < exe_before.metadata["memory_plan"]["arena_bytes"]
    session = onnxruntime_session(model)
    vm = VirtualMachine(exe_after)
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal((1, 16, 28, 28)).astype(np.float32)
        diffs = compare_outputs(["y"], vm.run({"x": x}), session.run(None, {"x": x}), 1e-4, 1e-5)
        assert diffs[0].passed, diffs
    assert run(after) is after


@pytest.mark.parametrize("name", ["small_cnn", "inception_v1", "densenet121"])
def test_the_lower_bound_of_real_models_never_grows(name):
    if name == "small_cnn":
        model, dims = small_cnn(), {"batch": (1, 8)}
    else:
        model, dims = f"{LIGHT}/light_{name}.onnx", None
    imported = relaxpack.from_onnx(model, dims=dims)
    for before in (imported, optimized(imported)):
        after = run(before)
        lb_before, lb_after = lower_bound(before), lower_bound(after)
        assert lb_after <= lb_before
        assert peak_live_bytes(before["main"]) == lb_before and peak_live_bytes(after["main"]) == lb_after
        if name != "small_cnn":  # a chain has nothing to reorder; these have branches
            assert lb_after < lb_before


def test_symbolic_dims_count_at_their_upper_bounds():
    # attention: computing the values after the scores keeps them out of the
    # (batch, heads, seq, seq) peak; sizes at batch=4, seq=128 as the planner's
    before = relaxpack.from_onnx(transformer_block_onnx(), dims={"batch": (1, 4), "seq": (1, 128)})
    after = run(before)
    assert peak_live_bytes(before["main"]) == lower_bound(before) == 2162688
    assert peak_live_bytes(after["main"]) == lower_bound(after) == 2097152
    rng = np.random.default_rng(4)
    assert_same_results(before, after, feeds=[{"x": rng.standard_normal((b, s, 32)).astype(np.float32)}
                                        for b, s in ((1, 5), (4, 128))], rtol=0, atol=0)


def test_dims_without_a_bound_count_at_64():
    text = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor((1, 4), "float32"):
        n = T.int64()
        a: R.Tensor(("n", 4), "float32") = R.exp(x)
        b: R.Tensor((1, 4), "float32") = R.sum(a, axis=(0,), keepdims=True)
        return b
"""
    assert peak_live_bytes(parse(text)["main"]) == 64 * 4 * 4
    bounded = text.replace("n = T.int64()", "n = T.int64(lower=1, upper=1000)")
    assert peak_live_bytes(parse(bounded)["main"]) == 1000 * 4 * 4
