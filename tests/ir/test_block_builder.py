import numpy as np
import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import (
    BlockBuilder, Call, Constant, DataflowBlock, DataflowVar, ExternFunc, If, MatchCast, SeqExpr,
    Var, VarBinding, sym,
)
from relaxpack.ir.struct_info import TensorStructInfo as TS
from relaxpack.ops import make_call

n, m = sym("n"), sym("m")


def build_single(params, body_fn, ranges=None):
    bb = BlockBuilder()
    for name, (lo, hi) in (ranges or {}).items():
        bb.analyzer.set_range(name, lo, hi)
    with bb.function("main", params):
        with bb.dataflow():
            out = body_fn(bb)
            gv = bb.emit_output(out)
        bb.emit_func_output(gv)
    return bb.get()


def test_emit_infers_struct_info_and_makes_dataflow_vars():
    x = Var("x", TS((n, 4), "float32"))
    seen = {}

    def body(bb):
        seen["lv"] = bb.emit(make_call("exp", x))
        return seen["lv"]

    mod = build_single([x], body)
    lv = seen["lv"]
    assert isinstance(lv, DataflowVar)
    assert lv.struct_info == TS((n, 4), "float32")
    func = mod["main"]
    assert isinstance(func.body.blocks[0], DataflowBlock)
    assert func.ret_struct_info == TS((n, 4), "float32")
    assert [type(b) for b in func.body.blocks[0].bindings] == [VarBinding, VarBinding]


def test_nested_calls_are_put_in_a_normal_form():
    x = Var("x", TS((n, 4), "float32"))
    mod = build_single([x], lambda bb: bb.emit(make_call("add", make_call("exp", x), make_call("exp", x))))
    bindings = mod["main"].body.blocks[0].bindings
    # exp, exp, add, output: every argument of a call is a leaf
    assert len(bindings) == 4
    add = bindings[2].value
    assert all(isinstance(a, Var) for a in add.args)


def test_broadcast_symbolic_with_one():
    x = Var("x", TS((n, 1, 4), "float32"))
    y = Var("y", TS((1, m, 4), "float32"))
    mod = build_single([x, y], lambda bb: bb.emit(make_call("add", x, y)))
    assert mod["main"].ret_struct_info == TS((n, m, 4), "float32")


def test_shape_mismatch_names_op_shapes_and_span():
    x = Var("x", TS((n, 4), "float32"))
    y = Var("y", TS((m, 4), "float32"))
    bb = BlockBuilder()
    with pytest.raises(ShapeError) as err:
        with bb.function("main", [x, y]):
            with bb.dataflow():
                with bb.span("/layer0/Add"):
                    bb.emit(make_call("add", x, y))
    text = str(err.value)
    assert "R.add" in text and "n" in text and "m" in text and "/layer0/Add" in text


def test_static_shape_mismatch():
    x = Var("x", TS((3, 4), "float32"))
    y = Var("y", TS((5, 4), "float32"))
    with pytest.raises(ShapeError, match="R.add"):
        build_single([x, y], lambda bb: bb.emit(make_call("add", x, y)))


def test_match_cast_binds_new_dims():
    x = Var("x", TS(None, "float32", ndim=2))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            lv = bb.match_cast(x, TS((n, 4), "float32"))
            gv = bb.emit_output(make_call("exp", lv))
        bb.emit_func_output(gv)
    func = bb.get()["main"]
    assert isinstance(func.body.blocks[0].bindings[0], MatchCast)
    assert func.ret_struct_info == TS((n, 4), "float32")


def test_ranges_are_recorded_on_the_function():
    x = Var("x", TS((n, 4), "float32"))
    mod = build_single([x], lambda bb: bb.emit(make_call("exp", x)), ranges={"n": (1, 512)})
    assert mod["main"].attrs["dim_ranges"] == (("n", 1, 512),)


def test_impure_call_rejected_in_dataflow_block():
    x = Var("x", TS((n,), "float32"))
    bb = BlockBuilder()
    packed = make_call("call_packed", ExternFunc("log_tensor"), x, sinfo_args=(TS((n,), "float32"),))
    with pytest.raises(IRError, match="impure"):
        with bb.function("main", [x]):
            with bb.dataflow():
                bb.emit(packed)
    bb = BlockBuilder()
    with bb.function("main", [x], pure=False):
        lv = bb.emit(packed)   # fine in an ordinary block
        bb.emit_func_output(lv)
    assert not bb.get()["main"].is_pure


def test_emit_output_only_inside_dataflow():
    x = Var("x", TS((n,), "float32"))
    bb = BlockBuilder()
    with pytest.raises(IRError, match="only allowed inside a dataflow block"):
        with bb.function("main", [x]):
            bb.emit_output(x)


def test_function_must_end_with_output():
    x = Var("x", TS((n,), "float32"))
    bb = BlockBuilder()
    with pytest.raises(IRError, match="without emit_func_output"):
        with bb.function("main", [x]):
            bb.emit(make_call("exp", x))


def test_if_unifies_branches():
    cond = Var("c", TS((), "bool"))
    x = Var("x", TS((n, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [cond, x]):
        bb.begin_scope()
        then = bb.end_scope(bb.emit(make_call("exp", x)))
        bb.begin_scope()
        other = bb.end_scope(bb.emit(make_call("negative", x)))
        out = bb.emit(If(cond, then, other))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    assert isinstance(func.body.blocks[0].bindings[0].value, If)
    assert isinstance(then, SeqExpr) and then.struct_info == TS((n, 4), "float32")
    assert func.ret_struct_info == TS((n, 4), "float32")


def test_constant_arguments_stay_inline():
    x = Var("x", TS((2, 3), "float32"))
    c = Constant(np.ones((2, 3), np.float32))
    mod = build_single([x], lambda bb: bb.emit(make_call("add", x, c)))
    call = mod["main"].body.blocks[0].bindings[0].value
    assert isinstance(call, Call) and call.args[1] is c
