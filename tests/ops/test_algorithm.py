"""Struct-info inference of einsum, topk, cumsum, one_hot, trilu, range, tile and nonzero."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import (
    BlockBuilder, DimAnalyzer, Expr, PrimStructInfo, PrimValue, TensorStructInfo, Tuple, TupleStructInfo,
    Var, evaluate, sym,
)
from relaxpack.ir.dims import dim_max
from relaxpack.ops import get_op_def, make_call
from relaxpack.ops.definitions.algorithm import parse_einsum

b, s, n = sym("batch"), sym("seq"), sym("n")


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def arg(x, i=0):
    if isinstance(x, Expr):
        return x
    if isinstance(x, tuple):
        return Tuple(tuple(arg(f, f"{i}_{j}") for j, f in enumerate(x)))
    return Var(f"x{i}", struct_info=x)


def infer(name, *args, analyzer=None, **attrs):
    call = make_call(name, *[arg(a, i) for i, a in enumerate(args)], **attrs)
    return BlockBuilder(analyzer=analyzer).infer_call(call)


def test_every_op_has_a_doc():
    for name in ("einsum", "topk", "cumsum", "one_hot", "trilu", "range", "tile", "nonzero"):
        doc = get_op_def(name).doc
        assert doc and "\n" not in doc, name


# ---------------------------------------------------------------- einsum

@pytest.mark.parametrize("equation, inputs, output", [
    ("ij,jk->ik", (("i", "j"), ("j", "k")), ("i", "k")),
    ("ij,jk", (("i", "j"), ("j", "k")), ("i", "k")),            # implicit: labels seen once, sorted
    ("ba", (("b", "a"),), ("a", "b")),
    ("bA", (("b", "A"),), ("A", "b")),                          # upper case sorts first, as in numpy
    ("ii", (("i", "i"),), ()),                                  # trace
    ("...ij,...jk", (("...", "i", "j"), ("...", "j", "k")), ("...", "i", "k")),
    (" i j , j -> i ", (("i", "j"), ("j",)), ("i",)),           # spaces are ignored
    ("i...->...i", (("i", "..."),), ("...", "i")),
    ("->", ((),), ()),
])
def test_parse_einsum(equation, inputs, output):
    eq = parse_einsum(equation)
    assert eq.inputs == inputs and eq.output == output


@pytest.mark.parametrize("equation, message", [
    ("ij->i->j", "more than one '->'"), ("i1,j", "invalid character '1'"), ("i.j", "invalid character"),
    ("......i", "more than one '...'"), ("ij->ii", "repeats a label"), ("ij->k", "k occur in no input"),
])
def test_parse_einsum_errors(equation, message):
    with pytest.raises(ValueError, match=message):
        parse_einsum(equation)


@pytest.mark.parametrize("equation, shapes, out", [
    ("ij,jk->ik", [(2, 3), (3, 4)], (2, 4)),
    ("ij,jk", [(2, 3), (3, 4)], (2, 4)),
    ("bij,bjk->bik", [(b, s, 8), (b, 8, s)], (b, s, s)),
    ("bhqd,bhkd->bhqk", [(b, 12, s, 64), (b, 12, s, 64)], (b, 12, s, s)),
    ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 6)], (2, 5, 3, 6)),  # ellipsis dims broadcast
    ("...ii->...i", [(b, 3, 3)], (b, 3)),                      # batch diagonal
    ("i,i->i", [(1,), (n,)], (n,)),                             # a size-1 label dim broadcasts
    ("i,i", [(5,), (5,)], ()),                                  # inner product
    ("ij->", [(b, 7)], ()),
    ("ij->ji", [(0, 3)], (3, 0)),
    ("...->...", [()], ()),
    ("i...j->j...i", [(2, 3, 4, 5)], (5, 3, 4, 2)),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], (2, 5)),
])
def test_einsum_shapes(equation, shapes, out):
    assert infer("einsum", tuple(T(sh) for sh in shapes), equation=equation) == T(out)


def test_einsum_unknown_shapes_and_ranks():
    assert infer("einsum", (T(None, ndim=2), T((3, 4))), equation="ij,jk->ik") == T(None, ndim=2)
    assert infer("einsum", (T(None, ndim=4), T((3, 4))), equation="...ij,jk") == T(None, ndim=4)
    assert infer("einsum", (T(None), T((3, 4))), equation="...ij,jk") == T(None)
    assert infer("einsum", (T(None), T((3, 4))), equation="ij,jk->ki") == T(None, ndim=2)
    assert infer("einsum", (T((2, 3), None), T((3, 4))), equation="ij,jk") == T((2, 4), None)


def test_einsum_symbolic_dims_proved_equal_with_ranges():
    ana = DimAnalyzer({"n": (4, 4)})
    assert infer("einsum", (T((n, 3)), T((4, 5))), equation="ij,ik->jk", analyzer=ana) == T((3, 5))


@pytest.mark.parametrize("equation, shapes, message", [
    ("ij,jk->ik", [(2, 3), (4, 5)], r"label 'j' has dims 3 and 4, which differ and neither is 1"),
    ("ij,jk->ik", [(2, n), (s, 5)], r"label 'j' has dims n and seq, which are not provably equal"),
    ("ij,jk->ik", [(2, 3)], r"has 2 input term\(s\) but 1 operand\(s\) are given"),
    ("ij->i", [(2, 3, 4)], r"term 'ij' does not fit operand 0 of rank 3"),
    ("...ij->i", [(2, 3, 4)], r"no '\.\.\.'"),
    ("ii->i", [(2, 3)], r"label 'i' of operand 0 \(2, 3\) takes a diagonal of unequal dims: 2 != 3"),
    ("ij->k", [(2, 3)], r"invalid equation 'ij->k': output label\(s\) k occur in no input term"),
    ("...ij,...jk", [(2, 3, 4), (5, 4, 6)], r"cannot broadcast shapes \(2,\) and \(5,\)"),
])
def test_einsum_errors(equation, shapes, message):
    with pytest.raises(ShapeError, match=r"R\.einsum: .*" + message):
        infer("einsum", tuple(T(sh) for sh in shapes), equation=equation)


def test_einsum_dtype_errors():
    with pytest.raises(ShapeError, match=r"R\.einsum: operands must have the same dtype, got float32"):
        infer("einsum", (T((2, 3)), T((3, 4), "float16")), equation="ij,jk")
    with pytest.raises(ShapeError, match=r"R\.einsum: operand 0 must have a numeric"):
        infer("einsum", (T((2, 3), "bool"),), equation="ij")
    with pytest.raises(ShapeError, match=r"R\.einsum: argument 0 \(operands\) must be a tuple"):
        infer("einsum", T((2, 3)), equation="ij")
    with pytest.raises(IRError, match="equation must be a string"):
        infer("einsum", (T((2, 3)),), equation=3)


# ---------------------------------------------------------------- topk

@pytest.mark.parametrize("shape, k, axis, out", [
    ((5, 7), 3, -1, (5, 3)), ((5, 7), 5, 0, (5, 7)), ((5, 7), 0, 1, (5, 0)), ((b, s), 4, 0, (4, s)),
    ((b, 10), 10, 1, (b, 10)), ((0, 4), 2, 1, (0, 2)),
])
def test_topk_shapes(shape, k, axis, out):
    values, indices = infer("topk", T(shape), k=k, axis=axis).fields
    assert values == T(out) and indices == T(out, "int64")


def test_topk_unknown_shapes_and_defaults():
    call = make_call("topk", arg(T((3, 4))), k=2)
    assert call.attrs == {"k": 2, "axis": -1, "largest": True, "sorted": True}
    assert infer("topk", T(None, ndim=2), k=2) == TupleStructInfo((T(None, ndim=2), T(None, "int64", ndim=2)))
    assert infer("topk", T(None), k=2) == TupleStructInfo((T(None), T(None, "int64")))


def test_topk_errors():
    with pytest.raises(ShapeError, match=r"R\.topk: k=8 is larger than dim 1 of the data \(5, 7\)"):
        infer("topk", T((5, 7)), k=8)
    with pytest.raises(ShapeError, match=r"R\.topk: k=8 is larger than dim 1 of the data \(5, n\)"):
        infer("topk", T((5, n)), k=8, analyzer=DimAnalyzer({"n": (1, 6)}))
    with pytest.raises(ShapeError, match=r"R\.topk: axis 2 is out of range for a tensor of rank 2"):
        infer("topk", T((5, 7)), k=1, axis=2)
    with pytest.raises(ShapeError, match=r"R\.topk: cannot take the top k of a scalar"):
        infer("topk", T(()), k=1)
    with pytest.raises(ShapeError, match=r"R\.topk: data must have a numeric"):
        infer("topk", T((3,), "bool"), k=1)
    with pytest.raises(IRError, match=r"R\.topk: k must be non-negative"):
        infer("topk", T((3,)), k=-1)
    with pytest.raises(IRError, match=r"R\.topk: attribute largest must be a bool"):
        infer("topk", T((3,)), k=1, largest=1)
    # a symbolic dim that may be large enough is accepted (the kernel checks it)
    assert infer("topk", T((n,)), k=8).fields[0] == T((8,))


# ---------------------------------------------------------------- cumsum

def test_cumsum():
    for shape in [(5,), (b, s, 3), (0, 4)]:
        assert infer("cumsum", T(shape, "int32"), axis=-1, exclusive=True) == T(shape, "int32")
    assert infer("cumsum", T(None), axis=3) == T(None)
    assert make_call("cumsum", arg(T((3,))), axis=0).attrs == {"axis": 0, "exclusive": False, "reverse": False}


def test_cumsum_errors():
    with pytest.raises(ShapeError, match=r"R\.cumsum: axis 2 is out of range for a tensor of rank 2 of shape \(b"):
        infer("cumsum", T((b, 3)), axis=2)
    with pytest.raises(ShapeError, match=r"R\.cumsum: needs a tensor of rank >= 1, got a scalar"):
        infer("cumsum", T(()), axis=0)
    with pytest.raises(ShapeError, match=r"R\.cumsum: data must have a numeric"):
        infer("cumsum", T((3,), "bool"), axis=0)
    with pytest.raises(IRError, match=r"R\.cumsum needs attribute\(s\) \['axis'\]"):
        infer("cumsum", T((3,)))


@pytest.mark.parametrize("op, attr", [("cumsum", "axis"), ("trilu", "k")])
def test_axis_or_k_as_a_run_time_argument(op, attr):
    """The output shape is the input's whatever the value: a second argument carries it."""
    for value in [T((), "int64"), T((1,), "int32"), T((n,), "int64")]:
        assert infer(op, T((b, s, 3)), value, **{attr: None}) == T((b, s, 3))
    with pytest.raises(ShapeError, match=rf"R\.{op}: the {attr} argument must hold one int, got \(2,\)"):
        infer(op, T((b, s, 3)), T((2,), "int64"), **{attr: None})
    with pytest.raises(ShapeError, match=rf"R\.{op}: {attr} must have an integer dtype, got float32"):
        infer(op, T((b, s, 3)), T((), "float32"), **{attr: None})
    with pytest.raises(IRError, match=rf"R\.{op}: attribute {attr} must be None when argument 1 gives it"):
        infer(op, T((b, s, 3)), T((), "int64"), **{attr: 1})


