"""FuseOps: elementwise chains and trees (and a matmul/conv producer before
them) become Primitive functions, called once; LowerFusedFunctions then
makes each call one fused_elementwise kernel call."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx
from relaxpack.ir import parse
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ir.well_formed import check_well_formed
from relaxpack.passes import PassContext
from relaxpack.passes.fuse_ops import fuse_ops
from relaxpack.passes.lower_fused import lower_fused_functions
from relaxpack.passes.pipeline import optimize_pipeline
from relaxpack.runtime import VirtualMachine

from .helpers import random_inputs

MODELS = Path(__file__).resolve().parents[1] / "models"
PRIMITIVE = 'R.func_attr({"Primitive": True})'


def fuse(mod):
    check_well_formed(mod)
    with PassContext(opt_level=2, check_well_formed=True):
        return fuse_ops(mod)


def build(mod):
    """Build ``mod`` as it is: fused calls lowered, no other optimization."""
    with PassContext(opt_level=2, check_well_formed=True):
        mod = lower_fused_functions(mod)
    return relaxpack.build(mod, opt_level=0)


def assert_fuses(before: str, expected: str, dims=({"n": 1}, {"n": 7})):
    """FuseOps turns ``before`` into ``expected``; running it again changes
    nothing; the text reads back; both compute the same on random inputs."""
    mod = parse(before)
    out = fuse(mod)
    assert_structural_equal(out, parse(expected).with_attrs(stage="optimize"))
    assert_structural_equal(fuse(out), out)
    assert_structural_equal(parse(out.script()), out)
    vm_before, vm_after = VirtualMachine(relaxpack.build(mod, opt_level=0)), VirtualMachine(build(out))
    rng = np.random.default_rng(0)
    for d in dims:
        feeds = random_inputs(mod, d, rng, low=-200, high=200)
        want, got = vm_before.run(feeds), vm_after.run(feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    return out


def module(*functions: str) -> str:
    return "@I.ir_module\nclass Module:\n" + "\n".join(functions)


X = 'x: R.Tensor(("n", 4), "float32")'
Y = 'y: R.Tensor((4,), "float32")'
RET = '-> R.Tensor(("n", 4), "float32")'


def func(name: str, params: str, body: str, ret: str = RET, primitive: bool = False) -> str:
    head = f"    @R.function\n    def {name}({params}) {ret}:\n        n = T.int64()\n"
    if primitive:
        head += f"        {PRIMITIVE}\n"
    return head + "\n".join("        " + line for line in body.strip().splitlines()) + "\n"


def fused_body(*lines: str) -> str:
    *steps, result = lines
    return "\n".join(["with R.dataflow():", *("    " + s for s in steps), f"    R.output({result})",
                      f"return {result}"])


# ---------------------------------------------------------------- before / after


def test_a_chain_becomes_one_call():
    out = assert_fuses(
        module(func("main", f"{X}, {Y}", """
a = R.exp(x)
b = R.add(a, y)
c = R.tanh(b)
return c
""")),
        module(func("fused_exp_add_tanh", f"{X}, {Y}", fused_body("a = R.exp(x)", "b = R.add(a, y)",
                                                                 "c = R.tanh(b)", "c"), primitive=True),
               func("main", f"{X}, {Y}", """
c = cls.fused_exp_add_tanh(x, y)
return c
""")))
    text = out.script()
    assert "cls.fused_exp_add_tanh(x, y)" in text and PRIMITIVE in text


def test_a_tree_becomes_one_call():
    assert_fuses(
        module(func("main", X, """
with R.dataflow():
    a = R.exp(x)
    b = R.tanh(x)
    c = R.add(a, b)
    R.output(c)
return c
""")),
        module(func("fused_exp_tanh_add", X, fused_body("a = R.exp(x)", "b = R.tanh(x)", "c = R.add(a, b)", "c"),
                    primitive=True),
               func("main", X, """
with R.dataflow():
    c = cls.fused_exp_tanh_add(x)
    R.output(c)
return c
""")))


def test_a_value_used_outside_ends_its_group():
    # b is read by the softmax too: it is a group's result, not fused into tanh's group
    assert_fuses(
        module(func("main", f"{X}, {Y}", """
