import dataclasses

import numpy as np
import pytest

from relaxpack.errors import IRError
from relaxpack.ir import (
    Call, Constant, DataflowVar, Op, PrimValue, ShapeExpr, Tuple, TupleGetItem, Var, sym,
)
from relaxpack.ir.struct_info import PrimStructInfo, ShapeStructInfo, TensorStructInfo, TupleStructInfo


def test_nodes_are_frozen_and_compare_by_identity():
    x = Var("x", TensorStructInfo((2,), "float32"))
    y = Var("x", TensorStructInfo((2,), "float32"))
    assert x != y and x == x
    with pytest.raises(dataclasses.FrozenInstanceError):
        x.name_hint = "z"
    assert isinstance(DataflowVar("d"), Var)


def test_replace_returns_self_when_nothing_changes():
    x = Var("x", TensorStructInfo((2,), "float32"))
    call = Call(Op.get("exp"), (x,))
    assert call.replace(args=call.args) is call
    assert call.replace(op=call.op, args=call.args) is call
    changed = call.replace(args=(Var("y"),))
    assert changed is not call and changed.op is call.op


def test_replace_compares_tuple_fields_element_by_element():
    x, y = Var("x", TensorStructInfo((2,), "float32")), Var("y", TensorStructInfo((2,), "float32"))
    call = Call(Op.get("add"), (x, y))
    assert call.replace(args=tuple([x, y])) is call       # a new tuple of the same vars
    assert call.replace(args=[x, y]) is call              # or a list of them
    for args in ((y, x), (x,), (x, y, y)):                # another order, fewer, more
        changed = call.replace(args=args)
        assert changed is not call and changed.args == args
    tup = Tuple((x, y))
    assert tup.replace(fields=(x, y), struct_info=tup.struct_info) is tup


def test_op_is_interned():
    assert Op.get("add") is Op.get("add")
    assert Op.get("add") is not Op.get("subtract")


def test_constant_is_read_only_and_typed():
    data = np.arange(6, dtype=np.int64).reshape(2, 3)
    c = Constant(data)
    assert c.struct_info == TensorStructInfo((2, 3), "int64")
    with pytest.raises(ValueError):
        c.data[0, 0] = 5
    data[0, 0] = 7  # the caller's array stays writable
    assert data.flags.writeable


def test_leaf_struct_info():
    n = sym("n")
    assert ShapeExpr((n, 4)).struct_info == ShapeStructInfo((n, 4))
    assert PrimValue(n + 1).struct_info == PrimStructInfo("int64", n + 1)
    assert PrimValue(0.5, "float32").value == 0.5
    a = Var("a", TensorStructInfo((n,), "float32"))
    t = Tuple((a, ShapeExpr((3,))))
    assert t.struct_info == TupleStructInfo((a.struct_info, ShapeStructInfo((3,))))
    assert TupleGetItem(t, 1).struct_info == ShapeStructInfo((3,))
    with pytest.raises(IRError, match="out of range"):
        TupleGetItem(t, 2)


def test_call_attrs_are_frozen_and_sorted():
    call = Call(Op.get("sum"), (Var("x"),), {"keepdims": False, "axis": [1, 2]})
    assert list(call.attrs) == ["axis", "keepdims"]
    assert call.attrs["axis"] == (1, 2)
    with pytest.raises(TypeError):
        call.attrs["axis"] = 0
    with pytest.raises(IRError, match="must be an Expr"):
        Call(Op.get("exp"), (3,))
