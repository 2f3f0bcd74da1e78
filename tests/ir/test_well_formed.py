import pytest

from relaxpack.errors import IRError
from relaxpack.examples import transformer_block
from relaxpack.ir import (
    BindingBlock, DataflowBlock, DataflowVar, Function, IRModule, MatchCast, SeqExpr,
    ShapeExpr, TensorStructInfo, Var, VarBinding, sym,
)
from relaxpack.ir.well_formed import check_well_formed, well_formed_errors
from relaxpack.ops import make_call

n = sym("n")
T = TensorStructInfo


def single_function(bindings, body, params, dataflow=True):
    block = (DataflowBlock if dataflow else BindingBlock)(bindings)
    return IRModule({"main": Function(params, SeqExpr((block,), body), body.struct_info)})


def exp(v):
    call = make_call("exp", v)
    return call.replace(struct_info=v.struct_info)


def test_transformer_block_is_well_formed():
    check_well_formed(transformer_block())


def test_use_before_definition():
    x = Var("x", T((n,), "float32"))
    a, b = Var("a", T((n,), "float32")), Var("b", T((n,), "float32"))
    mod = single_function([VarBinding(b, exp(a)), VarBinding(a, exp(x))], b, [x])
    errors = well_formed_errors(mod)
    assert any("'a' is used before its definition" in e for e in errors)


def test_dataflow_var_escaping_its_block():
    x = Var("x", T((n,), "float32"))
    d = DataflowVar("d", T((n,), "float32"))
    mod = single_function([VarBinding(d, exp(x))], d, [x])
    assert any("used outside its dataflow block" in e for e in well_formed_errors(mod))


def test_dataflow_var_in_ordinary_block():
    x = Var("x", T((n,), "float32"))
    d = DataflowVar("d", T((n,), "float32"))
    mod = single_function([VarBinding(d, exp(x))], x, [x], dataflow=False)
    assert any("bound outside a dataflow block" in e for e in well_formed_errors(mod))


def test_defined_twice():
    x = Var("x", T((n,), "float32"))
    a = Var("a", T((n,), "float32"))
    mod = single_function([VarBinding(a, exp(x)), VarBinding(a, exp(x))], a, [x])
    assert any("defined twice" in e for e in well_formed_errors(mod))


def test_struct_info_inconsistent_with_inference():
    x = Var("x", T((n,), "float32"))
    a = Var("a", T((n,), "float16"))
    wrong = make_call("exp", x).replace(struct_info=T((n,), "float16"))
    mod = single_function([VarBinding(a, wrong)], a, [x])
    assert any("differs from its inference" in e for e in well_formed_errors(mod))


def test_var_struct_info_must_describe_value():
    x = Var("x", T((n,), "float32"))
    a = Var("a", T((n, 1), "float32"))
    mod = single_function([VarBinding(a, exp(x))], a, [x])
    assert any("does not describe its value" in e for e in well_formed_errors(mod))


def test_undefined_symbolic_dim():
    x = Var("x", T((n,), "float32"))
    shape = ShapeExpr((sym("k"),))
    s = Var("s", shape.struct_info)
    mod = single_function([VarBinding(s, shape)], x, [x])
    assert any("symbolic dim(s) ['k']" in e for e in well_formed_errors(mod))


def test_match_cast_defines_dims():
    x = Var("x", T(None, "float32", ndim=1))
    k = sym("k")
    a = Var("a", T((k,), "float32"))
    s = Var("s", ShapeExpr((k,)).struct_info)
    mod = single_function([MatchCast(a, x, T((k,), "float32")), VarBinding(s, ShapeExpr((k,)))], a, [x])
    assert well_formed_errors(mod) == []


def test_check_raises_one_error_listing_all():
    x = Var("x", T((n,), "float32"))
    a = Var("a", T((n,), "float32"))
    mod = single_function([VarBinding(a, exp(x)), VarBinding(a, exp(x))], Var("ghost", T((n,), "float32")), [x])
    with pytest.raises(IRError) as err:
        check_well_formed(mod)
    assert "defined twice" in str(err.value) and "'ghost'" in str(err.value)


def test_unknown_global_function():
    from relaxpack.ir import Call, GlobalVar
    from relaxpack.ir.struct_info import FuncStructInfo
    x = Var("x", T((n,), "float32"))
    callee = GlobalVar("missing", struct_info=FuncStructInfo((x.struct_info,), x.struct_info))
    a = Var("a", T((n,), "float32"))
    mod = single_function([VarBinding(a, Call(callee, (x,), struct_info=x.struct_info))], a, [x])
    assert any("unknown function 'missing'" in e for e in well_formed_errors(mod))
