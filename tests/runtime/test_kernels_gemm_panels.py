"""A few rows by a large float32 matrix as small products of column panels (kernels/gemm_panels.py).

The contract: where :func:`gemm_panels.plan` gives a plan, ``lhs @ rhs`` is one small product per
block of rows and panel of columns, no block of one row (a GEMV rounds otherwise); the generic
matmul kernel (panels as a strided view) and every specialized path of a bound weight (its packed
copy) give the same bits, call after call. The panels are forced on here, so the contract is
checked on any CPU; only the speed needs OpenBLAS's SkylakeX small-matrix kernels.
"""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import gemm_panels, get_kernel, linalg
from relaxpack.runtime.kernels.fused import _specialize_gemm
from relaxpack.runtime.kernels.linalg import _specialize_matmul


@pytest.fixture
def panels_on(monkeypatch):
    """Panels taken as on a SkylakeX OpenBLAS with one thread, whatever this machine has."""
    monkeypatch.setattr(gemm_panels, "available", lambda: True)
    monkeypatch.setattr(gemm_panels, "get_blas_threads", lambda: 1)


def _weight(rng, inner, columns, dtype=np.float32):
    return rng.standard_normal((inner, columns)).astype(dtype)


def _arena_view(shape, dtype=np.float32):
    size = int(np.prod(shape))
    return np.empty(size + 8, dtype)[4:4 + size].reshape(shape)


@pytest.mark.parametrize("inner,columns", [(768, 3072), (3072, 768), (384, 384), (1000, 640), (768, 1041),
                                           (128, 529)])
def test_plan_keeps_each_product_small_and_no_block_one_row(panels_on, inner, columns):
    rhs = np.zeros((inner, columns), np.float32)
    for rows in range(2, 140):
        width, block = gemm_panels.plan(rows, rhs)
        assert columns >= width and width % 16 == 0
        assert block >= 2 and block * width * inner <= gemm_panels.SMALL_PRODUCT_MAX
        assert rows % block != 1 and min(rows, block) == block
        assert width == gemm_panels.width_of(inner, columns)            # one width for every row count


@pytest.mark.parametrize("inner,columns,width", [(768, 3072, 64), (1953, 768, 64), (1954, 768, 32), (3072, 768, 32),
                                                 (4096, 1024, 32), (15625, 64, 32), (15626, 64, 16), (768, 40, 32),
                                                 (31250, 64, 16), (31251, 64, None)])
def test_the_width_is_the_widest_whose_blocks_hold_enough_rows(inner, columns, width):
    assert gemm_panels.width_of(inner, columns) == width