# ---------------------------------------------------------------- one_hot

@pytest.mark.parametrize("shape, depth, axis, out", [
    ((b, s), 10, -1, (b, s, 10)), ((b, s), 10, 0, (10, b, s)), ((b, s), 10, 1, (b, 10, s)),
    ((b, s), 10, -2, (b, 10, s)), ((), 4, -1, (4,)), ((3,), 0, -1, (3, 0)),
])
def test_one_hot_shapes(shape, depth, axis, out):
    assert infer("one_hot", T(shape, "int64"), T((2,), "float16"), depth=depth, axis=axis) == T(out, "float16")


def test_one_hot_unknown_and_errors():
    assert infer("one_hot", T(None, "int64", ndim=2), T((2,)), depth=3) == T(None, ndim=3)
    assert infer("one_hot", T(None, "int64"), T((2,)), depth=3) == T(None)
    with pytest.raises(ShapeError, match=r"R\.one_hot: axis 3 is out of range for a tensor of rank 3"):
        infer("one_hot", T((2, 3), "int64"), T((2,)), depth=3, axis=3)
    with pytest.raises(ShapeError, match=r"R\.one_hot: values must be a 1-D tensor \[off_value, on_value\], "
                                         r"got \(3,\)"):
        infer("one_hot", T((2,), "int64"), T((3,)), depth=3)
    with pytest.raises(ShapeError, match=r"values must be a 1-D tensor .*got \(1, 2\)"):
        infer("one_hot", T((2,), "int64"), T((1, 2)), depth=3)
    with pytest.raises(ShapeError, match=r"R\.one_hot: indices must have a numeric"):
        infer("one_hot", T((2,), "bool"), T((2,)), depth=3)
    with pytest.raises(IRError, match=r"R\.one_hot: depth must be non-negative, got -1"):
        infer("one_hot", T((2,), "int64"), T((2,)), depth=-1)


