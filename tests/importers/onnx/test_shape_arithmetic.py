"""Arithmetic on known int contents (shape values) is done at import time
with the dim algebra, so shape subgraphs stay symbolic.

The first tests call the math converters directly on symbolic values; the
last ones run whole ONNX shape subgraphs (Shape -> Gather -> Mul -> Concat
-> Reshape) end to end at two sizes with one build.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from relaxpack.importers.onnx import find_converter
from relaxpack.importers.onnx.context import ImportContext
from relaxpack.importers.onnx.value import Value
from relaxpack.ir import TensorStructInfo, sym
from relaxpack.ir.block_builder import BlockBuilder
from relaxpack.ir.dims import dim_max, dim_min
from relaxpack.ir.expr import Call, Var

from .test_convert_elementwise import check, inp, model, node

N, S = sym("n"), sym("s")


@pytest.fixture
def ctx():
    """A context inside a function being built (n in [1, 512])."""
    bb = BlockBuilder()
    bb.analyzer.set_range("n", 1, 512)
    context = ImportContext(bb, {"": 18})
    x = Var("x", TensorStructInfo((N, S), "float32"))
    with bb.function("main", [x]):
        yield context
        bb.emit_func_output(x)


def convert(ctx, op, *inputs, **attrs):
    return find_converter("", op, ctx.opset).fn(ctx, *inputs, **attrs)


def const(ctx, *values, dtype=np.int64, scalar=False):
    data = np.array(values, dtype=dtype)
    return ctx.const(data.reshape(()) if scalar else data)


def contents(value):
    assert isinstance(value, Value), f"expected a value computed at import time, got {value!r}"
    return value.int_values()


def test_mul_of_a_shape_by_a_constant_is_symbolic(ctx):
    result = convert(ctx, "Mul", ctx.sym_value((N, S)), const(ctx, 64, scalar=True))
    assert contents(result) == (64 * N, 64 * S)
    assert result.shape == (2,) and result.dtype == "int64"


def test_scalar_broadcasts_with_a_1d_shape_value(ctx):
    result = convert(ctx, "Add", ctx.sym_value((N,), scalar=True), ctx.sym_value((S, 4)))
    assert contents(result) == (N + S, N + 4) and result.shape == (2,)
    assert convert(ctx, "Sub", ctx.sym_value((N,), scalar=True), const(ctx, 1, scalar=True)).shape == ()


def test_neg_and_sub(ctx):
    assert contents(convert(ctx, "Neg", ctx.sym_value((N, 3)))) == (-N, -3)
    assert contents(convert(ctx, "Sub", ctx.sym_value((N, S)), ctx.sym_value((S, S)))) == (N - S, 0)


@pytest.mark.parametrize("num, den, want", [
    (64 * N, 64, N),                 # exact
    (N, 2, N // 2),                  # floor = truncation: n >= 0
    (N * S, S, N),                   # exact division by a symbolic dim
    (N, -2, -(N // 2)),              # truncation toward zero
    (S - 1, 2, dim_max(S - 1, 0) // 2),          # s - 1 >= -1: truncation is 0 below 0
    (S - 1, -2, -(dim_max(S - 1, 0) // 2)),
])
def test_int_div_of_dims(ctx, num, den, want):
    divisor = ctx.sym_value((den, -2)) if not isinstance(den, int) else const(ctx, den, -2)
    result = convert(ctx, "Div", ctx.sym_value((num, 7)), divisor)
    assert contents(result) == (want, -3)   # 7 / -2 truncates to -3


@pytest.mark.parametrize("num, den", [(-N, 2), (N, S), (N + 1, 0), (S - 2, 2)])
def test_int_div_not_decidable_is_left_to_the_ir(ctx, num, den):
    """A possibly negative dividend (floor != truncation), a symbolic divisor
    that does not divide, a zero divisor: computed at run time."""
    divisor = ctx.sym_value((den,), scalar=True) if not isinstance(den, int) else const(ctx, den, scalar=True)
    result = convert(ctx, "Div", ctx.sym_value((num,), scalar=True), divisor)
    assert isinstance(result, Call) and result.op.name == "divide"


def test_equal_decides_what_the_analyzer_proves(ctx):
    result = convert(ctx, "Equal", ctx.sym_value((N, N + 1)), ctx.sym_value((N, N)))
    assert result.const is not None and result.const.tolist() == [True, False]
    # n and s may or may not be equal: the comparison stays in the IR
    assert isinstance(convert(ctx, "Equal", ctx.sym_value((N,)), ctx.sym_value((S,))), Call)


def test_comparisons_with_ranges(ctx):
    less = convert(ctx, "Less", ctx.sym_value((N, N)), const(ctx, 0, 1000))
    assert less.const.tolist() == [False, True]   # 1 <= n <= 512
    greater = convert(ctx, "GreaterOrEqual", ctx.sym_value((N,), scalar=True), const(ctx, 1, scalar=True))
    assert greater.const.shape == () and bool(greater.const) is True


def test_max_min_use_the_ranges(ctx):
    assert contents(convert(ctx, "Max", ctx.sym_value((N, S)), const(ctx, 1, 1))) == (N, contents(
        convert(ctx, "Max", ctx.sym_value((S,)), const(ctx, 1)))[0])
    assert contents(convert(ctx, "Min", ctx.sym_value((N,)), const(ctx, 8))) == (dim_min(N, 8),)
    assert contents(convert(ctx, "Min", ctx.sym_value((N,)), const(ctx, 1000))) == (N,)


def test_mod_of_dims(ctx):
    result = convert(ctx, "Mod", ctx.sym_value((4 * N, N)), const(ctx, 4, scalar=True))
    assert contents(result) == (0, N % 4)


def test_cast_to_int32_keeps_the_contents(ctx):
    as_int32 = convert(ctx, "Cast", ctx.sym_value((N, S)), to=TensorProto.INT32)
    assert as_int32.dtype == "int32" and contents(as_int32) == (N, S)
    doubled = convert(ctx, "Mul", as_int32, const(ctx, 2, dtype=np.int32, scalar=True))
    assert doubled.dtype == "int32" and contents(doubled) == (2 * N, 2 * S)
    back = convert(ctx, "Cast", doubled, to=TensorProto.INT64)
    assert back.dtype == "int64" and contents(back) == (2 * N, 2 * S)


def test_where_with_a_constant_condition_selects(ctx):
    cond = ctx.const(np.array([True, False]))
    result = convert(ctx, "Where", cond, ctx.sym_value((N, S)), const(ctx, -1, -1))
    assert contents(result) == (N, -1)


def test_all_static_results_are_constants(ctx):
    result = convert(ctx, "Sub", ctx.sym_value((N, S)), ctx.sym_value((N, S)))
    assert result.const is not None and result.const.tolist() == [0, 0]


def test_float_operands_are_not_shape_arithmetic(ctx):
    x = Value(TensorStructInfo((2,), "float32"), expr=Var("f", TensorStructInfo((2,), "float32")))
    assert isinstance(convert(ctx, "Mul", x, ctx.const(np.float32(2))), Call)


# ---------------------------------------------------------------- end to end


def _reshape_model(nodes, out_name="y"):
    return model(nodes, [inp("x", "float32", ["batch", "seq", 64])], [out_name], opset=18,
                 initializers={"i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
                               "ax0": np.array([0], np.int64), "c64": np.array(64, np.int64),
                               "c32": np.array([32], np.int64), "c2": np.array(2, np.int32)})


def _feeds(rng):
    return [{"x": rng.standard_normal((b, s, 64)).astype(np.float32)} for b, s in ((1, 3), (2, 5))]


def test_shape_gather_mul_concat_reshape_stays_symbolic():
    """(batch, seq, 64) -> (batch * seq, 64) through shape arithmetic."""
    m = _reshape_model([
        node("Shape", ["x"], ["shape"]), node("Gather", ["shape", "i0"], ["b"]),
        node("Gather", ["shape", "i1"], ["s"]), node("Mul", ["b", "s"], ["bs"]),
        node("Unsqueeze", ["bs", "ax0"], ["bs1"]), node("Unsqueeze", ["c64", "ax0"], ["k"]),
        node("Concat", ["bs1", "k"], ["target"], axis=0), node("Reshape", ["x", "target"], ["y"]),
    ])
    mod = check(m, _feeds(np.random.default_rng(0)))
    text = mod.script()
    assert "R.shape([batch * seq, 64])" in text, text
    assert "multiply" not in text and "shape_to_tensor" not in text


def test_div_and_int32_casts_stay_symbolic():
    """(batch, seq, 64) -> (batch, seq * 2, 32): Div(seq * 64, 32) is exact;
    the arithmetic runs through int32 and back."""
    m = _reshape_model([
        node("Shape", ["x"], ["shape"]), node("Cast", ["shape"], ["shape32"], to=TensorProto.INT32),
        node("Gather", ["shape32", "i0"], ["b"]), node("Gather", ["shape", "i1"], ["s"]),
        node("Mul", ["s", "c64"], ["s64"]), node("Div", ["s64", "c32"], ["s2"]),
        node("Mul", ["b", "c2"], ["b2"]), node("Div", ["b2", "c2"], ["b32"]),
        node("Cast", ["b32"], ["b64"], to=TensorProto.INT64),
        node("Unsqueeze", ["b64", "ax0"], ["b1"]), node("Concat", ["b1", "s2", "c32"], ["target"], axis=0),
        node("Reshape", ["x", "target"], ["y"]),
    ])
    mod = check(m, _feeds(np.random.default_rng(1)))
    assert "R.reshape(x, R.shape([batch, 2 * seq, 32]))" in mod.script(), mod.script()


def test_shape_value_as_an_output_is_computed_at_run_time():
    """Shape arithmetic whose result is a graph output materializes once."""
    m = model([node("Shape", ["x"], ["shape"]), node("Mul", ["shape", "two"], ["y"])],
              [inp("x", "float32", ["batch", 3])], opset=18, initializers={"two": np.array(2, np.int64)})
    check(m, [{"x": np.zeros((b, 3), np.float32)} for b in (1, 4)])



def test_truncating_div_of_a_length_that_may_be_zero_slices_statically():
    """torch.onnx's ``(frames - 1) / 2 + 1`` rows of a table (Whisper's positions after its
    stride-2 conv): Div truncates, so frames = 0 gives 1 row where floor division gives 0; the
    length is the dim ``max(frames - 1, 0) // 2 + 1`` and the slice is no run-time ``dyn.slice``."""
    table = np.arange(24, dtype=np.float32).reshape(8, 3)
    m = model([node("Shape", ["x"], ["shape"]), node("Gather", ["shape", "i1"], ["f"]),
               node("Sub", ["f", "one"], ["f1"]), node("Div", ["f1", "two"], ["h"]),
               node("Add", ["h", "one"], ["n"]), node("Unsqueeze", ["n", "ax0"], ["end"]),
               node("Slice", ["table", "zero", "end", "zero"], ["y"])],
              [inp("x", "float32", ["batch", "frames"])], opset=18,
              initializers={"table": table, "i1": np.array(1, np.int64), "one": np.array(1, np.int64),
                            "two": np.array(2, np.int64), "ax0": np.array([0], np.int64),
                            "zero": np.array([0], np.int64)})
    mod = check(m, [{"x": np.zeros((2, f), np.float32)} for f in (0, 1, 2, 5, 9)])
    text = mod.script()
    assert "dyn.slice" not in text and "max(frames - 1, 0) // 2 + 1" in text, text