@pytest.mark.parametrize("columns,padded", [(1024, None), (1025, 16), (1041, 32), (1087, 64), (1088, None)])
def test_the_columns_past_the_whole_panels_are_one_padded_panel(columns, padded):
    rng = np.random.default_rng(columns)
    rhs = _weight(rng, 40, columns)
    panels, last = gemm_panels.view(rhs, 64), gemm_panels.tail(rhs, 64)
    assert panels.shape == (columns // 64, 40, 64) and np.shares_memory(panels, rhs)
    np.testing.assert_array_equal(np.concatenate(list(panels), axis=1), rhs[:, :columns - columns % 64])
    if padded is None:
        assert last is None
        return
    assert last.shape == (1, 40, padded)
    np.testing.assert_array_equal(last[0, :, :columns % 64], rhs[:, columns - columns % 64:])
    assert not last[0, :, columns % 64:].any()


def test_plan_leaves_the_rest_to_one_gemm(panels_on, monkeypatch):
    big = np.zeros((768, 3072), np.float32)
    assert gemm_panels.plan(1, big) is None                                  # one row: a GEMV
    assert gemm_panels.plan(16, big.astype(np.float64)) is None              # float32 only
    assert gemm_panels.plan(16, np.zeros((256, 128), np.float32)) is None    # below MIN_RHS_BYTES
    assert gemm_panels.plan(2, np.zeros((6000, 12), np.float32)) is None     # fewer columns than a panel
    assert gemm_panels.plan(16, np.zeros((3072, 768), np.float32).T) is None  # not C-contiguous
    assert gemm_panels.plan(3, np.zeros((40000, 16), np.float32)) is None    # no panel small enough
    monkeypatch.setattr(gemm_panels, "get_blas_threads", lambda: 2)          # threaded GEMM past 16 rows
    assert gemm_panels.plan(16, big) is not None and gemm_panels.plan(17, big) is None
    monkeypatch.setattr(gemm_panels, "available", lambda: False)
    assert gemm_panels.plan(16, big) is None


@pytest.mark.parametrize("inner,columns,width", [(144, 64, 64), (144, 48, 16), (1152, 32, 32), (27, 32, 32),
                                                 (72, 24, None), (16, 96, 32)])
def test_a_small_weight_takes_panels_by_many_rows_and_whole_panels(panels_on, inner, columns, width):
    """Below MIN_RHS_BYTES a weight takes panels only where its one GEMM would not be a small product
    (rows * inner * columns over 100^3) and at a width that divides its columns (no padded tail);
    the callers' filter, ``considered``, lets through every product that plan takes."""
    rhs = np.zeros((inner, columns), np.float32)
    assert rhs.nbytes < gemm_panels.MIN_RHS_BYTES
    assert gemm_panels.width_of(inner, columns, whole=True) == width
    for rows in range(2, 3000, 7):
        chosen = gemm_panels.plan(rows, rhs)
        if rows * inner * columns > gemm_panels.SMALL_PRODUCT_MAX and width is not None:
            assert chosen is not None and chosen[0] == width
            assert gemm_panels.considered(rows * inner, rhs)
        else:
            assert chosen is None


@pytest.mark.parametrize("shape", [(400, 144), (3, 150, 144), (1, 30, 30, 144)])
@pytest.mark.parametrize("kernel", ["matmul", "nn.gemm"])
def test_a_small_weight_by_many_rows_agrees_on_every_path(panels_on, monkeypatch, shape, kernel):
    products = []
    real = gemm_panels.product
    monkeypatch.setattr(gemm_panels, "product", lambda *args: (products.append(1), real(*args))[1])
    rng = np.random.default_rng(5)
    rhs = _weight(rng, 144, 48)
    lhs = _arena_view(shape)
    lhs[...] = rng.standard_normal(shape)
    expected = np.empty(shape[:-1] + (48,), np.float32)
    get_kernel("matmul").fn(lhs, rhs, out=expected, out_dtype=None)
    assert len(products) == 1
    call = _specialize_matmul({"out_dtype": None}, (False, True)) if kernel == "matmul" else \
        _specialize_gemm({"activation": None}, (False, True))
    out = _arena_view(expected.shape)
    for _ in range(3):
        out[...] = np.nan
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, expected)
    assert len(products) == 4
    np.testing.assert_allclose(expected, lhs.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def _panel_by_panel(lhs, rhs, width, block):
    """``lhs @ rhs`` as one product per block of rows and panel, the last panel zero-padded."""
    rows, columns = lhs.shape[0], rhs.shape[1]
    expected = np.empty((rows, columns), np.float32)
    for start in range(0, rows, block):
        for column in range(0, columns, width):
            panel = rhs[:, column:column + width]
            padded = np.zeros((rhs.shape[0], -(-panel.shape[1] // 16) * 16), np.float32)
            padded[:, :panel.shape[1]] = panel
            part = np.empty((min(block, rows - start), padded.shape[1]), np.float32)
            np.matmul(lhs[start:start + block], padded, out=part)
            expected[start:start + block, column:column + width] = part[:, :panel.shape[1]]
    return expected


@pytest.mark.parametrize("columns", [1024, 1025, 1041, 1087])
@pytest.mark.parametrize("rows", [2, 3, 5, 16, 17, 33, 61])
def test_product_is_one_small_product_per_block_and_panel(panels_on, rows, columns):
    rng = np.random.default_rng(rows)
    rhs = _weight(rng, 768, columns)
    lhs = rng.standard_normal((rows, 768)).astype(np.float32)
    width, block = gemm_panels.plan(rows, rhs)
    expected = _panel_by_panel(lhs, rhs, width, block)
    last = gemm_panels.tail(rhs, width)
    for panels in (gemm_panels.view(rhs, width), gemm_panels.packed(rhs, width)):
        out = np.empty_like(expected)
        gemm_panels.product(lhs, panels, out, block, last)
        np.testing.assert_array_equal(out, expected)
    np.testing.assert_allclose(expected, lhs.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("columns", [384, 389])
@pytest.mark.parametrize("shape", [(2, 768), (17, 768), (1, 16, 768), (3, 7, 768), (2, 3, 11, 768), (1, 768)])
@pytest.mark.parametrize("kernel", ["matmul", "nn.gemm"])
def test_generic_and_bound_weight_paths_agree_bit_for_bit(panels_on, shape, kernel, columns):
    rng = np.random.default_rng(len(shape))
    rhs = _weight(rng, 768, columns)
    lhs = _arena_view(shape)
    lhs[...] = rng.standard_normal(shape)
    expected = np.empty(shape[:-1] + (columns,), np.float32)
    get_kernel("matmul").fn(lhs, rhs, out=expected, out_dtype=None)
    if kernel == "matmul":
        call = _specialize_matmul({"out_dtype": None}, (False, True))
    else:
        call = _specialize_gemm({"activation": None}, (False, True))
    out = _arena_view(expected.shape)
    for _ in range(3):                  # the first call, then the kept ones
        out[...] = np.nan
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, expected)
    fresh = np.empty(expected.shape, np.float32)          # a model output, a new array each call
    call(lhs, rhs, out=fresh)
    np.testing.assert_array_equal(fresh, expected)
    np.testing.assert_allclose(expected, lhs.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def test_matmul_takes_panels_where_planned(panels_on, monkeypatch):
    calls = []
    real = gemm_panels.product
    monkeypatch.setattr(gemm_panels, "product", lambda *args: (calls.append(args[1].shape), real(*args))[1])
    rng = np.random.default_rng(0)
    rhs = _weight(rng, 768, 3072)
    for rows, taken in ((16, True), (1, False)):
        lhs = rng.standard_normal((rows, 768)).astype(np.float32)
        out = np.empty((rows, 3072), np.float32)
        calls.clear()
        linalg.matmul(lhs, rhs, out=out, out_dtype=None)
        assert bool(calls) is taken
        np.testing.assert_allclose(out, lhs.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def test_a_bound_weight_is_packed_once(panels_on, monkeypatch):
    packs = []
    real = gemm_panels.packed
    monkeypatch.setattr(gemm_panels, "packed", lambda rhs, width: (packs.append(width), real(rhs, width))[1])
    rng = np.random.default_rng(1)
    rhs = _weight(rng, 768, 768)
    call = _specialize_gemm({"activation": "relu"}, (False, True, True))
    bias = rng.standard_normal(768).astype(np.float32)
    for rows in (5, 9, 5):
        lhs = rng.standard_normal((rows, 768)).astype(np.float32)
        out = _arena_view((rows, 768))
        call(lhs, rhs, bias, out=out)
        np.testing.assert_allclose(out, np.maximum(lhs.astype(np.float64) @ rhs + bias, 0), rtol=1e-4, atol=1e-3)
    assert len(packs) == 1


def test_a_bound_weight_is_packed_once_for_every_row_count(panels_on, monkeypatch):
    """The rows move across the bounds where a per-call width would change (3072 deep: 64 columns
    hold 5 rows, 32 hold 10): the panels packed at the first call serve them all."""
    packs = []
    real = gemm_panels.packed
    monkeypatch.setattr(gemm_panels, "packed", lambda rhs, width: (packs.append(width), real(rhs, width))[1])
    rng = np.random.default_rng(4)
    rhs = _weight(rng, 3072, 768)
    call = _specialize_matmul({"out_dtype": None}, (False, True))
    for rows in (16, 3, 16, 5, 2, 9, 4):
        lhs = rng.standard_normal((rows, 3072)).astype(np.float32)
        out = _arena_view((rows, 768))
        call(lhs, rhs, out=out)
        expected = np.empty((rows, 768), np.float32)
        linalg.matmul(lhs, rhs, out=expected, out_dtype=None)               # the generic kernel's view
        np.testing.assert_array_equal(out, expected)
    assert packs == [32]


@pytest.mark.parametrize("lhs_shape,rhs_shape", [((2, 5, 768), (3, 1, 768, 389)), ((16, 768), (2, 768, 384)),
                                                 ((4, 768), (3, 1, 1, 768, 384)), ((1, 7, 768), (2, 1, 768, 384))])
@pytest.mark.parametrize("kernel", ["matmul", "nn.gemm"])
def test_a_stack_of_matrices_is_each_matrix_by_panels_on_every_path(panels_on, lhs_shape, rhs_shape, kernel):
    """MergeProjections' q/k/v: ``lhs @ rhs`` with ``rhs`` ``(B, 1, .., K, N)`` is ``B`` products of
    ``lhs`` by each matrix, each one small product per block and panel, the same bits on every path."""
    rng = np.random.default_rng(len(lhs_shape) + rhs_shape[-1])
    rhs = rng.standard_normal(rhs_shape).astype(np.float32)
    lhs = _arena_view(lhs_shape)
    lhs[...] = rng.standard_normal(lhs_shape)
    out_shape = np.matmul(lhs[..., :1, :], rhs[..., :1]).shape[:-2] + lhs_shape[-2:-1] + rhs_shape[-1:]
    rows = lhs.reshape(-1, 768)
    width, block = gemm_panels.plan(rows.shape[0], rhs.reshape(-1, 768, rhs_shape[-1])[0])
    expected = np.stack([_panel_by_panel(rows, matrix, width, block)
                         for matrix in rhs.reshape(-1, 768, rhs_shape[-1])]).reshape(out_shape)
    generic = np.empty(out_shape, np.float32)
    get_kernel("matmul").fn(lhs, rhs, out=generic, out_dtype=None)
    np.testing.assert_array_equal(generic, expected)
    if kernel == "matmul":
        call = _specialize_matmul({"out_dtype": None}, (False, True))
    else:
        call = _specialize_gemm({"activation": None}, (False, True))
    out = _arena_view(out_shape)
    for _ in range(3):
        out[...] = np.nan
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, expected)
    np.testing.assert_allclose(expected, lhs.astype(np.float64) @ rhs, rtol=1e-4, atol=1e-3)


def test_a_stack_takes_panels_only_as_one_result_per_matrix(panels_on):
    rhs = np.zeros((3, 1, 768, 384), np.float32)
    lhs = np.zeros((2, 5, 768), np.float32)
    assert gemm_panels.applies(lhs, rhs, np.empty((3, 2, 5, 384), np.float32))
    assert not gemm_panels.applies(lhs, rhs, np.empty((3, 2, 5, 384), np.float32)[:, :, :, :1])  # not contiguous
    assert not gemm_panels.applies(lhs, np.zeros((3, 2, 768, 384), np.float32), np.empty((3, 2, 5, 384), np.float32))
    assert not gemm_panels.applies(np.zeros((2, 1, 5, 768), np.float32), rhs, np.empty((2, 3, 5, 384), np.float32))
    assert not gemm_panels.applies(lhs[:1, :1], rhs, np.empty((3, 1, 1, 384), np.float32))   # one row: a GEMV
    assert not gemm_panels.applies(lhs, np.zeros((3, 1, 16, 384), np.float32), np.empty((3, 2, 5, 384), np.float32))
    transposed = np.zeros((3, 1, 384, 768), np.float32).transpose(0, 1, 3, 2)    # not one copy per call
    assert not gemm_panels.applies(lhs, transposed, np.empty((3, 2, 5, 384), np.float32))


def test_panels_can_be_turned_off_for_memory(monkeypatch):
    """``set_weight_panels(False)`` (or ``RELAXPACK_WEIGHT_PANELS=0`` at start) makes every product
    one GEMM of the weight as it is: no packed copy."""
    import subprocess
    import sys

    from relaxpack.runtime import set_weight_panels
    monkeypatch.setattr(gemm_panels, "_core", [True])
    monkeypatch.setattr(gemm_panels, "get_blas_threads", lambda: 1)
    big = np.zeros((768, 3072), np.float32)
    assert gemm_panels.plan(16, big) is not None
    try:
        assert set_weight_panels(False) is True
        assert gemm_panels.plan(16, big) is None and not gemm_panels.available()
    finally:
        set_weight_panels(True)
    assert gemm_panels.plan(16, big) is not None
    with pytest.raises(ValueError, match="True or False"):
        set_weight_panels(0)
    code = "from relaxpack.runtime import blas; print(blas.PANELS_ON[0])"
    env = {**__import__("os").environ, "RELAXPACK_WEIGHT_PANELS": "0"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == "False"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(16, 768), (2, 9, 768)])
def test_widened_low_float_products_take_panels_on_both_paths(panels_on, monkeypatch, dtype, shape):
    """A float16 (or bfloat16) product is widened to float32 and made as a float32 one, by panels
    too: the generic kernel (the weight widened each call) and a bound weight's specialized call
    (its widened copy packed once) give the same bits."""
    from relaxpack.runtime.dtypes import numpy_dtype
    low = numpy_dtype(dtype)
    products = []
    real = gemm_panels.product
    monkeypatch.setattr(gemm_panels, "product", lambda *args: (products.append(1), real(*args))[1])
    rng = np.random.default_rng(7)
    rhs = rng.standard_normal((768, 389)).astype(np.float32).astype(low)
    lhs = rng.standard_normal(shape).astype(np.float32).astype(low)
    expected = np.empty(shape[:-1] + (389,), low)
    get_kernel("matmul").fn(lhs, rhs, out=expected, out_dtype=None)
    assert products
    call = _specialize_matmul({"out_dtype": None}, (False, True))
    for _ in range(3):
        out = np.empty_like(expected)
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, expected)
    np.testing.assert_allclose(expected.astype(np.float64), lhs.astype(np.float64) @ rhs.astype(np.float64),
                               rtol=1e-2, atol=0.3)


def test_a_permute_matmul_without_permutations_by_a_bound_weight_packs_it(panels_on, monkeypatch):
    """A fused recipe's product (ConvNeXt's fc2) is a permute_matmul with no permutations: by a
    bound weight it is the specialized matmul, panels packed once, the generic kernel's bits."""
    packs = []
    real = gemm_panels.packed
    monkeypatch.setattr(gemm_panels, "packed", lambda rhs, width: (packs.append(width), real(rhs, width))[1])
    attrs = {"lhs_axes": None, "rhs_axes": None, "out_axes": None, "out_dtype": None}
    rng = np.random.default_rng(11)
    rhs = _weight(rng, 768, 389)
    call = get_kernel("permute_matmul").fn.specialize_attrs(attrs, (False, True))
    for rows in (49, 7, 49):
        lhs = _arena_view((1, rows, 768))
        lhs[...] = rng.standard_normal(lhs.shape)
        expected = np.empty((1, rows, 389), np.float32)
        get_kernel("permute_matmul").fn(lhs, rhs, out=expected, **attrs)
        out = _arena_view(expected.shape)
        call(lhs, rhs, out=out)
        np.testing.assert_array_equal(out, expected)
    assert len(packs) == 1