a = R.exp(x)
b = R.add(a, y)
c = R.tanh(b)
s = R.nn.softmax(b, axis=-1)
d = R.add(c, s)
return d
""")),
        module(func("fused_exp_add", f"{X}, {Y}", fused_body("a = R.exp(x)", "b = R.add(a, y)", "b"), primitive=True),
               func("fused_tanh_add", 'b: R.Tensor(("n", 4), "float32"), s: R.Tensor(("n", 4), "float32")',
                    fused_body("c = R.tanh(b)", "d = R.add(c, s)", "d"), primitive=True),
               func("main", f"{X}, {Y}", """
b = cls.fused_exp_add(x, y)
s = R.nn.softmax(b, axis=-1)
d = cls.fused_tanh_add(b, s)
return d
""")))


def test_returned_or_single_ops_are_not_fused():
    text = module(func("main", X, """
a = R.exp(x)
b = R.tanh(a)
s = R.nn.softmax(b, axis=-1)
m = R.matmul(s, R.const([[1.0], [2.0], [3.0], [4.0]], "float32"))
r = R.sigmoid(m)
return (a, r)
""", ret='-> R.Tuple(R.Tensor(("n", 4), "float32"), R.Tensor(("n", 1), "float32"))'))
    # a is returned (so exp stays alone), tanh is alone before the softmax; matmul + sigmoid fuse
    out = fuse(parse(text))
    assert sorted(out.functions) == ["fused_matmul_sigmoid", "main"]
    assert "R.exp(x)" in out.script() and "R.tanh(a)" in out.script()


def test_matmul_with_its_elementwise_tail():
    W = 'w: R.Tensor((4, 3), "float32"), b: R.Tensor((3,), "float32")'
    ret = '-> R.Tensor(("n", 3), "float32")'
    assert_fuses(
        module(func("main", f"{X}, {W}", """
m = R.matmul(x, w)
a = R.add(m, b)
r = R.nn.relu(a)
return r
""", ret=ret)),
        module(func("fused_matmul_add_relu", f"{X}, {W}",
                    fused_body("m = R.matmul(x, w)", "a = R.add(m, b)", "r = R.nn.relu(a)", "r"),
                    ret=ret, primitive=True),
               func("main", f"{X}, {W}", "r = cls.fused_matmul_add_relu(x, w, b)\nreturn r", ret=ret)))


def test_conv_with_its_elementwise_tail():
    params = 'x: R.Tensor(("n", 2, 5, 5), "float32"), w: R.Tensor((3, 2, 3, 3), "float32"), ' \
             'b: R.Tensor((1, 3, 1, 1), "float32")'
    ret = '-> R.Tensor(("n", 3, 5, 5), "float32")'
    assert_fuses(
        module(func("main", params, """
c = R.nn.conv(x, w, padding=1)
a = R.add(c, b)
r = R.nn.silu(a)
return r
""", ret=ret)),
        module(func("fused_conv_add_silu", params,
                    fused_body("c = R.nn.conv(x, w, padding=1)", "a = R.add(c, b)", "r = R.nn.silu(a)", "r"),
                    ret=ret, primitive=True),
               func("main", params, "r = cls.fused_conv_add_silu(x, w, b)\nreturn r", ret=ret)))


def test_a_producer_joins_only_a_tail_of_its_shape():
    # the add broadcasts the (n, 3) product up to (2, n, 3): matmul stays out of the group
    params = f'{X}, w: R.Tensor((4, 3), "float32"), z: R.Tensor((2, "n", 3), "float32")'
    ret = '-> R.Tensor((2, "n", 3), "float32")'
    assert_fuses(
        module(func("main", params, """
m = R.matmul(x, w)
a = R.add(m, z)
r = R.nn.relu(a)
return r
""", ret=ret)),
        module(func("fused_add_relu", 'm: R.Tensor(("n", 3), "float32"), z: R.Tensor((2, "n", 3), "float32")',
                    fused_body("a = R.add(m, z)", "r = R.nn.relu(a)", "r"), ret=ret, primitive=True),
               func("main", params, """
m = R.matmul(x, w)
r = cls.fused_add_relu(m, z)
return r
""", ret=ret)))


def test_a_producer_reads_only_parameters():
    params = f'{X}, w: R.Tensor((4, 4), "float32")'
    assert_fuses(
        module(func("main", params, """
e = R.exp(x)
m = R.matmul(e, w)
r = R.nn.relu(m)
return r
""")),
        module(func("fused_matmul_relu", 'e: R.Tensor(("n", 4), "float32"), w: R.Tensor((4, 4), "float32")',
                    fused_body("m = R.matmul(e, w)", "r = R.nn.relu(m)", "r"), primitive=True),
               func("main", params, """
