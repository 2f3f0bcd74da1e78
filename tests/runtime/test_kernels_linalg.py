"""matmul against onnx's reference evaluator and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from relaxpack.runtime.dtypes import numpy_dtype
from relaxpack.runtime.kernels import half_cast

from .test_kernels_registry import assert_close, rand, run_graph, run_kernel, run_onnx

SHAPES = [
    ((3, 5), (5, 7)), ((7,), (7,)), ((7,), (7, 3)), ((2, 3, 7), (7,)), ((2, 1, 3, 5), (4, 5, 6)),
    ((5, 3, 4), (4, 2)), ((0, 3), (3, 4)), ((3, 0), (0, 4)), ((2, 0, 3), (3, 5)), ((1, 1), (1, 1)),
]


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
def test_matmul(dtype, shapes):
    rng = np.random.default_rng(0)
    a, b = rand(rng, shapes[0], dtype), rand(rng, shapes[1], dtype)
    expected, = run_onnx("MatMul", [a, b])
    # float16: the reference multiplies in float16, the kernel in float32
    # and rounds once; a sum of k products differs by a few float16 ulps.
    tol = dict(rtol=5e-3, atol=5e-3) if dtype == "float16" else {}
    assert_close(run_kernel("matmul", a, b), expected, **tol)


@pytest.mark.parametrize("shapes", SHAPES[:5])
def test_matmul_float32_against_onnxruntime(shapes):
    rng = np.random.default_rng(1)
    a, b = rand(rng, shapes[0], "float32"), rand(rng, shapes[1], "float32")
    expected, = run_onnx("MatMul", [a, b], backend="ort")
    assert_close(run_kernel("matmul", a, b), expected)


def test_matmul_reads_strided_inputs():
    rng = np.random.default_rng(2)
    a = rand(rng, (6, 10), "float32")[::2, 1::2]       # (3, 5), not contiguous
    b = rand(rng, (7, 5), "float32").T                 # (5, 7), transposed
    assert_close(run_kernel("matmul", a, b), a @ b)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_matmul_with_a_wider_out_dtype_accumulates_there(dtype):
    rng = np.random.default_rng(3)
    a, b = rand(rng, (4, 33), dtype, 0, 127), rand(rng, (33, 5), dtype, 0, 127)   # sums overflow 8 bits
    nodes = [helper.make_node("MatMulInteger", ["i0", "i1"], ["o0"])]
    expected, = run_graph(nodes, [a, b], [np.int32])
    assert_close(run_kernel("matmul", a, b, out_dtype="int32"), expected)


def test_matmul_float16_to_float32():
    rng = np.random.default_rng(4)
    a, b = rand(rng, (3, 8), "float16"), rand(rng, (8, 2), "float16")
    assert_close(run_kernel("matmul", a, b, out_dtype="float32"), a.astype(np.float32) @ b.astype(np.float32))


@pytest.mark.parametrize("lhs_dtype, rhs_dtype, out_dtype", [
    ("float32", "float16", "float16"), ("float16", "float32", "float16"), ("float32", "float16", "float32"),
    ("bfloat16", "float32", "float32"),
])
@pytest.mark.parametrize("shapes", [((2, 3, 5), (2, 5, 4)), ((0, 3), (3, 4)), ((3, 0), (0, 4)), ((1, 7), (7, 1))])
def test_matmul_of_mixed_float_widths_widens_both_and_rounds_once(lhs_dtype, rhs_dtype, out_dtype, shapes):
    """float16 attention's float32 probabilities by its float16 v (``out_dtype`` named): both in
    float32, the product rounded once to ``out_dtype`` (empty and unit sizes too)."""
    from relaxpack.runtime.dtypes import numpy_dtype
    rng = np.random.default_rng(5)
    a = rand(rng, shapes[0], "float32").astype(numpy_dtype(lhs_dtype))
    b = rand(rng, shapes[1], "float32").astype(numpy_dtype(rhs_dtype))
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(numpy_dtype(out_dtype))
    got = run_kernel("matmul", a, b, out_dtype=out_dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _views_of(rng, shape, dtype, slots=2):
    """An array of ``shape`` that is a view (as the arena's tensors are), and its slot buffer."""
    buf = rand(rng, (slots,) + tuple(shape), dtype)
    return buf[0], buf


@pytest.mark.parametrize("op", ["matmul", "nn.gemm"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_one_matrix_by_a_constant_weight_is_np_matmul_bit_for_bit(op, dtype):
    """A specialized product of one matrix (a batch of one, or 2-d) by a constant 2-d weight keeps
    np.dot's 2-d views of its arena operands (one_matrix_views): np.matmul's bits over calls that
    keep the arrays (new values show through), change them, take batches of several matrices
    (not one: np.matmul's loop), non-contiguous or fresh (owning) operands, odd and unit sizes, and
    an out that shares memory with the input."""
    from relaxpack.runtime.kernels import get_kernel
    rng = np.random.default_rng(31)
    fn = get_kernel(op).fn
    attrs = {"out_dtype": None} if op == "matmul" else {"activation": None}
    call = fn.specialize_attrs(attrs, (False, True))
    w = rand(rng, (7, 5), dtype)
    kept = {}
    shapes = [(1, 3, 7), (1, 3, 7), (3, 7), (1, 1, 1, 7), (2, 3, 7), (2, 3, 7), (1, 3, 7), (1, 17, 7)]
    for shape in shapes:
        if shape not in kept:
            kept[shape] = (_views_of(rng, shape, dtype)[0], _views_of(rng, shape[:-1] + (5,), dtype)[0])
        x, out = kept[shape]
        x[...] = rand(rng, shape, dtype)                    # new values in the same arrays
        call(x, w, out=out)
        np.testing.assert_array_equal(out, np.matmul(x, w))
    x = rand(rng, (1, 4, 7), dtype)                         # owning its memory: not kept, still right
    out = np.empty((1, 4, 5), dtype)
    call(x, w, out=out)
    np.testing.assert_array_equal(out, np.matmul(x, w))
    xt = rand(rng, (1, 7, 4), dtype).transpose(0, 2, 1)     # a strided view: np.matmul's path
    out = _views_of(rng, (1, 4, 5), dtype)[0]
    for _ in range(2):
        call(xt, w, out=out)
        np.testing.assert_array_equal(out, np.matmul(xt, w))
    square = rand(rng, (7, 7), dtype)
    call_sq = fn.specialize_attrs(attrs, (False, True))
    buf = rand(rng, (1, 3, 7), dtype)
    x, out = buf[0:1], buf[0:1]                             # out is the input's memory
    for _ in range(2):
        want = np.matmul(x, square)
        call_sq(x, square, out=out)
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_gemm_into_a_new_output_each_call_is_np_matmul_bit_for_bit(dtype):
    """A classifier's head: ``nn.gemm`` of an arena view by a constant weight into a model output,
    a new array each call (fresh_out_views: np.dot of the kept matrix view into it): np.matmul's
    bits plus the bias over calls with new values, one and several rows, then an out of another
    shape, dtype or layout (a transposed view, a 3-d array), each as the generic call's."""
    from relaxpack.runtime.kernels import get_kernel
    rng = np.random.default_rng(37)
    call = get_kernel("nn.gemm").fn.specialize_attrs({"activation": None}, (False, True, True))
    w, b = rand(rng, (9, 4), dtype), rand(rng, (4,), dtype)
    for rows in (1, 1, 3, 3, 1):
        x = _views_of(rng, (rows, 9), dtype)[0]
        for _ in range(3):
            x[...] = rand(rng, (rows, 9), dtype)             # new values in the same view
            out = np.empty((rows, 4), dtype)
            call(x, w, b, out=out)
            np.testing.assert_array_equal(out, np.matmul(x, w) + b)
    x = _views_of(rng, (2, 9), dtype)[0]
    call(x, w, b, out=np.empty((2, 4), dtype))
    generic = get_kernel("nn.gemm").fn
    for out in (np.empty((4, 2), dtype).T, np.empty((1, 2, 4), dtype)[0], np.empty((2, 4), np.float16)):
        want = np.empty(out.shape, out.dtype)
        generic(x, w, b, out=want, activation=None)
        call(x, w, b, out=out)
        np.testing.assert_array_equal(out, want)
    out = np.empty((1, 2, 4), dtype)                        # a 3-d output: matmul's path
    call(x[None], w, b, out=out)
    np.testing.assert_array_equal(out, np.matmul(x[None], w) + b)


# (lhs shape before its permutation, rhs shape before its, lhs axes, rhs axes, out axes)
PERMUTED = [
    ((1, 5, 2, 16), (1, 5, 2, 16), (0, 2, 1, 3), (0, 2, 3, 1), None),          # q @ k^T from heads
    ((1, 2, 5, 5), (1, 5, 2, 16), None, (0, 2, 1, 3), (0, 2, 1, 3)),           # probs @ v, heads merged
    ((3, 2, 17, 17), (3, 17, 2, 8), None, (0, 2, 1, 3), (0, 2, 1, 3)),
    ((2, 3, 1, 4), (2, 3, 4, 1), None, None, None),                            # unit dims
    ((4, 7, 3), (4, 7, 3), (0, 2, 1), None, None),                             # lhs^T: a strided view
    ((5, 3, 4), (4, 3, 2), (2, 0, 1), None, None),                             # no unit stride: a compact copy
]


@pytest.mark.parametrize("lhs_shape, rhs_shape, lhs_axes, rhs_axes, out_axes", PERMUTED, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32"])
def test_kept_products_are_the_plain_kernels(dtype, lhs_shape, rhs_shape, lhs_axes, rhs_axes, out_axes):
    """A specialized matmul / permute_matmul of activations keeps the views of the last call's
    arena arrays and calls np.matmul on them: the plain kernel's bits over calls on the same arrays
    with new values, on other arrays (owning ones, not kept), on the same arrays after others,
    where a permuted operand is a compact copy (never kept: it would hold old values), and for the
    dtypes that do not take BLAS's branch."""
    from relaxpack.runtime.kernels import get_kernel
    rng = np.random.default_rng(7)
    attrs = {"lhs_axes": lhs_axes, "rhs_axes": rhs_axes, "out_axes": out_axes, "out_dtype": None}
    op = "permute_matmul" if lhs_axes or rhs_axes or out_axes else "matmul"
    if op == "matmul":
        attrs = {"out_dtype": None}
    call = get_kernel(op).fn.specialize_attrs(attrs, (False, False))
    expected_shape = run_kernel(op, rand(rng, lhs_shape, dtype), rand(rng, rhs_shape, dtype), **attrs).shape
    lhs, rhs = _views_of(rng, lhs_shape, dtype)[0], _views_of(rng, rhs_shape, dtype)[0]
    out = _views_of(rng, expected_shape, dtype)[0]
    fresh = (rand(rng, lhs_shape, dtype), rand(rng, rhs_shape, dtype), np.empty(expected_shape, dtype))
    for arrays in ((lhs, rhs, out), (lhs, rhs, out), fresh, fresh, (lhs, rhs, out), (lhs, rhs, out)):
        arrays[0][...], arrays[1][...] = rand(rng, lhs_shape, dtype), rand(rng, rhs_shape, dtype)
        want = run_kernel(op, arrays[0], arrays[1], **attrs)
        call(arrays[0], arrays[1], out=arrays[2])
        np.testing.assert_array_equal(arrays[2], want)
        assert arrays[2].dtype == want.dtype



@pytest.mark.parametrize("lhs_shape, rhs_shape, lhs_axes, rhs_axes, out_axes", PERMUTED, ids=str)
@pytest.mark.parametrize("fresh_side", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_a_new_operand_of_the_kept_form_is_the_plain_kernel(dtype, fresh_side, lhs_shape, rhs_shape, lhs_axes,
                                                             rhs_axes, out_axes):
    """A decoder's KV cache is a new array every run (a model input, a fresh concat) beside arena
    views kept from the last call: a new operand of the last one's shape, strides and dtype takes
    the kept call with its view made again. The plain kernel's bits over new owning arrays, new
    views of other buffers, a transposed layout of the same shape, another shape, the kept arrays
    again, an owned ``out``; an owning operand is not held past the call."""
    import weakref
    from relaxpack.runtime.kernels import get_kernel
    rng = np.random.default_rng(11)
    attrs = {"lhs_axes": lhs_axes, "rhs_axes": rhs_axes, "out_axes": out_axes, "out_dtype": None}
    op = "permute_matmul" if lhs_axes or rhs_axes or out_axes else "matmul"
    if op == "matmul":
        attrs = {"out_dtype": None}
    call = get_kernel(op).fn.specialize_attrs(attrs, (False, False))
    shapes = (lhs_shape, rhs_shape)
    expected_shape = run_kernel(op, rand(rng, lhs_shape, dtype), rand(rng, rhs_shape, dtype), **attrs).shape
    kept = _views_of(rng, shapes[1 - fresh_side], dtype)[0]
    out = _views_of(rng, expected_shape, dtype)[0]
    shape = shapes[fresh_side]
    flipped = rand(rng, shape[:-2] + shape[-1:] + shape[-2:-1], dtype).swapaxes(-1, -2)    # same shape, other strides
    other = rand(rng, shape[:-2] + (shape[-2] + 1, shape[-1]), dtype) if fresh_side == 0 and lhs_axes is None else None
    news = [rand(rng, shape, dtype), rand(rng, shape, dtype), _views_of(rng, shape, dtype)[0], flipped,
            rand(rng, shape, dtype), flipped.copy(), rand(rng, shape, dtype)]
    for new in news + ([other] if other is not None else []) + [rand(rng, shape, dtype)]:
        kept[...] = rand(rng, kept.shape, dtype)
        lhs, rhs = (new, kept) if fresh_side == 0 else (kept, new)
        want = run_kernel(op, lhs, rhs, **attrs)
        target = out if new.shape == shape else np.empty(want.shape, dtype)
        call(lhs, rhs, out=target)
        np.testing.assert_array_equal(target, want)
    owned = rand(rng, shape, dtype)
    lhs, rhs = (owned, kept) if fresh_side == 0 else (kept, owned)
    call(lhs, rhs, out=out)
    call(lhs, rhs, out=out)
    ref = weakref.ref(owned)
    del owned, lhs, rhs
    assert ref() is None
    fresh_out = np.empty(expected_shape, dtype)         # an out owning its memory: never kept
    new = rand(rng, shape, dtype)
    lhs, rhs = (new, kept) if fresh_side == 0 else (kept, new)
    for _ in range(2):
        call(lhs, rhs, out=fresh_out)
        np.testing.assert_array_equal(fresh_out, run_kernel(op, lhs, rhs, **attrs))



# (lhs dtype, rhs dtype, out dtype): float16 products as attention runs them in float32 regions
MIXED = [("float16", "float16", "float32"), ("float32", "float16", "float16"), ("float16", "float16", "float16"),
         ("float16", "float32", "float32"), ("float16", "float32", "float16")]


def _kept_widened(call) -> bool:
    """Whether a specialized product holds a float16 product's kept buffers (linalg._Widened)."""
    from relaxpack.runtime.kernels import linalg
    return any(item.__class__ is linalg._Widened for cell in call.__closure__
               if isinstance(cell.cell_contents, list) for item in cell.cell_contents)


@pytest.mark.parametrize("lhs_shape, rhs_shape, lhs_axes, rhs_axes, out_axes", PERMUTED, ids=str)
@pytest.mark.parametrize("dtypes", MIXED, ids=str)
def test_kept_float16_products_are_the_plain_kernels(dtypes, lhs_shape, rhs_shape, lhs_axes, rhs_axes, out_axes):
    """A specialized (permute_)matmul whose product takes matmul's float16 branch keeps float32
    buffers of its float16 operands (widened by assignment) and of the product for the last call's
    arena arrays: the plain kernel's bits (the same BLAS call on the same layouts, rounded once)
    over new values in the same arrays, other arrays (owning ones, never kept), the same arrays
    after others, and a permutation that needs a compact copy (not kept)."""
    from relaxpack.runtime.kernels import get_kernel
    rng = np.random.default_rng(8)
    lhs_dtype, rhs_dtype, out_dtype = dtypes
    attrs = {"lhs_axes": lhs_axes, "rhs_axes": rhs_axes, "out_axes": out_axes, "out_dtype": None}
    op = "permute_matmul" if lhs_axes or rhs_axes or out_axes else "matmul"
    if op == "matmul":
        attrs = {"out_dtype": None}
    plain = get_kernel(op).fn
    call = plain.specialize_attrs(attrs, (False, False))
    shape = run_kernel(op, rand(rng, lhs_shape, "float32"), rand(rng, rhs_shape, "float32"), **attrs).shape
    lhs, rhs = _views_of(rng, lhs_shape, lhs_dtype)[0], _views_of(rng, rhs_shape, rhs_dtype)[0]
    out = _views_of(rng, shape, out_dtype)[0]
    fresh = (rand(rng, lhs_shape, lhs_dtype), rand(rng, rhs_shape, rhs_dtype), np.empty(shape, out_dtype))
    for arrays in ((lhs, rhs, out), (lhs, rhs, out), (lhs, rhs, out), fresh, fresh, (lhs, rhs, out), (lhs, rhs, out)):
        arrays[0][...], arrays[1][...] = rand(rng, lhs_shape, lhs_dtype) * 3, rand(rng, rhs_shape, rhs_dtype) * 3
        want = np.empty(shape, out_dtype)
        plain(arrays[0], arrays[1], out=want, **attrs)
        call(arrays[0], arrays[1], out=arrays[2])
        np.testing.assert_array_equal(arrays[2].view(np.uint8), want.view(np.uint8))
    assert _kept_widened(call) != (lhs_axes == (2, 0, 1))      # a compact copy is never kept


@pytest.mark.parametrize("past", [False, True])
def test_float16_products_past_the_kept_bound_take_the_plain_kernel(past):
    """Up to WIDE_MAX_SIZE float32 values (the float16 operands and the product) are kept; past it
    every call is the plain kernel's: both sides give its bits."""
    from relaxpack.runtime.kernels import get_kernel, linalg
    rng = np.random.default_rng(9)
    rows = (linalg.WIDE_MAX_SIZE - 16 * 32) // (16 + 32) + past    # lhs (rows, 16), rhs (16, 32), product
    lhs, rhs = _views_of(rng, (rows, 16), "float16")[0], _views_of(rng, (16, 32), "float16")[0]
    out = _views_of(rng, (rows, 32), "float16")[0]
    assert (lhs.size + rhs.size + out.size > linalg.WIDE_MAX_SIZE) == past
    call = get_kernel("matmul").fn.specialize_attrs({"out_dtype": None}, (False, False))
    for _ in range(3):
        lhs[...] = rand(rng, lhs.shape, "float16")
        want = np.empty_like(out)
        get_kernel("matmul").fn(lhs, rhs, out=want, out_dtype=None)
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))
    assert _kept_widened(call) != past


@pytest.mark.parametrize("rows", [3, 4 * half_cast.WIDEN_MIN_SIZE // 16 + 1])
@pytest.mark.parametrize("lhs_dtype, out_dtype", [("float16", "float32"), ("float16", "float16"),
                                                  ("float32", "float16"), ("bfloat16", "float32")])
def test_low_float_product_by_a_constant_is_the_plain_kernels(rows, lhs_dtype, out_dtype):
    """A specialized float16 (bfloat16) product by a constant weight: its float32 copy kept, the
    operand widened (half_cast past its bar), a float32 ``out`` written by the product itself, a
    float16 one rounded from a fresh product: the plain kernel's bits, batched and 2-d, on the
    same arrays twice."""
    from relaxpack.runtime.kernels import get_kernel
    rng = np.random.default_rng(rows)
    lhs_np, out_np = numpy_dtype(lhs_dtype), numpy_dtype(out_dtype)
    weight = rand(rng, (16, 24), "float16")
    call = get_kernel("matmul").fn.specialize_attrs({"out_dtype": out_dtype}, (False, True))
    for shape in ((1, rows, 16), (rows, 16)):
        lhs = (rng.standard_normal(shape) * 3).astype(lhs_np)
        out = np.empty(shape[:-1] + (24,), out_np)
        for _ in range(2):
            want = run_kernel("matmul", lhs, weight, out_dtype=out_dtype)
            call(lhs, weight, out=out)
            assert out.dtype == want.dtype
            np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
