"""The fused_elementwise kernel: a recipe of steps run with the ops' own kernels,
in ``out`` and at most one temporary, never writing its inputs."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from relaxpack.errors import IRError, RelaxpackError, ShapeError
from relaxpack.ir import BlockBuilder, TensorStructInfo, Var
from relaxpack.ops import make_call
from relaxpack.runtime.kernels import KERNELS, get_kernel
from relaxpack.runtime.kernels._workspace import release_workspace
from relaxpack.runtime.kernels.fused_elementwise import plan_buffers

from .test_kernels_registry import rand

FUSED = get_kernel("fused_elementwise").fn


def P(i):
    return ("p", i)


def S(j):
    return ("s", j)


def step(op, inputs, result="float32", full=True, inplace=None, **attrs):
    """A recipe step; ``result`` is its dtype, ``attrs`` the op's attributes."""
    inplace = tuple(True for _ in inputs) if inplace is None else tuple(inplace)
    return (op, tuple(inputs), tuple(sorted(attrs.items())), result, full, inplace)


# ---------------------------------------------------------------- recipes

CHAIN = (step("exp", [P(0)]), step("add", [S(0), P(1)], inplace=[True, False]), step("tanh", [S(1)]))
TREE = (step("exp", [P(0)]), step("tanh", [P(0)]), step("add", [S(0), S(1)]))
# a broadcast intermediate: sigmoid of a (4,) bias, added into an (n, 4) tensor
SMALL = (step("sigmoid", [P(1)], full=False), step("multiply", [P(0), S(0)], inplace=[True, False]),
         step("nn.relu", [S(1)]))
# GPT's causal mask: a bool intermediate of another shape, then where
MASK = (step("divide", [P(0), P(1)], inplace=[True, False]),
        step("logical_not", [P(2)], "bool", full=False),
        step("where", [S(1), P(3), S(0)], inplace=[False, False, True]))
# GPT's token index: int64 with a bool intermediate of the result's shape
INDEX = (step("less", [P(0), P(1)], "bool", inplace=[False, False]),
         step("add", [P(0), P(2)], "int64", inplace=[True, False]),
         step("where", [S(0), S(1), P(0)], "int64", inplace=[False, True, True]))
# casts: float32 -> float16 arithmetic -> float32
CAST = (step("astype", [P(0)], "float16", inplace=[False], dtype="float16"),
        step("multiply", [S(0), P(1)], "float16", inplace=[True, False]),
        step("astype", [S(1)], "float32", inplace=[False], dtype="float32"))
# a producer: matmul, then bias, GELU (erf form) and a residual
GEMM = (step("matmul", [P(0), P(1)], inplace=[False, False], out_dtype=None),
        step("add", [S(0), P(2)], inplace=[True, False]),
        step("nn.gelu", [S(1)], approximate="none"),
        step("add", [S(2), P(3)], inplace=[True, True]))
CONV = (step("nn.conv", [P(0), P(1)], inplace=[False, False], strides=1, padding=1, dilation=1, groups=1,
             exact=False, data_layout="NCHW", out_layout=None),
        step("nn.leakyrelu", [S(0)], alpha=0.1))
# needs three buffers: (exp x + tanh x) * (sin x + cos x)
WIDE = (step("exp", [P(0)]), step("tanh", [P(0)]), step("add", [S(0), S(1)]),
        step("sin", [P(0)]), step("cos", [P(0)]), step("add", [S(3), S(4)]), step("multiply", [S(2), S(5)]))


def args_for(name, rng, n=5, dtype="float32"):
    f = lambda *shape: rand(rng, shape, dtype)           # noqa: E731
    return {
        "CHAIN": (CHAIN, (f(n, 4), f(4))),
        "TREE": (TREE, (f(n, 4),)),
        "SMALL": (SMALL, (f(n, 4), f(4))),
        "MASK": (MASK, (f(2, 3, n, n), np.array(2.5, np.float32), np.tril(np.ones((n, n), bool)),
                        np.array(-np.inf, np.float32))),
        "INDEX": (INDEX, (rng.integers(-100, 100, (2, n)), np.array(0), np.array(128))),
        "CAST": (CAST, (f(n, 4), np.array([0.5, 2, -1, 3], np.float16))),
        "GEMM": (GEMM, (f(2, n, 8), f(8, 6), f(6), f(2, n, 6))),
        "CONV": (CONV, (f(1, 2, n, n), f(3, 2, 3, 3))),
        "WIDE": (WIDE, (f(n, 4),)),
    }[name]