e = R.exp(x)
r = cls.fused_matmul_relu(e, w)
return r
""")))


def test_a_group_grows_only_while_one_temporary_suffices():
    # (exp y + tanh y) * (sin x + cos x) would hold three values at once
    A = 'a: R.Tensor((4,), "float32")'
    assert_fuses(
        module(func("main", f"{X}, {Y}", """
e = R.exp(y)
t = R.tanh(y)
a = R.add(e, t)
s = R.sin(x)
c = R.cos(x)
b = R.add(s, c)
m = R.multiply(a, b)
return m
""")),
        module(func("fused_exp_tanh_add", Y, fused_body("e = R.exp(y)", "t = R.tanh(y)", "a = R.add(e, t)", "a"),
                    ret='-> R.Tensor((4,), "float32")', primitive=True),
               func("fused_sin_cos_add_multiply", f"{X}, {A}",
                    fused_body("s = R.sin(x)", "c = R.cos(x)", "b = R.add(s, c)", "m = R.multiply(a, b)", "m"),
                    primitive=True),
               func("main", f"{X}, {Y}", """
a = cls.fused_exp_tanh_add(y)
m = cls.fused_sin_cos_add_multiply(x, a)
return m
""")))


def test_a_group_stays_within_one_temporary_when_out_reuses_an_input(caplog):
    # p dies in the group with the result's shape: the memory planner may make
    # out *be* p, which then stays in out until its last read; exp(p) would
    # need a second temporary, so it stays out of the group (and the log says why)
    caplog.set_level("DEBUG", logger="relaxpack.passes.fuse_ops")
    P = 'p: R.Tensor(("n", 4), "float32")'
    E = 'e: R.Tensor(("n", 4), "float32")'
    assert_fuses(
        module(func("main", X, """
p = R.nn.softmax(x, axis=-1)
e = R.exp(p)
t = R.tanh(p)
m = R.multiply(e, t)
r = R.add(m, p)
return r
""")),
        module(func("fused_tanh_multiply_add", f"{P}, {E}",
                    fused_body("t = R.tanh(p)", "m = R.multiply(e, t)", "r = R.add(m, p)", "r"), primitive=True),
               func("main", X, """
p = R.nn.softmax(x, axis=-1)
e = R.exp(p)
r = cls.fused_tanh_multiply_add(p, e)
return r
""")))
    assert "e stays out of r's group: it would need a second temporary when out reuses p" in caplog.text


def test_mask_where_with_a_bool_intermediate():
    params = 'x: R.Tensor((2, "n", "n"), "float32"), m: R.Tensor(("n", "n"), "bool")'
    ret = '-> R.Tensor((2, "n", "n"), "float32")'
    fused_params = 'x: R.Tensor((2, "n", "n"), "float32"), c: R.Tensor((), "float32"), ' \
                   'm: R.Tensor(("n", "n"), "bool"), c1: R.Tensor((), "float32")'
    assert_fuses(
        module(func("main", params, """
d = R.divide(x, R.const(2.0, "float32"))
k = R.logical_not(m)
w = R.where(k, R.const(-1000.0, "float32"), d)
return w
""", ret=ret)),
        module(func("fused_divide_logical_not_where", fused_params,
                    fused_body("d = R.divide(x, c)", "k = R.logical_not(m)", "w = R.where(k, c1, d)", "w"),
                    ret=ret, primitive=True),
               func("main", params, """
w = cls.fused_divide_logical_not_where(x, R.const(2.0, "float32"), m, R.const(-1000.0, "float32"))
return w
""", ret=ret)))


def test_casts_fuse():
    ret = '-> R.Tensor(("n", 4), "float16")'
    assert_fuses(
        module(func("main", X, """
h = R.astype(x, dtype="float16")
s = R.sigmoid(h)
return s
""", ret=ret)),
        module(func("fused_astype_sigmoid", X, fused_body('h = R.astype(x, dtype="float16")', "s = R.sigmoid(h)", "s"),
                    ret=ret, primitive=True),
               func("main", X, "s = cls.fused_astype_sigmoid(x)\nreturn s", ret=ret)))


def test_identical_groups_share_a_function_and_others_are_numbered():
    params = f'{X}, z: R.Tensor(("n", 4), "float32"), v: R.Tensor(("n", 8), "float32")'
    V = 'v: R.Tensor(("n", 8), "float32")'
    ret = '-> R.Tuple(R.Tensor(("n", 4), "float32"), R.Tensor(("n", 4), "float32"), R.Tensor(("n", 8), "float32"))'
    assert_fuses(
        module(func("main", params, """
