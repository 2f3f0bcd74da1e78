"""The shared helpers (broadcasting, exact division, messages) and the
registry contract every definition keeps."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import DimAnalyzer, DimExpr, Op, TensorStructInfo, Var, evaluate, sym
from relaxpack.ir.expr import Call
from relaxpack.ops import REQUIRED, get_op_def, make_call, registered_ops
from relaxpack.ops.definitions.common import (
    broadcast_shapes, exact_div, fmt_shape, fmt_sinfo, normalize_axes, normalize_axis,
)

b, s = sym("batch"), sym("seq")
ADD = Call(Op.get("add"))


def test_every_op_is_documented_with_immutable_defaults():
    immutable = (int, float, bool, str, type(None), tuple, DimExpr)
    ops = registered_ops()
    assert len(ops) >= 100
    for name in ops:
        opdef = get_op_def(name)
        assert opdef.doc and "\n" not in opdef.doc, name
        for attr, default in opdef.attrs.items():
            assert default is REQUIRED or isinstance(default, immutable), (name, attr)


def test_make_call_checks_the_schema():
    x = Var("x", struct_info=TensorStructInfo((4,), "float32"))
    with pytest.raises(IRError, match=r"R\.nn\.softmax has no attribute\(s\) \['dim'\]; it takes \['axis'\]"):
        make_call("nn.softmax", x, dim=1)
    with pytest.raises(IRError, match=r"R\.astype needs attribute\(s\) \['dtype'\]"):
        make_call("astype", x)
    with pytest.raises(IRError, match=r"R\.add takes 2 arguments, got 1"):
        make_call("add", x)
    call = make_call("sum", x, axis=[0])               # lists are frozen to tuples
    assert call.attrs == {"axis": (0,), "keepdims": False}


def test_messages_format_shapes():
    assert fmt_shape((b, 4)) == "(batch, 4)"
    assert fmt_shape((s,)) == "(seq,)"
    assert fmt_shape(()) == "()"
    assert fmt_sinfo(TensorStructInfo(None, "float32", ndim=2)) == "R.Tensor(ndim=2)"
    assert fmt_sinfo(TensorStructInfo((2 * b + 1, 3), "float32")) == "(2 * batch + 1, 3)"


def test_axes():
    assert normalize_axis(ADD, -1, 3) == 2
    assert normalize_axes(ADD, (0, -1), 2) == (0, 1)
    with pytest.raises(ShapeError, match=r"R\.add: axis -3 is out of range for a tensor of rank 2"):
        normalize_axis(ADD, -3, 2)
    with pytest.raises(ShapeError, match=r"R\.add: repeated axis in \(1, -1\) for rank 2"):
        normalize_axes(ADD, (1, -1), 2)


static_shape = st.lists(st.integers(1, 4), max_size=4).map(tuple)


@settings(max_examples=300, deadline=None)
@given(shapes=st.lists(static_shape, min_size=2, max_size=3))
def test_static_broadcasting_matches_numpy(shapes):
    try:
        expected = np.broadcast_shapes(*shapes)
    except ValueError:
        with pytest.raises(ShapeError, match=r"R\.add: cannot broadcast shapes"):
            broadcast_shapes(ADD, shapes, DimAnalyzer())
    else:
        assert broadcast_shapes(ADD, shapes, DimAnalyzer()) == expected


@settings(max_examples=200, deadline=None)
@given(k=st.integers(1, 64), coeffs=st.lists(st.integers(-5, 5), min_size=3, max_size=3),
       divisor=st.sampled_from([1, 2, 3, 12]), sym_div=st.booleans())
def test_exact_div_is_exact(k, coeffs, divisor, sym_div):
    """When exact_div answers, quotient * divisor == dividend, as dims and in value."""
    c0, c1, c2 = coeffs
    d = divisor * b if sym_div else divisor
    x = k * d * (c0 * s + c1 * b * s + c2) if (c0, c1, c2) != (0, 0, 0) else k * d
    q = exact_div(x, d, DimAnalyzer())
    assert q is not None
    assert q * d == x
    for env in ({"batch": 3, "seq": 5}, {"batch": 1, "seq": 0}):
        assert evaluate(q, env) * evaluate(d, env) == evaluate(x, env)


def test_exact_div_refuses_inexact():
    ana = DimAnalyzer()
    assert exact_div(3 * b, 2, ana) is None
    assert exact_div(b * s + 1, b, ana) is None
    assert exact_div(b + s, b, ana) is None
    assert exact_div(b * s, s + 1, ana) is None
    assert exact_div(768 * b * s, 12 * b * s, ana) == 64
    assert exact_div(6 * b, -3, ana) == -2 * b