CASES = ["CHAIN", "TREE", "SMALL", "MASK", "INDEX", "CAST", "GEMM", "CONV", "WIDE"]


def out_sinfo(recipe, args):
    """The op's own inference of the output (which also checks the recipe)."""
    params = [Var(f"p{i}", TensorStructInfo(a.shape, str(a.dtype))) for i, a in enumerate(args)]
    return BlockBuilder().infer_call(make_call("fused_elementwise", *params, recipe=recipe))


def unfused(recipe, args):
    """Each step with its own kernel into a fresh array: the reference."""
    values = []
    for op, inputs, attrs, dtype, _, _ in recipe:
        ins = [args[i] if kind == "p" else values[i] for kind, i in inputs]
        params = [Var(f"x{k}", TensorStructInfo(a.shape, str(a.dtype))) for k, a in enumerate(ins)]
        sinfo = BlockBuilder().infer_call(make_call(op, *params, **dict(attrs)))
        out = np.empty(tuple(sinfo.shape), dtype)
        with np.errstate(all="ignore"):
            KERNELS[op].fn(*ins, out=out, **dict(attrs))
        values.append(out)
    return values[-1]


def frozen(args):
    out = []
    for a in args:
        a = np.array(a, copy=True)
        a.setflags(write=False)         # a write into an input raises
        out.append(a)
    return out


def run(recipe, args):
    sinfo = out_sinfo(recipe, args)
    out = np.full(tuple(sinfo.shape), 7, sinfo.dtype)
    assert FUSED(*frozen(args), out=out, recipe=recipe) is None
    return out


# ---------------------------------------------------------------- results


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("n", [1, 6])
def test_matches_the_unfused_kernels(name, n):
    recipe, args = args_for(name, np.random.default_rng(n), n)
    np.testing.assert_array_equal(run(recipe, args), unfused(recipe, args))


@pytest.mark.parametrize("dtype", ["float16", "float64"])
@pytest.mark.parametrize("name", ["CHAIN", "TREE", "SMALL", "GEMM"])
def test_other_float_dtypes(name, dtype):
    recipe, args = args_for(name, np.random.default_rng(3), 4, dtype)
    recipe = tuple(s[:3] + (dtype,) + s[4:] for s in recipe)
    got = run(recipe, args)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, unfused(recipe, args))


def test_integer_chain():
    rng = np.random.default_rng(4)
    recipe = (step("multiply", [P(0), P(1)], "int32", inplace=[True, True]),
              step("floor_divide", [S(0), P(2)], "int32", inplace=[True, False]),
              step("clip", [S(1)], "int32", min=-5.0, max=20.0, saturate_nan=False),
              step("greater", [S(2), P(1)], "bool", inplace=[False, False]))
    args = (rng.integers(-9, 9, (3, 5), dtype=np.int32), rng.integers(-9, 9, (3, 5), dtype=np.int32),
            np.array([2, 3, -4, 5, 7], np.int32))
    got = run(recipe, args)
    assert got.dtype == bool
    np.testing.assert_array_equal(got, unfused(recipe, args))


@pytest.mark.parametrize("name", ["CHAIN", "TREE", "SMALL", "MASK", "GEMM"])
def test_empty_tensors(name):
    recipe, args = args_for(name, np.random.default_rng(5), 0)
    got = run(recipe, args)
    assert got.size == 0 and got.shape == unfused(recipe, args).shape


def test_scalars():
    recipe = (step("exp", [P(0)]), step("add", [S(0), P(0)]))
    x = np.array(0.5, np.float32)
    got = run(recipe, (x,))
    assert got.shape == () and got == np.exp(x) + x


def test_strided_out():
    recipe, args = args_for("TREE", np.random.default_rng(6), 6)
    big = np.zeros((6, 8), np.float32)
    out = big[:, ::2]
    FUSED(*frozen(args), out=out, recipe=recipe)
    np.testing.assert_array_equal(out, unfused(recipe, args))
    assert (big[:, 1::2] == 0).all()