# ---------------------------------------------------------------- trilu

def test_trilu():
    for shape in [(3, 4), (b, s, s), (0, 2)]:
        assert infer("trilu", T(shape, "bool"), upper=False, k=-1) == T(shape, "bool")
    assert infer("trilu", T(None)) == T(None)
    assert make_call("trilu", arg(T((3, 3)))).attrs == {"upper": True, "k": 0}
    with pytest.raises(ShapeError, match=r"R\.trilu: needs a tensor of rank >= 2 \(a batch of matrices\), got \(5,\)"):
        infer("trilu", T((5,)))
    with pytest.raises(IRError, match=r"R\.trilu: attribute k must be an int"):
        infer("trilu", T((5, 5)), k=1.5)


# ---------------------------------------------------------------- range

def P(v, dtype="int64"):
    return PrimValue(v, dtype)


@pytest.mark.parametrize("start, limit, delta, length", [
    (0, 5, 1, 5), (0, 5, 2, 3), (5, 0, 1, 0), (10, 4, -2, 3), (3, 3, 1, 0), (-3, 4, 3, 3), (4, -3, -3, 3),
])
def test_range_static(start, limit, delta, length):
    assert length == len(range(start, limit, delta))
    assert infer("range", P(start), P(limit), P(delta), dtype="int32") == T((length,), "int32")