a = R.exp(x)
b = R.negative(a)
c = R.exp(z)
d = R.negative(c)
e = R.exp(v)
f = R.negative(e)
return (b, d, f)
""", ret=ret)),
        module(func("fused_exp_negative", X, fused_body("a = R.exp(x)", "b = R.negative(a)", "b"), primitive=True),
               func("fused_exp_negative_1", V, fused_body("e = R.exp(v)", "f = R.negative(e)", "f"),
                    ret='-> R.Tensor(("n", 8), "float32")', primitive=True),
               func("main", params, """
b = cls.fused_exp_negative(x)
d = cls.fused_exp_negative(z)
f = cls.fused_exp_negative_1(v)
return (b, d, f)
""", ret=ret)))


def test_groups_inside_if_branches():
    params = f'{X}, k: R.Tensor((), "bool")'
    assert_fuses(
        module(func("main", params, """
if k:
    a = R.exp(x)
    r = R.sigmoid(a)
else:
    r = R.negative(x)
return r
""")),
        module(func("fused_exp_sigmoid", X, fused_body("a = R.exp(x)", "r = R.sigmoid(a)", "r"), primitive=True),
               func("main", params, """
if k:
    r = cls.fused_exp_sigmoid(x)
else:
    r = R.negative(x)
return r
""")), dims=({"n": 3},))


def test_spans_of_the_fused_ops_go_to_the_call():
    mod = relaxpack.from_onnx(onnx.load(str(MODELS / "gpt_small.onnx")))
    text = fuse(mod).script(show_meta=False)
    line = next(s for s in text.splitlines() if "= cls.fused_matmul_add_divide_erf" in s)
    assert "/blocks/blocks.0/mlp/mlp.0/MatMul" in line and "/blocks/blocks.0/mlp/mlp.1/Mul_1" in line


# ---------------------------------------------------------------- lowering and models


@pytest.mark.parametrize("name", ["transformer_block", "gpt_small", "small_cnn"])
def test_models_round_trip_and_are_a_fixed_point(name):
    model = {"transformer_block": transformer_block_onnx, "small_cnn": small_cnn}.get(name)
    mod = relaxpack.from_onnx(model() if model else onnx.load(str(MODELS / f"{name}.onnx")))
    out = fuse(mod)
    assert_structural_equal(fuse(out), out)
    assert_structural_equal(parse(out.script()), out)


def feeds_for(name, rng):
    if name == "gpt_small":
        return [{"ids": rng.integers(0, 128, (b, s)).astype(np.int64)} for b, s in [(1, 5), (2, 16)]]
    if name == "transformer_block":
        return [{"x": rng.standard_normal((b, s, 32)).astype(np.float32)} for b, s in [(1, 3), (2, 9)]]
    return [{"input": rng.standard_normal((b, 3, 32, 32)).astype(np.float32)} for b in (1, 3)]


@pytest.mark.parametrize("name, imported, optimized", [
    # kernel calls (unfused, fused): straight from the importer, and after the opt-level-2 rewrites
    # (reshapes of intermediates are views, not kernel calls)
    ("transformer_block", (25, 15), (9, 7)),    # matmul + bias (+ relu / residual), head transposes, q/k/v in
                                                # one product, the scores / sqrt(d), softmax and products in
                                                # one nn.attention
    ("gpt_small", (66, 40), (27, 23)),          # + GELU's five ops, the causal mask's where (in the attention), the split
                                                # QKV product as one batched product of views (imported:
                                                # two shape-only chains stay apart, for the shape memo;
                                                # the reshapes of its split's pieces are views)
    ("small_cnn", (13, 10), (6, 6)),            # conv + bias + relu: FuseBiasActivation has it all
])
def test_models_use_fewer_kernel_calls_and_match_onnxruntime(name, imported, optimized):
    model = {"transformer_block": transformer_block_onnx, "small_cnn": small_cnn}.get(name)
    model = model() if model else onnx.load(str(MODELS / f"{name}.onnx"))
    mod = relaxpack.from_onnx(model)
    with PassContext(opt_level=2, disabled_passes=["FuseOps"]):  # the -O2 rewrites without fusion
        rewritten = optimize_pipeline()(mod)
    counts = {}
    for key, start in (("imported", mod), ("optimized", rewritten)):
        counts[key] = (build(start).kernel_call_count(), build(fuse(start)).kernel_call_count())
    assert counts == {"imported": imported, "optimized": optimized}
    session = onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    vm = VirtualMachine(build(fuse(rewritten)))
    for feeds in feeds_for(name, np.random.default_rng(5)):
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), 1e-4, 1e-4)
        assert all(d.passed for d in diffs), diffs


def _chain(ops, dtype="float32"):
    from relaxpack.ir import BlockBuilder, Constant, TensorStructInfo, Var
    from relaxpack.ops import make_call
    x = Var("x", TensorStructInfo((3, 4), dtype))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            h = x
            for op in ops:
                h = bb.emit(make_call(op, h, Constant(np.full(4, 0.5, dtype))))
            gv = bb.emit_output(h, "y")
        bb.emit_func_output(gv)
    return bb.get()


@pytest.mark.parametrize("ops, dtype, calls", [
    (("add", "multiply"), "float32", 2),             # two bare ufunc calls cost less than one fused call
    (("add", "multiply", "subtract"), "float32", 1),
    (("add", "maximum"), "float32", 1),              # maximum's kernel is no bare ufunc call
    (("add", "multiply"), "float16", 1),             # float16 pairs fuse, to compute in float32
])
def test_a_pair_of_bare_ufunc_ops_stays_unfused(ops, dtype, calls):
    import relaxpack
    from relaxpack.runtime import VirtualMachine
    exe = relaxpack.build(_chain(ops, dtype), opt_level=2)
    assert exe.kernel_call_count() == calls
    x = np.linspace(-1, 1, 12).reshape(3, 4).astype(dtype)
    want = x.astype(np.float32)
    for op in ops:
        want = getattr(np, op)(want, np.float32(0.5))
    np.testing.assert_allclose(VirtualMachine(exe).run({"x": x})["y"].astype(np.float32), want, rtol=1e-3)


def test_a_shape_only_value_stays_out_of_a_data_group():
    """A scale made from a symbolic dim (a pool's count) is not fused into the chain that reads the
    data: on its own the shape memo computes it once per input shape. Its own steps still fuse,
    and a chain of constants alone (FoldConstant's) or of a static shape is not held apart."""
    out = assert_fuses(
        module(func("main", X, """
with R.dataflow():
    d = R.shape_to_tensor(R.shape([n]), scalar=True)
    f = R.astype(d, dtype="float32")
    g = R.multiply(f, R.const(0.5, "float32"))
    h = R.divide(R.const(3.0, "float32"), g)
    a = R.multiply(x, h)
    b = R.round(a)
    R.output(b)
return b
""")),
        module(func("fused_astype_multiply_divide",
                    'd: R.Tensor((), "int64"), c: R.Tensor((), "float32"), c_1: R.Tensor((), "float32")',
                    fused_body('f = R.astype(d, dtype="float32")', "g = R.multiply(f, c)", "h = R.divide(c_1, g)", "h"),
                    ret='-> R.Tensor((), "float32")', primitive=True),
               func("fused_multiply_round", f'{X}, h: R.Tensor((), "float32")',
                    fused_body("a = R.multiply(x, h)", "b = R.round(a)", "b"), primitive=True),
               func("main", X, """
with R.dataflow():
    d = R.shape_to_tensor(R.shape([n]), scalar=True)
    h = cls.fused_astype_multiply_divide(d, R.const(0.5, "float32"), R.const(3.0, "float32"))
    b = cls.fused_multiply_round(x, h)
    R.output(b)
return b
""")))
    static = fuse(parse(module(func("main", X, """
with R.dataflow():
    d = R.shape_to_tensor(R.shape([4]), scalar=True)
    f = R.astype(d, dtype="float32")
    g = R.multiply(f, R.const(0.5, "float32"))
    a = R.multiply(x, g)
    b = R.round(a)
    R.output(b)
return b
"""))))
    assert "fused_astype_multiply_multiply_round" in static.script()
    assert "cls.fused_astype_multiply_divide(d," in out.script()
    branch = fuse(parse(module(func("main", f'{X}, k: R.Tensor((), "bool")', """
if k:
    d = R.shape_to_tensor(R.shape([n]), scalar=True)
    f = R.astype(d, dtype="float32")
    a = R.multiply(x, f)
    r = R.round(a)
else:
    r = R.negative(x)
return r
"""))))     # the shape memo keeps no value of a branch: fused as before
    assert "fused_astype_multiply_round" in branch.script()