# ---------------------------------------------------------------- in place


@pytest.mark.parametrize("name", CASES)
def test_out_may_be_an_input(name):
    # The memory planner may give the kernel an out that is an input dying
    # there (the op is elementwise): the result must not change.
    recipe, args = args_for(name, np.random.default_rng(7), 5)
    want = unfused(recipe, args)
    aliased = [i for i, a in enumerate(args) if a.shape == want.shape and a.dtype == want.dtype]
    assert aliased or name in ("CONV", "MASK", "INDEX", "CAST"), "a case without an input to alias"
    for i in aliased:
        ins = [a.copy() for a in args]
        FUSED(*ins, out=ins[i], recipe=recipe)
        np.testing.assert_array_equal(ins[i], want)


def test_partially_overlapping_input_is_read_before_out_is_written():
    recipe = (step("exp", [P(0)]), step("add", [S(0), P(1)], inplace=[True, False]))
    buf = np.arange(12, dtype=np.float32) / 12
    x, y = buf[2:8], buf[:6]              # y overlaps out without being out
    want = np.exp(x) + y
    FUSED(x, y, out=buf[:6], recipe=recipe)
    np.testing.assert_allclose(buf[:6], want, rtol=1e-6)


def test_plans():
    chain, tree = CHAIN, TREE
    assert plan_buffers(chain) == (0, 0, 0)              # all in out, no temporary
    assert plan_buffers(tree) == (0, 1, 0)               # one operand waits in out
    assert plan_buffers(tree, frozenset({0})) == (1, 0, 0)   # out is x: tanh(x) writes over it last
    assert plan_buffers(MASK) == (0, 1, 0)
    assert plan_buffers(INDEX) == (1, 0, 0)              # the bool waits in the temporary
    assert plan_buffers(WIDE) is None                    # three live values
    assert plan_buffers(WIDE, buffers=3) is not None


def extra_bytes(recipe, args, out):
    FUSED(*args, out=out, recipe=recipe)          # plans and kernels cached, numpy warmed up
    release_workspace()                           # so the temporaries are allocated (and traced) again
    tracemalloc.start()
    try:
        FUSED(*args, out=out, recipe=recipe)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


SLACK = 64 * 1024      # ufunc buffers for broadcasting, views, small objects


@pytest.mark.parametrize("name, temporary", [
    ("CHAIN", lambda out, n: 0),
    ("SMALL", lambda out, n: 0),
    ("TREE", lambda out, n: out.nbytes),       # exp(x) waits while tanh(x) is computed
    ("MASK", lambda out, n: n * n),            # the (n, n) bool mask, out holds the rest
    ("INDEX", lambda out, n: out.size),        # the bool comparison, one byte per element
])
def test_at_most_one_temporary(name, temporary):
    n = 400
    recipe, args = args_for(name, np.random.default_rng(8), n)
    out = np.empty_like(unfused(recipe, args))
    peak = extra_bytes(recipe, args, out)
    assert peak <= temporary(out, n) + SLACK, (peak, out.nbytes)
    assert peak >= temporary(out, n)           # and it really needs it


def test_an_aliased_input_keeps_one_temporary():
    recipe, (x,) = args_for("TREE", np.random.default_rng(9), 400)
    buf = x.copy()
    assert extra_bytes(recipe, (buf,), buf) <= buf.nbytes + SLACK


def test_a_recipe_that_needs_more_buffers_still_runs():
    recipe, args = args_for("WIDE", np.random.default_rng(10), 300)
    out = np.empty_like(args[0])
    assert extra_bytes(recipe, args, out) <= 2 * out.nbytes + SLACK


# ---------------------------------------------------------------- malformed recipes


@pytest.mark.parametrize("recipe, match", [
    ((), "1 to 1024 steps"),
    ([step("exp", [P(0)])], "only tuples"),
    ((("exp", [("p", 0)], (), "float32", True, (True,)),), "only tuples"),
    ((("exp", (("p", 0),), (), "float32", True),), "op, inputs, attrs"),
    ((step("exp", [S(0)]),), "earlier step"),
    ((step("exp", [("q", 0)]),), "neither"),
    ((step("no_such_op", [P(0)]),), "no_such_op"),
    ((step("exp", [P(3)]),), "reads 4 parameters"),
    ((step("exp", [P(0)], "float64"),), "computes float64"),
])
def test_malformed_recipes_raise(recipe, match):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(RelaxpackError, match=match):
        FUSED(x, out=np.empty_like(x), recipe=recipe)