def test_range_float_bounds():
    out = infer("range", P(0.5, "float32"), P(3.2, "float32"), P(0.7, "float32"), dtype="float32")
    assert out == T((len(np.arange(0.5, 3.2, 0.7)),))
    assert infer("range", P(1.0, "float64"), P(0.0, "float64"), P(0.5, "float64"), dtype="float64") == \
        T((0,), "float64")


def test_range_symbolic_limit_is_the_dim():
    assert infer("range", P(0), P(s), P(1), dtype="int64") == T((s,), "int64")
    assert infer("range", P(s - 1), P(-1), P(-1), dtype="int64") == T((s,), "int64")     # reversed
    assert infer("range", P(1), P(s), P(1), dtype="int64") == T((dim_max(s - 1, 0),), "int64")
    ana = DimAnalyzer({"seq": (1, 512)})
    assert infer("range", P(1), P(s), P(1), dtype="int64", analyzer=ana) == T((s - 1,), "int64")
    assert infer("range", P(0), P(s), P(4), dtype="int64") == T(((s + 3) // 4,), "int64")


@settings(max_examples=200, deadline=None)
@given(st.integers(-20, 20), st.integers(-20, 20), st.sampled_from([-7, -3, -2, -1, 1, 2, 3, 5]),
       st.integers(0, 30), st.booleans())
def test_range_symbolic_length_is_exact(start, offset, delta, value, in_limit):
    # the inferred length, evaluated at seq = value, is numpy's arange length
    first, stop = (P(start), P(s + offset)) if in_limit else (P(s + offset), P(start))
    length, = infer("range", first, stop, P(delta), dtype="int64").shape
    a, c = (start, value + offset) if in_limit else (value + offset, start)
    assert evaluate(length, {"seq": value}) == len(range(a, c, delta))


def test_range_unknown_bounds_give_the_rank():
    v = Var("v", struct_info=PrimStructInfo("int64"))
    assert infer("range", P(0), v, P(1), dtype="int64") == T(None, "int64", ndim=1)
    assert infer("range", P(0), P(s), P(n), dtype="int64") == T(None, "int64", ndim=1)   # symbolic delta


def test_range_errors():
    with pytest.raises(ShapeError, match=r"R\.range: delta must not be 0 \(start 0, limit seq\)"):
        infer("range", P(0), P(s), P(0), dtype="int64")
    with pytest.raises(ShapeError, match=r"R\.range: cannot mix float and symbolic bounds"):
        infer("range", P(0.5, "float32"), P(s), P(1), dtype="float32")
    with pytest.raises(IRError, match=r"R\.range: dtype must be an int or float dtype, got 'bool'"):
        infer("range", P(0), P(3), P(1), dtype="bool")
    with pytest.raises(ShapeError, match=r"R\.range: argument 1 \(limit\) must be a prim value, got \(3,\)"):
        infer("range", P(0), T((3,), "int64"), P(1), dtype="int64")


# ---------------------------------------------------------------- tile

def test_tile():
    assert infer("tile", T((b, 3)), repeats=(2, 4)) == T((2 * b, 12))
    assert infer("tile", T((b, s, 3), "bool"), repeats=(1, 1, 0)) == T((b, s, 0), "bool")
    assert infer("tile", T(()), repeats=()) == T(())
    assert infer("tile", T(None, ndim=2), repeats=(2, 2)) == T(None, ndim=2)
    assert infer("tile", T(None), repeats=(2, 2)) == T(None, ndim=2)
    with pytest.raises(ShapeError, match=r"R\.tile: 1 repeats \(2,\) for a tensor of rank 2 \(batch, 3\)"):
        infer("tile", T((b, 3)), repeats=(2,))
    with pytest.raises(IRError, match=r"R\.tile: repeats must be non-negative"):
        infer("tile", T((3,)), repeats=(-1,))
    with pytest.raises(IRError, match=r"R\.tile: attribute repeats must be a tuple of ints"):
        infer("tile", T((3,)), repeats=(s,))


# ---------------------------------------------------------------- nonzero

def test_nonzero_has_a_data_dependent_size():
    assert infer("nonzero", T((b, 4), "bool")) == T(None, "int64", ndim=2)


# ---------------------------------------------------------------- text round trip

def test_text_round_trip():
    from relaxpack.ir import parse
    from relaxpack.ir.equality import structural_equal

    x = Var("x", struct_info=T((b, s)))
    idx = Var("idx", struct_info=T((b,), "int64"))
    vals = Var("vals", struct_info=T((2,)))
    bb = BlockBuilder()
    with bb.function("main", [x, idx, vals]):
        e = bb.emit(make_call("einsum", Tuple((x, x)), equation="bi,bj->bij"))
        bb.emit(make_call("topk", x, k=2, largest=False))
        bb.emit(make_call("cumsum", x, axis=1, reverse=True))
        bb.emit(make_call("one_hot", idx, vals, depth=5, axis=0))
        bb.emit(make_call("trilu", e, upper=False, k=-1))
        bb.emit(make_call("range", P(0), P(s), P(1), dtype="int32"))
        bb.emit(make_call("range", P(0.5, "float32"), P(2.0, "float32"), P(0.5, "float32"), dtype="float32"))
        out = bb.emit(make_call("tile", x, repeats=(2, 1)))
        bb.emit_func_output(out)
    mod = bb.get()
    text = mod.script()
    assert "R.einsum((x, x), equation=\"bi,bj->bij\")" in text
    assert structural_equal(parse(text), mod)
