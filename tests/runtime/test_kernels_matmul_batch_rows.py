"""A batch of products by one large matrix runs as one GEMM of the batch's rows (linalg.batch_rows).

numpy's matmul makes one GEMM per batch entry, each reading the whole right operand again: a
transformer's projection of a (batch, sequence, hidden) activation by a 768 x 2304 weight read
the weight once per sample (or per token, for torch's MultiheadAttention, whose lhs is a
permuted view). These tests pin the contract: the product is the 2-d GEMM of the rows, bit for
bit, through the generic kernel and every specialized path that keeps views.
"""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import gemm_panels, get_kernel, linalg

from .test_kernels_registry import rand

K, N = 256, 512         # a float32 rhs of exactly linalg.FOLD_MIN_RHS_BYTES


@pytest.fixture(autouse=True)
def _one_gemm(monkeypatch):
    """The fold's contract, where a few rows are not small products by panels (another BLAS, or
    more threads): float32's panels are tests/runtime/test_kernels_gemm_panels.py's."""
    monkeypatch.setattr(gemm_panels, "available", lambda: False)


def _rows_product(lhs, rhs):
    """The one GEMM of ``lhs``'s rows by ``rhs``, shaped as the batch's product."""
    rows = np.ascontiguousarray(lhs).reshape(-1, lhs.shape[-1])
    return np.matmul(rows, rhs).reshape(lhs.shape[:-1] + (rhs.shape[-1],))


def _arena_view(shape, dtype):
    """A C-contiguous view into a larger buffer, as the arena hands out (its base is not None)."""
    size = int(np.prod(shape))
    return np.empty(size + 8, dtype)[4:4 + size].reshape(shape)


class _MatmulSpy:
    """np.matmul, recording the shapes of its operands."""

    def __init__(self):
        self.real, self.calls = np.matmul, []

    def __call__(self, a, b, *args, **kwargs):
        self.calls.append((np.shape(a), np.shape(b)))
        return self.real(a, b, *args, **kwargs)


def test_the_bar_is_a_float32_256_by_512_matrix():
    assert K * N * 4 == linalg.FOLD_MIN_RHS_BYTES


