"""widen_float16: a fused float16 recipe computes in float32 and rounds once (docs/design-notes.md,
"float16 chains"): the rewritten recipes type-check, and the fused kernel then gives the float32
chain rounded once."""

from __future__ import annotations

import numpy as np

from relaxpack.ir import BlockBuilder, TensorStructInfo, Var
from relaxpack.ops import make_call
from relaxpack.passes.widen_float16 import widen_float16
from relaxpack.runtime.kernels import get_kernel


def step(op, inputs, result="float16", full=True, inplace=None, **attrs):
    inplace = tuple(True for _ in inputs) if inplace is None else tuple(inplace)
    return (op, tuple(inputs), tuple(sorted(attrs.items())), result, full, inplace)


def P(i):
    return ("p", i)


def S(j):
    return ("s", j)


def infer(recipe, params):
    args = [Var(f"p{i}", p) for i, p in enumerate(params)]
    return BlockBuilder().infer_call(make_call("fused_elementwise", *args, recipe=recipe))


def run(recipe, arrays, dtype):
    out = np.empty(np.broadcast_shapes(*(a.shape for a in arrays)), dtype)
    get_kernel("fused_elementwise").fn(*arrays, out=out, recipe=recipe)
    return out


F16 = lambda *shape: TensorStructInfo(shape, "float16")      # noqa: E731
F32 = lambda *shape: TensorStructInfo(shape, "float32")      # noqa: E731


def test_a_float16_chain_runs_in_float32_and_rounds_once():
    recipe = (step("multiply", [P(0), P(0)]), step("add", [S(0), P(0)]), step("divide", [S(1), P(1)], inplace=[True, False]))
    params = [F16(3, 5), F16(5)]
    wide = widen_float16(recipe, params, F16(3, 5))
    assert [s[3] for s in wide] == ["float32"] * (len(wide) - 1) + ["float16"]
    assert wide[-1][0] == "astype"
    assert infer(wide, params) == infer(recipe, params)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 5)).astype(np.float16), (rng.random(5) + 0.5).astype(np.float16)
    want = ((x.astype(np.float32) ** 2 + x.astype(np.float32)) / y.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(run(wide, [x, y], np.float16), want)


def test_a_product_writes_float32_and_a_rounding_between_widened_steps_is_dropped():
    recipe = (step("matmul", [P(0), P(1)], inplace=[False, False], out_dtype=None),
              step("add", [S(0), P(2)], inplace=[True, False]), step("tanh", [S(1)]))
    params = [F16(4, 6), F16(6, 3), F16(3)]
    wide = widen_float16(recipe, params, F16(4, 3))
    assert wide[0][0] == "matmul" and dict(wide[0][2])["out_dtype"] == "float32"
    assert infer(wide, params) == infer(recipe, params)
    # a conv-like float32 producer, its rounding to float16, then float16 arithmetic: the rounding goes
    recipe = (step("astype", [P(0)], inplace=[False], dtype="float16"), step("add", [S(0), P(1)], inplace=[True, False]),
              step("nn.relu", [S(1)]), step("astype", [S(2)], "float32", inplace=[False], dtype="float32"))
    params = [F32(2, 3), F16(3)]
    wide = widen_float16(recipe, params, F32(2, 3))
    assert all(s[3] == "float32" for s in wide) and not any(s[0] == "astype" and s[1] == (P(0),) for s in wide)
    assert infer(wide, params) == infer(recipe, params)
    x, b = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3) / 3, np.array([0.1, -0.2, 0.3], np.float16)
    np.testing.assert_array_equal(run(wide, [x, b], np.float32), np.maximum(x + b.astype(np.float32), 0))


def test_a_float16_step_that_stays_reads_its_input_rounded_and_short_recipes_stay():
    recipe = (step("multiply", [P(0), P(1)]), step("add", [S(0), P(1)]),
              step("less", [S(1), P(1)], "bool", inplace=[False, False]))
    params = [F16(4), F16(4)]
    wide = widen_float16(recipe, params, TensorStructInfo((4,), "bool"))
    less = wide[-1]
    assert less[0] == "less" and wide[less[1][0][1]][0] == "astype" and wide[less[1][0][1]][3] == "float16"
    assert infer(wide, params) == infer(recipe, params)
    x, y = np.array([0.1, 0.2, 0.3, 4.0], np.float16), np.array([1.0, 2.0, 0.5, 0.25], np.float16)
    s = ((x.astype(np.float32) * y + y).astype(np.float16))
    np.testing.assert_array_equal(run(wide, [x, y], np.bool_), s < y)
    short = (step("exp", [P(0)]), step("less", [S(0), P(0)], "bool", inplace=[False, False]))
    assert widen_float16(short, [F16(4)], TensorStructInfo((4,), "bool")) is short
    f32 = (step("exp", [P(0)], "float32"), step("add", [S(0), P(0)], "float32"))
    assert widen_float16(f32, [F32(4)], F32(4)) is f32
