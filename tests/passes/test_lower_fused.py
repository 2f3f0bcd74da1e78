"""LowerFusedFunctions: a call of a fused elementwise function becomes one
call_tir of the fused_elementwise kernel with the function's recipe."""

from __future__ import annotations

import numpy as np

import relaxpack
from relaxpack.ir import parse
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ir.well_formed import check_well_formed
from relaxpack.passes import PassContext, Sequential
from relaxpack.passes.fuse_ops import fuse_ops
from relaxpack.passes.legalize import legalize
from relaxpack.passes.lower_fused import lower_fused_functions
from relaxpack.runtime import VirtualMachine, load
from relaxpack.runtime.kernels import KERNELS, Kernel

from .test_fuse_ops import PRIMITIVE, X, Y, func, fused_body, module


def lower(mod):
    check_well_formed(mod)
    with PassContext(opt_level=2, check_well_formed=True):
        return lower_fused_functions(mod)


FUSED_TREE = module(
    func("fused_exp_tanh_add", f"{X}, {Y}",
         fused_body("a = R.exp(x)", "t = R.tanh(x)", "b = R.add(a, t)", "c = R.add(b, y)", "c"), primitive=True),
    func("main", f"{X}, {Y}", """
with R.dataflow():
    c = cls.fused_exp_tanh_add(x, y)
    d = R.nn.softmax(c, axis=-1)
    R.output(d)
return d
"""))

TREE_RECIPE = ('(("exp", (("p", 0),), (), "float32", True, (True,)), '
               '("tanh", (("p", 0),), (), "float32", True, (True,)), '
               '("add", (("s", 0), ("s", 1)), (), "float32", True, (True, True)), '
               '("add", (("s", 2), ("p", 1)), (), "float32", True, (True, False)))')


def test_a_fused_call_becomes_one_kernel_call():
    expected = module(func("main", f"{X}, {Y}", f"""
with R.dataflow():
    c = R.call_tir("fused_elementwise", (x, y), kernel_attrs=(("recipe", {TREE_RECIPE}),),
                   out_sinfo=R.Tensor(("n", 4), "float32"))
    d = R.nn.softmax(c, axis=-1)
    R.output(d)
return d
"""))
    mod = parse(FUSED_TREE)
    out = lower(mod)
    assert_structural_equal(out, parse(expected))
    assert_structural_equal(lower(out), out)
    assert_structural_equal(parse(out.script()), out)


def test_producer_recipe_with_attributes_and_broadcast_inputs():
    params = 'x: R.Tensor(("n", 2, 5, 5), "float32"), w: R.Tensor((3, 2, 3, 3), "float32"), ' \
             'b: R.Tensor((1, 3, 1, 1), "float32")'
    ret = '-> R.Tensor(("n", 3, 5, 5), "float32")'
    mod = parse(module(func("main", params, """
c = R.nn.conv(x, w, padding=1)
a = R.add(c, b)
r = R.nn.leakyrelu(a, alpha=0.25)
return r
""", ret=ret)))
    with PassContext(opt_level=2):
        out = lower(fuse_ops(mod))
    assert list(out.functions) == ["main"]
    call = out["main"].body.blocks[0].bindings[0].value
    (name, recipe), = call.attrs["kernel_attrs"]
    assert name == "recipe" and call.args[0].global_symbol == "fused_elementwise"
    assert recipe == (
        ("nn.conv", (("p", 0), ("p", 1)),
         (("data_layout", "NCHW"), ("dilation", 1), ("exact", False), ("groups", 1), ("out_layout", None),
          ("padding", 1), ("strides", 1)), "float32",
         True, (False, False)),
        ("add", (("s", 0), ("p", 2)), (), "float32", True, (True, False)),
        ("nn.leakyrelu", (("s", 1),), (("alpha", 0.25),), "float32", True, (True,)),
    )
    x = np.random.default_rng(0).standard_normal((2, 2, 5, 5)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((1, 3, 1, 1)).astype(np.float32)
    want = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x, "w": w, "b": b})
    got = VirtualMachine(relaxpack.build(out, opt_level=0)).run({"x": x, "w": w, "b": b})
    np.testing.assert_array_equal(got["r"], want["r"])


def test_other_primitive_functions_are_left_alone():
    text = module(
        func("fused_softmax_exp", X, fused_body("s = R.nn.softmax(x, axis=-1)", "e = R.exp(s)", "e"), primitive=True),
        func("main", X, "e = cls.fused_softmax_exp(x)\nreturn e"))
    mod = parse(text)
    assert_structural_equal(lower(mod), mod)


def test_works_before_or_after_legalize():
    mod = parse(FUSED_TREE)
    with PassContext(opt_level=2, check_well_formed=True):
        first = Sequential([lower_fused_functions, legalize])(mod)
        second = Sequential([legalize, lower_fused_functions])(mod)
    assert_structural_equal(first, second)
    assert PRIMITIVE not in first.script()


def test_the_recipe_survives_an_archive(tmp_path):
    # the recipe is plain data: saved in the JSON manifest, read back as tuples
    mod = parse(FUSED_TREE)
    exe = relaxpack.build(lower(mod), opt_level=0)
    exe.save(str(tmp_path / "m.rpk"))
    loaded = load(str(tmp_path / "m.rpk"))
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((3, 4)).astype(np.float32), "y": rng.standard_normal(4).astype(np.float32)}
    e = np.exp(feeds["x"]) + np.tanh(feeds["x"]) + feeds["y"]
    want = np.exp(e - e.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    for vm in (VirtualMachine(exe), VirtualMachine(loaded)):
        np.testing.assert_allclose(vm.run(feeds)["d"], want, rtol=1e-5)


def test_the_planner_writes_the_fused_result_over_an_input_that_dies(monkeypatch):
    # p dies at the fused call with the result's shape and dtype (and the result
    # is an intermediate, so it is planned): the memory planner hands the kernel
    # an out that *is* p, and the result is right
    mod = parse(module(func("main", X, """
p = R.nn.softmax(x, axis=-1)
t = R.tanh(p)
m = R.multiply(t, p)
r = R.add(m, p)
s = R.nn.softmax(r, axis=0)
return s
""")))
    with PassContext(opt_level=2):
        out = lower(fuse_ops(mod))
    real = KERNELS["fused_elementwise"]
    seen = []

    def spy(*inputs, out, recipe, workspace=None):
        seen.append(any(np.shares_memory(a, out) for a in inputs))
        real.fn(*inputs, out=out, recipe=recipe, workspace=workspace)

    monkeypatch.setitem(KERNELS, "fused_elementwise", Kernel("fused_elementwise", spy, True, True))
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    got = VirtualMachine(relaxpack.build(out, opt_level=0)).run({"x": x})
    want = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    assert seen == [True]
    np.testing.assert_array_equal(got["s"], want["s"])
