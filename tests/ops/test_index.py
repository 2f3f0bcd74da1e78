"""Struct-info inference of strided_slice, take and gather_elements."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import BlockBuilder, DimAnalyzer, TensorStructInfo, Var, evaluate, sym
from relaxpack.ir.dims import dim_min
from relaxpack.ops import make_call
from relaxpack.ops.definitions.index import HUGE, slice_length

b, s = sym("batch"), sym("seq")
INT64_MAX = 2 ** 63 - 1


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def infer(name, *sinfos, analyzer=None, **attrs):
    args = [Var(f"x{i}", struct_info=si) for i, si in enumerate(sinfos)]
    return BlockBuilder(analyzer=analyzer).infer_call(make_call(name, *args, **attrs))


# ---------------------------------------------------------------- strided_slice

@pytest.mark.parametrize("begin, end, step", [
    (0, 4, 1), (2, 100, 1), (-3, INT64_MAX, 1), (-100, 3, 1), (5, 2, 1), (1, 9, 3),
    (-1, -INT64_MAX, -1), (8, 1, -2), (100, -100, -1), (3, 3, 1), (-2, -1, 1), (0, -1, 4),
])
def test_strided_slice_clamps_like_numpy(begin, end, step):
    out = infer("strided_slice", T((b, 10)), axes=(1,), begin=(begin,), end=(end,), strides=(step,))
    assert out == T((b, len(np.arange(10)[begin:end:step])))


def test_strided_slice_several_axes_and_defaults():
    out = infer("strided_slice", T((4, 10, 6)), axes=(0, -1), begin=(1, 0), end=(3, 6), strides=(1, 2))
    assert out == T((2, 10, 3))
    assert infer("strided_slice", T((4, 10)), axes=(1,), begin=(2,), end=(5,)) == T((4, 3))


def test_strided_slice_symbolic_dims():
    ana = DimAnalyzer({"seq": (4, 512)})
    cases = [
        ((0,), (2,), (1,), 2),                   # end provably inside the dim
        ((1,), (INT64_MAX,), (1,), s - 1),       # to the end
        ((0,), (-1,), (1,), s - 1),
        ((-1,), (INT64_MAX,), (1,), 1),
        ((0,), (INT64_MAX,), (2,), (s + 1) // 2),
        ((-1,), (-INT64_MAX,), (-1,), s),        # reversed
    ]
    for begin, end, step, length in cases:
        out = infer("strided_slice", T((b, s)), axes=(1,), begin=begin, end=end, strides=step, analyzer=ana)
        assert out == T((b, length)), (begin, end, step)


def test_strided_slice_unprovable_bound_gives_exact_min_max_dims():
    # seq may be shorter than 4: the length is min(seq, 4), evaluated at run time
    assert infer("strided_slice", T((b, s, 8)), axes=(1,), begin=(0,), end=(4,)) == T((b, dim_min(s, 4), 8))
    # seq may be 0: the length is max(seq - 1, 0), in some equivalent form
    out = infer("strided_slice", T((b, s)), axes=(1,), begin=(1,), end=(INT64_MAX,))
    assert [evaluate(out.shape[1], {"seq": n}) for n in range(5)] == [0, 0, 1, 2, 3]
    assert infer("strided_slice", T(None, ndim=2), axes=(1,), begin=(0,), end=(1,)) == T(None, ndim=2)


def onnx_slice_length(n: int, begin: int, end: int, step: int) -> int:
    """The ONNX Slice spec's length, written out (it clamps unlike Python for a
    negative step and a start before -n: to element 0, not to an empty slice)."""
    begin, end = begin + n if begin < 0 else begin, end + n if end < 0 else end
    if step > 0:
        begin, end = min(max(begin, 0), n), min(max(end, 0), n)
    else:
        begin, end = min(max(begin, 0), n - 1), min(max(end, -1), n - 1)
    return max(0, -(-(end - begin) // step))


@settings(max_examples=300, deadline=None)
@given(lo=st.integers(0, 6), width=st.integers(0, 6), begin=st.integers(-12, 12), end=st.integers(-12, 12),
       step=st.sampled_from([-3, -2, -1, 1, 2, 3]), big_end=st.booleans())
def test_slice_length_is_sound(lo, width, begin, end, step, big_end):
    """Whenever a symbolic length is given, it is the ONNX length for every dim in range."""
    if big_end:
        end = HUGE if step > 0 else -HUGE
    ana = DimAnalyzer({"n": (lo, lo + width)})
    length = slice_length(sym("n"), begin, end, step, ana)
    for n in range(lo, lo + width + 1):
        assert evaluate(length, {"n": n}) == onnx_slice_length(n, begin, end, step)
        assert slice_length(n, begin, end, step, ana) == onnx_slice_length(n, begin, end, step)


def test_strided_slice_errors():
    with pytest.raises(IRError, match=r"R\.strided_slice: axes \(0,\), begin \(0, 1\), end \(1,\) and strides "
                                      r"\(1,\) must have the same length"):
        infer("strided_slice", T((4, 4)), axes=(0,), begin=(0, 1), end=(1,))
    with pytest.raises(IRError, match=r"R\.strided_slice: strides must be nonzero"):
        infer("strided_slice", T((4, 4)), axes=(0,), begin=(0,), end=(1,), strides=(0,))
    with pytest.raises(ShapeError, match=r"R\.strided_slice: axis 2 is out of range for a tensor of rank 2 "
                                         r"of shape \(4, 4\)"):
        infer("strided_slice", T((4, 4)), axes=(2,), begin=(0,), end=(1,))
    with pytest.raises(IRError, match=r"R\.strided_slice needs attribute\(s\) \['end'\]"):
        make_call("strided_slice", Var("x", struct_info=T((4,))), axes=(0,), begin=(0,))


# ---------------------------------------------------------------- take

@pytest.mark.parametrize("data, indices, axis, out", [
    ((50257, 768), (b, s), 0, (b, s, 768)),          # embedding lookup
    ((b, s, 768), (), 1, (b, 768)),                  # scalar index drops the axis
    ((b, s, 768), (3,), -1, (b, s, 3)),
    ((4, 5, 6), (2, 7), 1, (4, 2, 7, 6)),
])
def test_take(data, indices, axis, out):
    assert infer("take", T(data), T(indices, "int64"), axis=axis) == T(out)


def test_take_unknowns_and_errors():
    assert infer("take", T((10, 4)), T(None, "int32", ndim=2)) == T(None, ndim=3)
    assert infer("take", T((10, 4)), T(None, "int32")) == T(None)
    with pytest.raises(ShapeError, match=r"R\.take: indices must have an integer dtype, got float32"):
        infer("take", T((10, 4)), T((3,)))
    with pytest.raises(ShapeError, match=r"R\.take: axis 2 is out of range for a tensor of rank 2"):
        infer("take", T((10, 4)), T((3,), "int64"), axis=2)


def test_gather_elements():
    assert infer("gather_elements", T((b, 8)), T((b, 3), "int64"), axis=1) == T((b, 3))
    with pytest.raises(ShapeError, match=r"R\.gather_elements: data \(batch, 8\) and indices \(3,\) must have "
                                         r"the same rank"):
        infer("gather_elements", T((b, 8)), T((3,), "int64"))