@pytest.mark.parametrize("shape, permuted", [((7, 17, K), False), ((3, 2, 5, K), False), ((4, 1, K), False),
                                             ((17, 7, K), True)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_batch_by_a_large_matrix_is_one_gemm_of_its_rows(monkeypatch, shape, permuted, dtype):
    """The generic kernel: one np.matmul of all the rows (a permuted lhs copied compact first), the
    rows' product bit for bit, and the float64 product's values."""
    rng = np.random.default_rng(3)
    lhs = rand(rng, shape, dtype)
    if permuted:        # torch MultiheadAttention's (sequence, batch, hidden) view of (batch, sequence, hidden)
        lhs = rand(rng, (shape[1], shape[0], K), dtype).transpose(1, 0, 2)
    rhs = rand(rng, (K, N), dtype)
    out = np.empty(shape[:-1] + (N,), dtype)
    spy = _MatmulSpy()
    monkeypatch.setattr(np, "matmul", spy)
    linalg.matmul(lhs, rhs, out=out, out_dtype=None)
    monkeypatch.undo()
    rows = int(np.prod(shape[:-1]))
    assert spy.calls == [((rows, K), (K, N))]
    np.testing.assert_array_equal(out, _rows_product(lhs, rhs))
    np.testing.assert_allclose(out, lhs.astype(np.float64) @ rhs.astype(np.float64),
                               rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-3 if dtype == "float32" else 1e-10)


def test_a_smaller_matrix_or_a_strided_out_keeps_numpy_batches(monkeypatch):
    """Below the bar (the per-entry GEMMs may take OpenBLAS's small kernels) and into an out that is
    not C-contiguous (its rows are no matrix), the batch is np.matmul's."""
    rng = np.random.default_rng(5)
    lhs = rand(rng, (3, 4, K), "float32")
    small = rand(rng, (K, N - 1), "float32")
    large = rand(rng, (K, N), "float32")
    strided = np.empty((4, 3, N), np.float32).transpose(1, 0, 2)
    for rhs, out in ((small, np.empty((3, 4, N - 1), np.float32)), (large, strided)):
        spy = _MatmulSpy()
        monkeypatch.setattr(np, "matmul", spy)
        linalg.matmul(lhs, rhs, out=out, out_dtype=None)
        monkeypatch.undo()
        assert spy.calls == [((3, 4, K), rhs.shape)]
        np.testing.assert_array_equal(out, np.matmul(lhs, rhs))


def _generic(op, attrs, *args):
    """The plain kernel's result of ``op`` on ``args``."""
    fn = get_kernel(op).fn
    lhs, rhs = args[0], args[1]
    shape = (lhs.transpose(attrs["lhs_axes"]) if attrs.get("lhs_axes") else lhs).shape[:-1] + (rhs.shape[-1],)
    out = np.empty(shape, lhs.dtype)
    fn(*args, out=out, **attrs)
    return out


# (op, attributes, which operands are constants, lhs shape as stored)
KEPT = [
    ("matmul", {"out_dtype": None}, (False, True), (7, 17, K)),
    ("matmul", {"out_dtype": None}, (False, False), (7, 17, K)),
    ("nn.gemm", {"activation": None}, (False, True, True), (7, 17, K)),
    ("nn.gemm", {"activation": "relu"}, (False, True, True), (2, 3, 5, K)),
    ("permute_matmul", {"lhs_axes": (1, 0, 2), "rhs_axes": None, "out_axes": None, "out_dtype": None},
     (False, True), (7, 17, K)),
    ("permute_matmul", {"lhs_axes": None, "rhs_axes": None, "out_axes": None, "out_dtype": None},
     (False, False), (3, 5, K)),
]


@pytest.mark.parametrize("op, attrs, constant, shape", KEPT, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_kept_batch_products_are_the_plain_kernel(op, attrs, constant, shape, dtype):
    """Every specialized path that keeps views (matmul and nn.gemm by a constant: one_matrix_views;
    products of activations and permuted ones: _blas_views) gives the plain kernel's bits, which
    are the rows' product: over calls on the same arena arrays with new values, on an lhs owning
    its memory (a model input), and on the arena arrays again."""
    rng = np.random.default_rng(13)
    call = get_kernel(op).fn.specialize_attrs(attrs, constant)
    rhs = rand(rng, (K, N), dtype)
    extra = (rand(rng, (N,), dtype),) if op == "nn.gemm" else ()
    lhs = _arena_view(shape, dtype)
    stored = lhs.transpose(attrs["lhs_axes"]) if attrs.get("lhs_axes") else lhs
    out = _arena_view(stored.shape[:-1] + (N,), dtype)
    owned = rand(rng, shape, dtype)
    for x in (lhs, lhs, owned, owned, lhs):
        x[...] = rand(rng, shape, dtype)
        target = out if x is lhs else np.empty(out.shape, dtype)
        call(x, rhs, *extra, out=target)
        want = _generic(op, attrs, x, rhs, *extra)
        np.testing.assert_array_equal(target, want)
        if op != "nn.gemm":
            viewed = x.transpose(attrs["lhs_axes"]) if attrs.get("lhs_axes") else x
            np.testing.assert_array_equal(target, _rows_product(viewed, rhs))


@pytest.mark.parametrize("lhs_dtype, rhs_dtype, out_dtype", [("float16", "float16", "float16"),
                                                             ("float16", "float32", "float32"),
                                                             ("float32", "float16", "float16")])
def test_widened_float16_batches_are_one_gemm_too(monkeypatch, lhs_dtype, rhs_dtype, out_dtype):
    """float16 products widen to float32 and multiply there (matmul's low-float branch): a batch
    by a large matrix is one GEMM of its rows there too, the float32 rows' product rounded once."""
    rng = np.random.default_rng(17)
    lhs, rhs = rand(rng, (7, 17, K), lhs_dtype), rand(rng, (K, N), rhs_dtype)
    out = np.empty((7, 17, N), out_dtype)
    spy = _MatmulSpy()
    monkeypatch.setattr(np, "matmul", spy)
    linalg.matmul(lhs, rhs, out=out, out_dtype=None)
    monkeypatch.undo()
    assert spy.calls == [((7 * 17, K), (K, N))]
    want = _rows_product(lhs.astype(np.float32), rhs.astype(np.float32)).astype(out_dtype)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("op, attrs, constant, shape", KEPT[:2] + KEPT[4:5], ids=str)
def test_kept_float16_batch_products_are_the_plain_kernel(op, attrs, constant, shape):
    """The specialized float16 products (a bound weight's kept float32 copy; the kept widened
    buffers of activations) give the plain kernel's bits over calls."""
    rng = np.random.default_rng(19)
    call = get_kernel(op).fn.specialize_attrs(attrs, constant)
    rhs = rand(rng, (K, N), "float16")
    lhs = _arena_view(shape, np.float16)
    stored = lhs.transpose(attrs["lhs_axes"]) if attrs.get("lhs_axes") else lhs
    out = _arena_view(stored.shape[:-1] + (N,), np.float16)
    for _ in range(3):
        lhs[...] = rand(rng, lhs.shape, "float16")
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, _generic(op, attrs, lhs, rhs))


def test_a_kept_widened_float16_batch_by_a_large_float32_matrix():
    """A small float16 batch by a large float32 matrix, both activations: the specialized product
    keeps its widened buffers (linalg._Widened) and multiplies the rows as the plain kernel does."""
    from relaxpack.runtime.kernels.linalg import _Widened
    rng = np.random.default_rng(23)
    attrs = {"out_dtype": None}
    call = get_kernel("matmul").fn.specialize_attrs(attrs, (False, False))
    lhs, rhs = _arena_view((2, 3, K), np.float16), _arena_view((K, N), np.float32)
    out = _arena_view((2, 3, N), np.float16)
    for _ in range(3):
        lhs[...], rhs[...] = rand(rng, lhs.shape, "float16"), rand(rng, rhs.shape, "float32")
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, _generic("matmul", attrs, lhs, rhs))
    kept = [item for cell in call.__closure__ if isinstance(cell.cell_contents, list)
            for item in cell.cell_contents if isinstance(item, _Widened)]
    assert kept                                         # the kept buffers' path was the one taken