def test_inference_checks_the_recipes_claims():
    x = Var("x", TensorStructInfo((2, 3), "float32"))
    b = Var("b", TensorStructInfo((3,), "float32"))
    def infer(recipe, *args):
        return BlockBuilder().infer_call(make_call("fused_elementwise", *args, recipe=recipe))
    assert infer(CHAIN, x, b) == TensorStructInfo((2, 3), "float32")
    with pytest.raises(IRError, match="may not write over its input 1"):
        infer((step("add", [P(0), P(1)]),), x, b)            # b broadcasts: no in-place over it
    with pytest.raises(IRError, match="the recipe says float16"):
        infer((step("exp", [P(0)], "float16"),), x)
    with pytest.raises(IRError, match="marked full"):
        infer((step("exp", [P(1)]), step("add", [P(0), S(0)], inplace=[True, False])), x, b)
    with pytest.raises(IRError, match="cannot be fused"):
        infer((step("nn.softmax", [P(0)], axis=-1),), x)
    with pytest.raises(IRError, match="must be the first step"):
        infer((step("exp", [P(0)]), step("matmul", [S(0), P(0)], inplace=[False, False], out_dtype=None)), x)
    with pytest.raises(IRError, match="attributes"):
        infer((step("nn.gelu", [P(0)]),), x)                  # approximate missing
    with pytest.raises(ShapeError, match="never reads"):
        infer((step("exp", [P(0)]),), x, b)


def test_a_prepared_call_follows_new_shapes_and_a_new_recipe_object():
    """Calls are prepared once per recipe object and shapes: the same recipe
    on other shapes, and an equal recipe rebuilt, still run right."""
    recipe = (step("exp", [P(0)]), step("add", [S(0), P(1)], inplace=[True, False]))
    rng = np.random.default_rng(7)
    for shape in [(2, 3), (2, 3), (4, 1, 3), (0, 3), (5, 3)]:
        x, y = rng.standard_normal(shape).astype(np.float32), rng.standard_normal(3).astype(np.float32)
        for r in (recipe, tuple(list(recipe))):     # the same recipe, and an equal one as a new object
            np.testing.assert_allclose(run(r, (x, y)), np.exp(x) + y, rtol=1e-6)
    with pytest.raises(ShapeError, match="out is float64"):
        FUSED(x, y, out=np.empty(x.shape, np.float64), recipe=recipe)


def test_a_look_up_step_is_full_and_not_in_place():
    """``take`` of a table (ops/definitions/fused_elementwise.py ``LOOKUPS``): its result is the
    index's shape, so a step that claims less is refused, as is writing over the index."""
    i = Var("i", TensorStructInfo((2, 3), "int64"))
    table = Var("t", TensorStructInfo((5,), "float32"))
    def infer(recipe, *args):
        return BlockBuilder().infer_call(make_call("fused_elementwise", *args, recipe=recipe))
    look = step("take", [P(1), P(0)], inplace=[False, False], axis=0, in_bounds=False)
    assert infer((look,), i, table) == TensorStructInfo((2, 3), "float32")
    with pytest.raises(IRError, match="must have the result's shape"):
        infer((step("take", [P(1), P(0)], full=False, inplace=[False, False], axis=0, in_bounds=False),), i, table)
    with pytest.raises(IRError, match="may not write over its input"):
        infer((step("astype", [P(0)], "int64", inplace=[False], dtype="int64"),
               step("take", [P(1), S(0)], "int64", inplace=[False, True], axis=0, in_bounds=False)),
              i, Var("t", TensorStructInfo((5,), "int64")))
    out = np.empty((2, 3), np.float32)
    index = np.array([[0, 4, 2], [1, 3, 0]], np.int64)
    FUSED(index, np.arange(5, dtype=np.float32) * 1.5, out=out, recipe=(look,))
    np.testing.assert_array_equal(out, (index * 1.5).astype(np.float32))
