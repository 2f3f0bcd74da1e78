"""matmul against onnx's reference evaluator and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

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
